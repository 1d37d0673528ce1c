"""Secrets: which env names are secret and the 0600 secrets file (the API key a serve wants is
read in paroctl/switch/record.py).

A secret never sits in a profile, an env-forwarding list, argv or `profile show`: the profile names
it (`container.secret_names`) and the value lives in one root-owned 0600 EnvironmentFile
(`container.secrets_env_file`) that systemd reads and podman forwards by name (`--env NAME`).
"""

from __future__ import annotations

import fnmatch
import os
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


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments, optional quotes)."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values
