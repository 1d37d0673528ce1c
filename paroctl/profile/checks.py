"""Text checks for the profile boundary and the renderer: control characters, field shapes."""

from __future__ import annotations

import importlib
import re
import reprlib
import unicodedata
from collections.abc import Iterator, Mapping, Set
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
        if isinstance(text, bytes | bytearray):
            # `!!binary`: pydantic would decode it into any text field, control characters and
            # all, past this check; no profile field holds bytes.
            what = "key" if is_key else "value"
            problems.append((loc, f"{what} is binary (!!binary); write it as text"))
            continue
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
    elif isinstance(node, Set):  # `!!set`: pydantic takes it for a tuple field
        for index, value in enumerate(sorted(node, key=repr)):
            yield from _strings(value, (*loc, str(index)))
    elif isinstance(node, bytes | bytearray):
        yield loc, node, False


# --- field checks, raising ValueError for pydantic's AfterValidator ---------------------------


def absolute_path(value: str) -> str:
    """An absolute path, or one under a {home} / {cache} placeholder (systemd needs absolute)."""
    if not value.startswith(("/", *PLACEHOLDERS)):
        raise ValueError("expected an absolute path (or one under {home} / {cache})")
    # systemd reads a backslash in a unit value as an escape, and at a line's end as a
    # continuation: Quadlet copies a mounted directory to the end of a RequiresMountsFor= line.
    if "\\" in value:
        raise ValueError("a path may not contain a backslash (systemd reads it as an escape)")
    return value


def mount_path(value: str) -> str:
    """An absolute host directory that can be mounted as is."""
    # `src:dst:ro` is how the engine reads a volume: a ':' or ',' here would add a mount or options.
    if ":" in value or "," in value:
        raise ValueError("a mounted directory may not contain ':' or ','")
    # Quadlet lists it in RequiresMountsFor=, whose paths are separated by blanks.
    if any(char.isspace() for char in value):
        raise ValueError("a mounted directory may not contain blanks")
    return absolute_path(value)


def argv_word(value: str) -> str:
    """A value that follows a flag in argv (a served name, a quantization, a group)."""
    # These land in argv after a flag: a leading '-' would make them a flag of their own.
    if not _WORD.fullmatch(value):
        raise ValueError(
            "expected letters, digits and ._:/@+-, starting with a letter, digit or ':'"
        )
    return value


def image_ref(value: str) -> str:
    """A container image reference that cannot be read as an engine flag."""
    if not _IMAGE_REF.fullmatch(value):
        raise ValueError("expected an image reference such as localhost/name:tag (no leading '-')")
    return value


def device(value: str) -> str:
    """An accelerator device node from the allow-list (never /dev/mem, never /)."""
    if not _DEVICE.fullmatch(value):
        raise ValueError(
            "expected an accelerator device under /dev (/dev/kfd, /dev/dri[/cardN|renderDN], "
            "/dev/nvidia*, /dev/infiniband/*, /dev/accel/*)"
        )
    return value


def executable(value: str) -> str:
    """The program a serve runs: a path or a command name, never a systemd prefix or a quote."""
    # ExecStart= reads a leading @-:+!| as a prefix ('+' runs it with full privileges) and
    # unquotes the rest: the first argv word must be a plain path.
    if not _EXECUTABLE.fullmatch(value):
        raise ValueError(
            "expected an absolute path (or one under {home} / {cache}) or a command name: "
            "letters, digits and ._+-/ only"
        )
    return value


def relative_model_path(value: str) -> str:
    """A model directory under box.models_dir (or an absolute path), never climbing out of it."""
    if ".." in value.split("/"):
        raise ValueError("a '..' component climbs out of box.models_dir; name the directory")
    return value


def blank(value: str) -> str:
    """Text with something to find: a blank expect string is found in (nearly) any answer."""
    if not value.strip():
        raise ValueError("blank; expected text to look for")
    return value


def backtracking(pattern: str) -> str | None:
    """Why a regex can take exponential time on a long line (a repeat over a part that itself
    repeats or alternates, as in `(a+)+$`), or None. Python's re has no time limit, and a boot
    marker is matched against every log line of a switch."""
    # re._parser is the parser re.compile runs (sre_parse is its deprecated alias).
    parser: Any = importlib.import_module("re._parser")
    return _nested_repeat(parser.parse(pattern), parser, inside=False)


def _nested_repeat(items: Any, parser: Any, inside: bool) -> str | None:
    repeats = (parser.MAX_REPEAT, parser.MIN_REPEAT, getattr(parser, "POSSESSIVE_REPEAT", None))
    for op, arg in items:
        if op in repeats:
            low, high, body = arg
            if inside and high != low:
                return "a repeat inside a repeat"
            if high > 1:
                found = _nested_repeat(body, parser, inside=True)
            else:
                found = _nested_repeat(body, parser, inside)
        elif op is parser.BRANCH:
            if inside:
                return "an alternation inside a repeat"
            found = next(
                (f for f in (_nested_repeat(b, parser, inside) for b in arg[1]) if f), None
            )
        elif op is parser.SUBPATTERN:
            found = _nested_repeat(arg[-1], parser, inside)
        elif op is getattr(parser, "ATOMIC_GROUP", None):
            found = _nested_repeat(arg, parser, inside)
        elif op in (parser.ASSERT, parser.ASSERT_NOT):
            found = _nested_repeat(arg[1], parser, inside)
        elif op is parser.GROUPREF_EXISTS:
            found = next(
                (f for f in (_nested_repeat(b, parser, inside) for b in arg[1:] if b) if f), None
            )
        else:  # literals, classes, anchors, back references
            found = None
        if found:
            return found
    return None


def no_trailing_backslash(value: str) -> str:
    """Free text for a unit line, which must not end in a continuation backslash."""
    if value.endswith("\\"):
        raise ValueError("ends in a backslash (systemd would join the next line to it)")
    return value


_EXECUTABLE = re.compile(r"(/|\{home\}/|\{cache\}/|[A-Za-z0-9_])[A-Za-z0-9_.+/-]*")
# A leading ':' is allowed for IPv6 hosts (`::1`); a leading '-' never is.
_WORD = re.compile(r"^[A-Za-z0-9:][A-Za-z0-9._:/@+-]*$")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")
_DEVICE = re.compile(
    r"^/dev/(kfd|dri(/(card|renderD)[0-9]{1,3})?|nvidia([0-9]{1,3}|ctl|-uvm|-uvm-tools|-modeset)"
    r"|nvidia-caps(/nvidia-cap[0-9]{1,3})?|infiniband(/[a-z0-9_]{1,32})?|accel(/accel[0-9]{1,3})?)$"
)
