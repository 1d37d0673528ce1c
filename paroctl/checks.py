"""Text checks shared by the profile boundary and the renderer: control characters, short reprs."""

from __future__ import annotations

import reprlib
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

Loc = tuple[str, ...]

# C0, DEL and C1, plus the Unicode line and paragraph separators: any of them in a unit, an env
# file or an argv word either ends a line where systemd reads one or hides what the operator sees.
_CONTROL = frozenset(
    [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)] + ["\u2028", "\u2029"]
)
_NAMES = {"\t": "tab", "\n": "line feed", "\r": "carriage return", "\x00": "NUL"}

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlevel = 3
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 4


def short(value: Any, limit: int = 60) -> str:
    """A repr of bounded cost and length (never the whole of an expanded alias bomb)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 400) -> str:
    """Cut a message to `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def control_char(text: str, allow_tab: bool = False) -> str | None:
    """Describe the first control character in text (e.g. 'U+000A (line feed)'), or None."""
    for char in text:
        if char in _CONTROL and not (allow_tab and char == "\t"):
            name = _NAMES.get(char) or unicodedata.name(char, "control character").lower()
            return f"U+{ord(char):04X} ({name})"
    return None


def text_problems(
    data: Any, tab_ok: frozenset[Loc] = frozenset(), str_keyed: frozenset[Loc] = frozenset()
) -> list[tuple[Loc, str]]:
    """Every key or value with a control character, and non-string keys where names are expected.

    `tab_ok` names the fields (a location, or its parent for a list) where a tab is allowed;
    `str_keyed` the mappings whose keys must be strings (names, not band points).
    """
    problems: list[tuple[Loc, str]] = []
    for loc, text, is_key in _strings(data, ()):
        if not isinstance(text, str):
            if loc[:-1] in str_keyed:
                problems.append((loc, f"keys must be strings, got {short(text)} (quote it)"))
            continue
        allow_tab = loc in tab_ok or loc[:-1] in tab_ok
        found = control_char(text, allow_tab=allow_tab)
        if found:
            what = "key" if is_key else "value"
            problems.append((loc, f"{what} contains control character {found}; remove it"))
    return problems


def _strings(node: Any, loc: Loc) -> Iterator[tuple[Loc, Any, bool]]:
    """(location, text, is_key) for every string; a non-string key comes as itself."""
    if isinstance(node, str):
        yield loc, node, False
    elif isinstance(node, Mapping):
        for key, value in node.items():
            # short(), not str(): str() of a 5000-digit int raises, and a tuple key could be huge.
            here = (*loc, key if isinstance(key, str) else short(key))
            yield here, key, True
            yield from _strings(value, here)
    elif isinstance(node, list | tuple):
        for index, value in enumerate(node):
            yield from _strings(value, (*loc, str(index)))
