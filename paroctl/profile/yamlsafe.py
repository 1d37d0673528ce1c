"""Bounded reading of operator YAML: regular files only, a size cap, alias and nesting limits."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# A shipped profile is ~2 KB and ~150 nodes; these leave room for any honest file and stop a
# 496-byte alias bomb (seconds and gigabytes in pydantic and repr) or a 50 MB file at the door.
MAX_BYTES = 1 << 20
MAX_NODES = 20_000
MAX_DEPTH = 32
MAX_SCALAR = 64 * 1024


class LoadError(Exception):
    """A file that is not read: not a regular file, too large, or YAML past the limits."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def read_text(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most max_bytes; stat first, so a FIFO never blocks."""
    _check_stat(os.stat(path), max_bytes)
    # O_NONBLOCK: a FIFO swapped in after the stat still opens at once (and fstat refuses it).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        _check_stat(os.fstat(handle.fileno()), max_bytes)
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise LoadError(f"larger than {max_bytes} bytes")
    return raw.decode("utf-8")


def _check_stat(info: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise LoadError(f"not a regular file ({_kind(info.st_mode)}); a profile is a plain file")
    if info.st_size > max_bytes:
        raise LoadError(f"{info.st_size} bytes; a profile is at most {max_bytes} bytes")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _without_yaml11_numbers(base: Any) -> Any:
    """base (a SafeLoader) without YAML 1.1's surprising numbers: `2:14:03` (sexagesimal, 8043)
    and `0777` (octal, 511) stay strings, so a typed field refuses them instead of reading
    another number."""
    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    loader: Any = type(f"_Strict{base.__name__}", (base,), {})
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(
        int_tag,
        re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
        list("-+0123456789"),
    )
    loader.add_implicit_resolver(
        float_tag,
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    return loader


_Loader = _without_yaml11_numbers(yaml.SafeLoader)
# libyaml's parser where PyYAML has it: 10x faster (a profile loads in ~1.5 ms, not ~17 ms on a
# slow core). Its error texts differ, so a file it refuses is parsed again by the pure parser,
# whose messages (line, column, what was expected) are the ones users and tests see.
_FastLoader = _without_yaml11_numbers(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load(text: str) -> Any:
    """yaml.safe_load, after an event pass that bounds nesting, alias expansion and duplicates."""
    loader = _FastLoader
    try:
        _scan(text, loader)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):
            # libyaml stops at 1000 levels, far past ours; the pure scanner would take O(depth^2)
            # (seconds on a loaded core) to reach the same verdict, so say it now.
            raise LoadError(f"nested deeper than {MAX_DEPTH} levels") from exc
        loader = _Loader  # refused: the pure parser says why, in its own words (raises here)
        _scan(text, loader)
    try:
        return yaml.load(text, Loader=loader)  # SafeLoader subclasses: no arbitrary objects
    except (ValueError, TypeError, OverflowError, AttributeError, KeyError, IndexError) as exc:
        # The constructors' own failures on explicit tags: int() of 5000 digits or `!!int abc`
        # (ValueError), `!!timestamp x` (AttributeError on a failed match), `!!bool maybe`
        # (KeyError in its value table); the fuzz found the last two.
        raise LoadError(f"a value cannot be constructed: {str(exc)[:120]}") from exc


@dataclass
class _Node:
    """An open mapping or sequence during the scan."""

    anchor: str | None
    start: int
    is_map: bool
    expect_key: bool = True
    keys: set[str] = field(default_factory=set)


def _scan(text: str, loader: Any) -> None:
    """Walk the event stream (the parser is iterative: deep nesting cannot overflow it here)."""
    sizes: dict[str, int] = {}
    stack: list[_Node] = []
    expanded = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in sizes:
                raise LoadError(f"alias *{str(event.anchor)[:40]} is undefined or refers to itself")
            grown = sizes[event.anchor]
        elif isinstance(event, yaml.ScalarEvent | yaml.CollectionStartEvent):
            grown = 1
        elif isinstance(event, yaml.CollectionEndEvent):
            node = stack.pop()
            if node.anchor:
                sizes[node.anchor] = expanded - node.start
            continue
        else:
            continue
        if stack:
            _key(stack[-1], event)
        if isinstance(event, yaml.ScalarEvent):
            if len(event.value) > MAX_SCALAR:
                raise LoadError(f"a value of {len(event.value)} characters (at most {MAX_SCALAR})")
            if event.anchor:
                sizes[event.anchor] = 1
        expanded += grown
        if expanded > MAX_NODES:
            raise LoadError(f"expands to more than {MAX_NODES} values (YAML aliases?)")
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append(
                _Node(event.anchor, expanded - 1, isinstance(event, yaml.MappingStartEvent))
            )
            if len(stack) > MAX_DEPTH:
                raise LoadError(f"nested deeper than {MAX_DEPTH} levels")


def _key(parent: _Node, event: yaml.Event) -> None:
    """Track a mapping's keys: a repeated key is an error, not last-one-wins."""
    if not parent.is_map:
        return
    if parent.expect_key and isinstance(event, yaml.ScalarEvent) and event.value != "<<":
        if event.value in parent.keys:
            line = event.start_mark.line + 1 if event.start_mark else "?"
            raise LoadError(f"duplicate key {event.value[:60]!r} at line {line}")
        parent.keys.add(event.value)
    parent.expect_key = not parent.expect_key
