"""Secrets: which env names are secret and the 0600 secrets file (the API key a serve wants is
read in paroctl/switch/record.py).

A secret never sits in a profile, an env-forwarding list, argv or `profile show`: the profile names
it (`container.secret_names`) and the value lives in one root-owned 0600 EnvironmentFile
(`container.secrets_env_file`) that systemd reads and podman forwards by name (`--env NAME`).
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

# Names that hold credentials by convention (HF_TOKEN, VLLM_API_KEY, *_SECRET, ...); matched on the
# upper-cased name. `*_TOKEN` does not match `*_TOKENS` (VLLM_..._MAX_TOKENS is a count).
SECRET_PATTERNS = (
    "*_TOKEN",
    "*_KEY",
    "*_SECRET",
    "*_SECRET_*",
    "*_PASSWORD",
    "*_PASSWD",
    "*_CREDENTIALS",
    "*_API_KEY*",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "VLLM_API_KEY",
)
API_KEY_NAME = "VLLM_API_KEY"  # vLLM's server reads it when --api-key is not given
REDACTED = "<secret: not shown>"


def is_secret(name: str) -> bool:
    """True when an environment name looks like a credential."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_PATTERNS)


def redact(env: dict[str, str]) -> dict[str, str]:
    """env with every secret-looking value replaced (belt and braces for `profile show`)."""
    return {name: REDACTED if is_secret(name) else value for name, value in env.items()}


def file_problems(path: str, names: Iterable[str] = (), owner_uid: int = 0) -> list[str]:
    """What is wrong with a secrets EnvironmentFile, each with the command that fixes it."""
    if not path.startswith("/"):
        return [f"{path}: not an absolute path (systemd ignores a relative EnvironmentFile)"]
    try:
        info = os.stat(path)
    except FileNotFoundError:
        fix = f"install -m 600 -o root -g root /dev/null {path}"
        return [f"{path}: does not exist; create it: {fix}"]
    except OSError as exc:
        return [f"{path}: cannot stat it ({exc.strerror})"]
    if not stat.S_ISREG(info.st_mode):
        return [f"{path}: not a regular file"]
    problems = []
    if info.st_uid != owner_uid:
        owner = f"owned by uid {info.st_uid}, not root"
        problems.append(f"{path}: {owner}; fix: chown root:root {path}")
    if info.st_mode & 0o077:
        mode = f"{stat.S_IMODE(info.st_mode):o}"
        problems.append(f"{path}: mode {mode} lets others read it; fix: chmod 600 {path}")
    try:
        values = parse_env_file(Path(path).read_text())
    except (OSError, UnicodeDecodeError):
        return problems  # not readable by this user: its names are checked when it is
    for name in names:
        if not values.get(name):
            problems.append(f"{path}: does not set {name} (named in container.secret_names)")
    return problems


def _append(buf: list[str], char: str, blank: int) -> int:
    """Append char to an unquoted key or value; return where its run of trailing blanks starts
    (-1: none), which systemd drops at the end of the key or the line."""
    if char not in _BLANKS:
        blank = -1
    elif blank < 0:
        blank = len(buf)
    buf.append(char)
    return blank


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE assignments exactly as systemd's EnvironmentFile= reads them: a port of
    load_env_file (systemd 252, basic/env-file.c), keeping what PID 1 then passes on (a valid
    name; `KEY=` sets KEY to empty); tests hold it equal to the real parser over fuzzed files
    (tests/test_env_files.py)."""
    return {key: value for key, value in _env_file_pairs(text) if _ENV_NAME.fullmatch(key)}


def _env_file_pairs(text: str) -> list[tuple[str, str]]:
    """(key, value) in file order, as systemd's parser yields them."""
    pairs: list[tuple[str, str]] = []
    state = "pre_key"
    key: list[str] = []
    value: list[str] = []
    key_blank = value_blank = -1  # where trailing blanks start (-1: none)

    def push(chomp: bool) -> None:
        name = "".join(key[:key_blank] if key_blank >= 0 else key)
        pairs.append((name, "".join(value[:value_blank] if chomp and value_blank >= 0 else value)))

    for char in text:
        if state == "pre_key":
            if char in "#;":
                state = "comment"
            elif char not in _BLANKS:
                state, key, value, key_blank = "key", [char], [], -1
        elif state == "key":
            if char in "\n\r":
                state = "pre_key"
            elif char == "=":
                state, value_blank = "pre_value", -1
            else:
                key_blank = _append(key, char, key_blank)
        elif state == "pre_value":
            if char in "\n\r":
                push(chomp=False)
                state = "pre_key"
            elif char in "'\"\\":
                state = {"'": "single", '"': "double", "\\": "value_escape"}[char]
            elif char not in _BLANKS:
                state = "value"
                value.append(char)
        elif state == "value":
            if char in "\n\r":
                push(chomp=True)
                state = "pre_key"
            elif char == "\\":
                state, value_blank = "value_escape", -1
            else:
                value_blank = _append(value, char, value_blank)
        elif state == "value_escape":
            state = "value"
            if char not in "\n\r":  # an escaped line break is a continuation: eaten
                value.append(char)
        elif state == "single":
            if char == "'":
                state = "pre_value"
            else:
                value.append(char)
        elif state == "double":
            if char == '"':
                state = "pre_value"
            elif char == "\\":
                state = "double_escape"
            else:
                value.append(char)
        elif state == "double_escape":
            state = "double"
            if char in '"\\`$':
                value.append(char)
            elif char != "\n":
                value += ["\\", char]
        elif state == "comment":
            if char == "\\":
                state = "comment_escape"
            elif char in "\n\r":
                state = "pre_key"
        else:  # comment_escape: systemd 252 continues a comment past an escaped line break
            state = "comment"
    if state in ("pre_value", "value", "value_escape", "single", "double", "double_escape"):
        push(chomp=state == "value")
    return pairs


_BLANKS = " \t\n\r"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
