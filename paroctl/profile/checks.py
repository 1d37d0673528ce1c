"""Text checks for the profile boundary and the renderer: control characters, field shapes."""

from __future__ import annotations

import re
import reprlib
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

Loc = tuple[str, ...]
PLACEHOLDERS = ("{home}", "{cache}")

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


# --- field checks, raising ValueError for pydantic's AfterValidator ---------------------------


def absolute_path(value: str) -> str:
    """An absolute path, or one under a {home} / {cache} placeholder (systemd needs absolute)."""
    if not value.startswith(("/", *PLACEHOLDERS)):
        raise ValueError("expected an absolute path (or one under {home} / {cache})")
    return value


def mount_path(value: str) -> str:
    """An absolute host directory that can be mounted as is."""
    # `src:dst:ro` is how the engine reads a volume: a ':' or ',' here would add a mount or options.
    if ":" in value or "," in value:
        raise ValueError("a mounted directory may not contain ':' or ','")
    return absolute_path(value)


def argv_word(value: str) -> str:
    """A value that follows a flag in argv (a served name, a quantization, a group)."""
    # These land in argv after a flag: a leading '-' would make them a flag of their own.
    if not _WORD.match(value):
        raise ValueError(
            "expected letters, digits and ._:/@+-, starting with a letter, digit or ':'"
        )
    return value


def image_ref(value: str) -> str:
    """A container image reference that cannot be read as an engine flag."""
    if not _IMAGE_REF.match(value):
        raise ValueError("expected an image reference such as localhost/name:tag (no leading '-')")
    return value


def device(value: str) -> str:
    """An accelerator device node from the allow-list (never /dev/mem, never /)."""
    if not _DEVICE.match(value):
        raise ValueError(
            "expected an accelerator device under /dev (/dev/kfd, /dev/dri[/cardN|renderDN], "
            "/dev/nvidia*, /dev/infiniband/*, /dev/accel/*)"
        )
    return value


def no_trailing_backslash(value: str) -> str:
    """Free text for a unit line, which must not end in a continuation backslash."""
    if value.endswith("\\"):
        raise ValueError("ends in a backslash (systemd would join the next line to it)")
    return value


# A leading ':' is allowed for IPv6 hosts (`::1`); a leading '-' never is.
_WORD = re.compile(r"^[A-Za-z0-9:][A-Za-z0-9._:/@+-]*$")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
_DEVICE = re.compile(
    r"^/dev/(kfd|dri(/(card|renderD)[0-9]{1,3})?|nvidia([0-9]{1,3}|ctl|-uvm|-uvm-tools|-modeset)"
    r"|nvidia-caps(/nvidia-cap[0-9]{1,3})?|infiniband(/[a-z0-9_]{1,32})?|accel(/accel[0-9]{1,3})?)$"
)
