"""Whether the serve a gate started on still answers: a switch must never pass its answers off.

A switch that keeps the port and the served name (the shipped alias `Qwen3.8` on every variant)
leaves /v1/models unchanged, so only this box's state tells the serves apart: the switch writes
its journal before it stops the old serve and clears it after live.json names the new one (a new
boot id). A gate looks after every answer, before storing it: an answer that arrived while
neither file changed came from the serve the run is labelled with.
"""

from __future__ import annotations

import os
from pathlib import Path

from paroctl import state
from paroctl.errors import ParoctlError, RuntimeFailure
from paroctl.records import LiveRecord
from paroctl.switch import journal

Signature = tuple[int, int, int] | None


def _signature(path: Path) -> Signature:
    """(inode, size, mtime in ns) of a file, None when it is absent: a cheap change detector."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _describe(live: LiveRecord | None) -> str:
    if live is None:
        return "nothing"
    return f"{live.serve.profile} (hash {live.serve.hash or None}, boot {live.boot_id})"


class ServeChanged(RuntimeFailure):
    """The live serve a gate started on was stopped or replaced while the gate ran."""


class ServeWatch:
    """The live record a gate started on, and the state files that change when it goes."""

    def __init__(self, live: LiveRecord | None) -> None:
        self.rebind(live)

    def rebind(self, live: LiveRecord | None) -> None:
        """Watch `live` from now on (also to follow a switch the gate made itself: the KLD
        reference collection switches back)."""
        self.live = live
        self._journal = _signature(journal.path())
        self._live_file = _signature(state.live_path())

    def problem(self) -> str | None:
        """Why the serve may no longer be the one the gate started on, or None while it is."""
        if self.live is None:
            return None  # an endpoint given by URL: nothing on this box says what it serves
        journal_now = _signature(journal.path())
        if journal_now is not None and journal_now != self._journal:
            return (
                f"a switch started on this box ({journal.path()}) while the gate ran against "
                f"{_describe(self.live)}"
            )
        live_now = _signature(state.live_path())
        if live_now == self._live_file:
            return None
        try:
            current = state.read_live()
        except ParoctlError as exc:
            return f"the live record became unreadable ({exc.message})"
        if current is None or _identity(current) != _identity(self.live):
            return f"the live serve changed from {_describe(self.live)} to {_describe(current)}"
        self._live_file = live_now  # rewritten with the same serve (an adopt): still ours
        return None

    def check(self) -> None:
        """Raise ServeChanged when the serve is no longer the one the gate started on."""
        why = self.problem()
        if why is not None:
            raise ServeChanged(why)


def _identity(live: LiveRecord) -> tuple[str, str | None, str | None, str, int]:
    serve = live.serve
    return (serve.profile, serve.hash or None, live.boot_id, serve.host, serve.port)
