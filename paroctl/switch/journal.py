"""The switch journal: one small JSON file in PAROCTL_HOME saying what a switch is doing right now.

Each step is written (atomically, fsynced, the directory too) before it is taken, so a paroctl
killed at any point leaves a record of the serve that may be running while live.json names
nothing or the old serve. The switch clears the journal when it ends (new serve live, rolled
back, or left stopped). A journal whose owner is gone is an interrupted switch: the next
status/stop/switch acts on it (paroctl/recovery.py).
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paroctl import env, state
from paroctl.errors import StateError
from paroctl.procfs import kernel_boot_id, read_proc
from paroctl.records import LiveRecord, ServeRef

VERSION = 1
FILE = "journal.json"
# In order; "rolling-back" is followed by "starting"/"verifying" of the previous profile. "recorded"
# is read, no longer written: live.json carrying the entry's boot id says the switch finished.
STEPS = ("stopping-old", "old-gone", "starting", "verifying", "recorded", "rolling-back")


@dataclass(frozen=True)
class Owner:
    """The switching paroctl process, identified so that a reused pid is not mistaken for it."""

    pid: int
    start_ticks: int
    host_boot: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class Entry:
    """One switch in progress: intent (from -> to, owner, boot id), the step reached, what runs
    (the serve that may run: found by runtime and name, proven by port and names; its main pid
    once started)."""

    boot_id: str
    from_profile: str | None
    from_hash: str | None
    to_profile: str
    owner: Owner
    step: str
    serve: ServeRef | None
    rolling_back: bool = False
    started_at: str = ""
    updated_at: str = ""
    version: int = field(default=VERSION)
    pid: int | None = None  # on disk inside "serve", as it always was

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able), the keys the journal file has always had."""
        data = asdict(self)
        pid = data.pop("pid")
        data["serve"] = None if self.serve is None else {**self.serve.as_dict(), "pid": pid}
        return data


def path() -> Path:
    """Where the journal lives."""
    return state.home() / FILE


def new_boot_id() -> str:
    """A fresh boot id (the BootRecord of the serve this switch starts carries it)."""
    return uuid.uuid4().hex[:12]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def me() -> Owner:
    """This process as a journal owner."""
    pid = os.getpid()
    info = read_proc(pid)
    return Owner(pid, info.start_ticks if info else -1, kernel_boot_id(), _cmdline(pid) or ())


def owner_alive(owner: Owner) -> bool:
    """Whether the journal's owner still runs: same pid, start time, boot and command line."""
    info = read_proc(owner.pid)
    if info is None or info.state in ("Z", "X"):
        return False
    # A pid is reused once its process is gone; start ticks (per boot) and the cmdline are not.
    return (
        info.start_ticks == owner.start_ticks
        and owner.host_boot == kernel_boot_id()
        and _cmdline(owner.pid) == owner.cmdline
    )


def write(entry: Entry) -> None:
    """Put the entry on disk durably: the file (atomic_write fsyncs it) and its directory entry."""
    target = path()
    text = json.dumps(entry.as_dict(), indent=2, sort_keys=True) + "\n"
    state.atomic_write(target, text)
    state.fsync_dir(target.parent)


