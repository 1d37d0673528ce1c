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
    """The journal's entry, or None when no switch is recorded as under way; a journal that
    cannot be acted on is a StateError naming it and `paroctl repair`."""
    entry, problem = _load()
    if problem:
        raise StateError(state.damaged(path(), problem))
    return entry


def damage() -> str | None:
    """Why the journal cannot be acted on, or None when it is sound or absent."""
    return _load()[1]


def _load() -> tuple[Entry | None, str | None]:
    present, data, problem = state.read_state_json(path())
    if not present or problem:
        return None, problem
    problem = entry_problem(data)
    if problem:
        return None, f"not a journal entry ({problem})"
    return from_dict(data), None


# Every key write() puts in the file, with its JSON type (None where the key may be null).
_ENTRY_KEYS: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "boot_id": (str,),
    "from_profile": (str, type(None)),
    "from_hash": (str, type(None)),
    "to_profile": (str,),
    "owner": (dict,),
    "step": (str,),
    "serve": (dict, type(None)),
    "rolling_back": (bool,),
    "started_at": (str,),
    "updated_at": (str,),
}
_OWNER_KEYS: dict[str, tuple[type, ...]] = {
    "pid": (int,),
    "start_ticks": (int,),
    "host_boot": (str,),
    "cmdline": (list,),
}
_SERVE_KEYS = ("profile", "hash", "runtime", "scope", "host", "port", "served_names", "grace_s")


def _key_problem(data: Mapping[str, Any], keys: Mapping[str, tuple[type, ...]], where: str) -> str:
    for key, kinds in keys.items():
        if key not in data:
            return f"{where}{key}: missing"
        value = data[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"{where}{key}: unexpected value {str(value)[:60]!r}"
    return ""


def entry_problem(data: Any) -> str | None:
    """Why parsed JSON is not a journal entry this paroctl can act on, or None: every key
    write() puts there with its type, a known step, names that are profile names, and a serve
    whose runtime can exist on this box (state.serve_problem)."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    if data.get("version") != VERSION:
        return f"version {repr(data.get('version'))[:40]}, expected {VERSION}"
    problem = _key_problem(data, _ENTRY_KEYS, "")
    if problem:
        return problem
    if data["step"] not in STEPS:
        return f"step: unknown step {data['step'][:40]!r}"
    for key in ("to_profile", "from_profile"):
        name = data[key]
        if name is not None and not state.PROFILE_NAME.fullmatch(name):
            return f"{key}: {name[:80]!r} is not a profile name"
    owner = data["owner"]
    problem = _key_problem(owner, _OWNER_KEYS, "owner.")
    if problem:
        return problem
    if not all(isinstance(part, str) for part in owner["cmdline"]):
        return "owner.cmdline: expected a list of strings"
    serve = data["serve"]
    if serve is None:
        return None
    missing = [key for key in _SERVE_KEYS if key not in serve]
    if missing:
        return f"serve: lacks {', '.join(missing)}"
    if serve_problem := state.serve_problem(serve):
        return f"serve.{serve_problem}"
    pid = serve.get("pid")
    if pid is not None and not (isinstance(pid, int) and not isinstance(pid, bool) and pid > 0):
        return f"serve.pid: unexpected value {str(pid)[:60]!r}"
    return None


def from_dict(data: Mapping[str, Any]) -> Entry:
    """Parse a journal entry as written by write() (entry_problem() has checked it; raise
    KeyError/TypeError/ValueError if it was not)."""
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
    """Remove the journal: the switch ended in a state live.json describes (cleared already is
    fine: verify_running clears it right after live.json is written)."""
    state.remove(path())


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
