"""The one interface every runtime (local process, systemd unit) offers to the switch."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ServeSpec:
    """One serve to start: its name, exact command line, extra environment and listening address.

    `env` holds only what the serve needs on top of the runtime's own environment; a runtime
    forwards it explicitly, so a knob is never left to a default inside the serve.
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    port: int = 8000
    host: str = "127.0.0.1"
    hash: str = ""  # the profile hash it serves, recorded where the runtime can keep it

    def __post_init__(self) -> None:
        # Frozen means frozen: copy the caller's dict so later edits to it cannot leak in.
        object.__setattr__(self, "argv", tuple(str(part) for part in self.argv))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


@runtime_checkable
class Runtime(Protocol):
    """Start, stop and inspect named serves."""

    def start(self, spec: ServeSpec) -> None:
        """Start the serve described by spec; fail if one of that name is already active."""
        ...

    def stop(self, name: str, grace_s: float) -> None:
        """Stop a serve: ask politely, kill after grace_s, return once every process is gone."""
        ...

    def is_active(self, name: str) -> bool:
        """Whether the serve we started under this name is still running."""
        ...

    def main_pid(self, name: str) -> int | None:
        """The serve's main process id while it is active, else None."""
        ...

    def log_path(self, name: str) -> Path:
        """Where the serve's current log is written."""
        ...

    def logs(self, name: str, follow: bool = False) -> Iterator[str]:
        """The serve's log lines; with follow, keep yielding new lines while the serve is active."""
        ...

    def running_hash(self, name: str) -> str | None:
        """The profile hash the active serve was started from (None: not active, or unknown)."""
        ...