def read() -> Entry | None:
    """The journal's entry, or None when no switch is recorded as under way."""
    try:
        data = json.loads(path().read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise StateError(_unreadable(f"unreadable ({exc})")) from exc
    try:
        return from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(_unreadable(f"not a journal entry ({exc})")) from exc


def _unreadable(why: str) -> str:
    return f"{path()}: {why}; `paroctl repair` moves it aside (then `paroctl status`)"


def from_dict(data: Mapping[str, Any]) -> Entry:
    """Parse a journal entry as written by write(); raise KeyError/TypeError/ValueError if not."""
    if data.get("version") != VERSION:
        raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
    if data["step"] not in STEPS:
        raise ValueError(f"unknown step {data['step']!r}")
    owner = data["owner"]
    serve = data["serve"]
    return Entry(
        boot_id=str(data["boot_id"]),
        from_profile=data["from_profile"],
        from_hash=data["from_hash"],
        to_profile=str(data["to_profile"]),
        owner=Owner(
            int(owner["pid"]),
            int(owner["start_ticks"]),
            str(owner["host_boot"]),
            tuple(owner["cmdline"]),
        ),
        step=str(data["step"]),
        serve=None if serve is None else _serve(serve),
        rolling_back=bool(data["rolling_back"]),
        started_at=str(data["started_at"]),
        updated_at=str(data["updated_at"]),
        pid=None if serve is None or serve.get("pid") is None else int(serve["pid"]),
    )


def _serve(data: Mapping[str, Any]) -> ServeRef:
    # Every key is required here: the journal always writes them all.
    return ServeRef(
        profile=str(data["profile"]),
        hash=str(data["hash"]),
        runtime=str(data["runtime"]),
        scope=str(data["scope"]),
        host=str(data["host"]),
        port=int(data["port"]),
        served_names=tuple(str(name) for name in data["served_names"]),
        grace_s=float(data["grace_s"]),
    )


def clear() -> None:
    """Remove the journal: the switch ended in a state live.json describes."""
    try:
        path().unlink()
    except FileNotFoundError:
        return  # cleared already (verify_running clears it right after live.json is written)
    state.fsync_dir(path().parent)


_KEEP: Any = object()


class Journal:
    """The journal of the switch this process runs: every step is on disk before it is taken."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry

    @classmethod
    def begin(cls, live: LiveRecord | None, to_profile: str) -> Journal:
        """Record the intent: from what is live to to_profile, owned by this process."""
        now = _now()
        entry = Entry(
            boot_id=new_boot_id(),
            from_profile=None if live is None else live.serve.profile,
            from_hash=None if live is None else live.serve.hash,
            to_profile=to_profile,
            owner=me(),
            step="stopping-old" if live else "old-gone",
            serve=None if live is None else live.serve,
            started_at=now,
            updated_at=now,
        )
        write(entry)
        return cls(entry)

    @classmethod
    def take_over(cls, entry: Entry) -> Journal:
        """Continue an interrupted switch's entry as this process's own (`switch --resume`)."""
        entry = replace(entry, owner=me(), updated_at=_now())
        write(entry)
        return cls(entry)

    @property
    def boot_id(self) -> str:
        """The boot id of the serve this switch is starting now."""
        return self.entry.boot_id

    def step(
        self,
        step: str,
        serve: ServeRef | None = _KEEP,
        *,
        pid: int | None = None,
        boot_id: str | None = None,
        rolling_back: bool | None = None,
    ) -> None:
        """Record that step is about to be taken (and what may run while it is: a new serve
        drops the old one's pid; pid names the main process of the serve once started)."""
        if step not in STEPS:
            raise ValueError(f"unknown journal step {step!r}")
        keep = serve is _KEEP
        self.entry = replace(
            self.entry,
            step=step,
            serve=self.entry.serve if keep else serve,
            pid=pid if pid is not None else (self.entry.pid if keep else None),
            boot_id=boot_id or self.entry.boot_id,
            rolling_back=self.entry.rolling_back if rolling_back is None else rolling_back,
            updated_at=_now(),
        )
        write(self.entry)

    def clear(self) -> None:
        """The switch ended in a state live.json describes: drop the journal."""
        clear()


def hold(step: str) -> None:
    """Fault injection for the kill-at-every-step tests: with PAROCTL_TEST_HOLD_AT=<step>, stop
    this process (SIGSTOP) right after the journal recorded step, so a test can SIGKILL it there
    deterministically. Unset (always, outside those tests) it does nothing."""
    if env.get("PAROCTL_TEST_HOLD_AT") == step:
        os.kill(os.getpid(), signal.SIGSTOP)
