"""An interrupted switch: a journal whose paroctl is gone names a serve that live.json does not.

The rule on status/stop/switch: the stranded serve is stopped through its runtime, then the
journal (and a live.json naming that serve) is cleared; `status` reports without acting. One
exception: a switch killed after it recorded the new serve as live (live.json carries the
journal's boot id) had finished, and only its journal is dropped. `switch --resume`
(`resume` in paroctl/switch/switch.py) instead finishes the interrupted switch: a new serve
still booting or verifying is verified where it runs.

A rollback writes under PAROCTL_HOME (the journal, the serve's log and pid file, live.json): a
switch sets room for it aside before it stops anything (`Room`) and gives it back to the rollback,
so a disk that fills during the switch still lets the previous serve come back.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paroctl import net, state
from paroctl.client import Client
from paroctl.errors import ParoctlError, RuntimeFailure, StateError
from paroctl.events import Event, EventSink
from paroctl.profile.profiles import Profile
from paroctl.records import LiveRecord, ServeRef
from paroctl.serve.runtime.base import Runtime
from paroctl.switch import journal
from paroctl.switch.record import Deps, api_key_named, failure_cause

RuntimeFor = Callable[[str, str], Runtime]
PORT_CLOSE_MARGIN_S = 30.0
ROOM_FILE = ".switch-room"
# What a rollback writes under PAROCTL_HOME, with a wide margin: a vLLM boot log (~0.1-1 MB), the
# failed boot's log kept beside it, the journal, pid file, live.json and a results-store row.
ROOM_BYTES = 32 << 20


@dataclass(frozen=True)
class Stranded:
    """A journal entry and what its serve is doing right now (for `status`)."""

    entry: journal.Entry
    owner_alive: bool
    active: bool
    pid: int | None
    healthy: bool
    served_names: tuple[str, ...]
    finished: bool  # killed after recording: live.json already names the verified serve


def had_finished(entry: journal.Entry, live: LiveRecord | None) -> bool:
    """live.json carries the journal's boot id: only a serve this switch verified is written
    there (each switch has its own id), so it had finished whatever step the journal names."""
    return live is not None and live.boot_id == entry.boot_id


def inspect(runtime_for: RuntimeFor) -> Stranded | None:
    """What the journal says and what its serve does now; None when there is no journal."""
    entry = journal.read()
    if entry is None:
        return None
    alive = journal.owner_alive(entry.owner)
    done = had_finished(entry, state.read_live())
    serve = entry.serve
    if serve is None:
        return Stranded(entry, alive, False, None, False, (), done)
    runtime = runtime_for(serve.runtime, serve.scope)
    pid = runtime.main_pid(serve.profile)
    healthy, names = _probe(serve)
    return Stranded(entry, alive, pid is not None, pid, healthy, names, done)


def _probe(serve: ServeRef) -> tuple[bool, tuple[str, ...]]:
    return probe(serve.url, api_key_named(serve.profile))


def probe(url: str, key: str | None) -> tuple[bool, tuple[str, ...]]:
    """Whether a serve answers /health, and the names its /v1/models lists (one attempt each)."""
    with Client(url, retries=0, timeout_s=5, api_key=key) as client:
        try:
            healthy = client.health()
            return healthy, tuple(client.models()) if healthy else ()
        except ParoctlError:
            return False, ()


def describe(entry: journal.Entry) -> str:
    """One line naming the switch an entry records."""
    origin = entry.from_profile or "nothing"
    return (
        f"switch {origin} -> {entry.to_profile} (paroctl pid {entry.owner.pid}), "
        f"step {entry.step}{' (rolling back)' if entry.rolling_back else ''}"
    )


def plan_line(entry: journal.Entry, live: LiveRecord | None) -> str:
    """What recover() would do about entry, for --dry-run."""
    if had_finished(entry, live):
        return f"interrupted {describe(entry)}: it had finished; clear {journal.path()}"
    serve = entry.serve
    what = (
        f"stop {serve.profile} ({serve.runtime}) through its runtime, wait until "
        f"{net.connect_host(serve.host)}:{serve.port} is closed"
        if serve
        else "nothing to stop"
    )
    return f"interrupted {describe(entry)}: {what}; clear {journal.path()}"


def recover(runtime_for: RuntimeFor, events: EventSink) -> journal.Entry | None:
    """Settle an interrupted switch (call with the box lock held); return its entry, if any."""
    Room(state.home() / ROOM_FILE).release()  # a killed switch's: no switch runs under our lock
    entry = journal.read()
    if entry is None:
        return None
    if journal.owner_alive(entry.owner) and entry.owner.pid != os.getpid():
        # We hold the lock, so a live owner is not switching; still, never act under its feet.
        raise StateError(
            f"{journal.path()} belongs to a running paroctl (pid {entry.owner.pid}) that does "
            "not hold the box lock; let it finish or stop it, then retry"
        )
    live = state.read_live()
    if had_finished(entry, live):
        events(Event("warn", f"an interrupted {describe(entry)} had finished; journal cleared"))
        journal.clear()
        return entry
    serve = entry.serve
    if serve is None:
        events(Event("warn", f"an interrupted {describe(entry)} left nothing running"))
    else:
        events(
            Event(
                "warn",
                f"an interrupted {describe(entry)} left {serve.profile} ({serve.runtime}) "
                "untracked; stopping it",
            )
        )
        stop_serve(serve, runtime_for)
    if live is not None and live_after(entry, live) is None:
        state.clear_live()  # it named the serve just stopped (killed while stopping the old)
    journal.clear()
    return entry


def live_after(entry: journal.Entry, live: LiveRecord | None) -> LiveRecord | None:
    """What live.json names once recover() settled entry: nothing if it named the stopped serve."""
    if live is None or had_finished(entry, live):
        return live
    serve = entry.serve
    return None if serve is not None and live.serve.profile == serve.profile else live


def stop_serve(serve: ServeRef, runtime_for: RuntimeFor) -> None:
    """Stop a journal's serve through its runtime; return once its port is closed and it is gone."""
    runtime = runtime_for(serve.runtime, serve.scope)
    runtime.stop(serve.profile, float(serve.grace_s))
    host = net.connect_host(serve.host)
    try:
        net.wait_port_closed(host, serve.port, timeout=serve.grace_s + PORT_CLOSE_MARGIN_S)
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"the stranded {serve.profile} was stopped but {host}:{serve.port} still answers "
            f"({exc}); find the listener (`ss -ltnp`) and stop it, then retry"
        ) from exc
    if runtime.is_active(serve.profile):
        raise RuntimeFailure(f"the stranded {serve.profile}: its port closed but it still runs")


# --- room to roll back in ------------------------------------------------------------------------


class Room:
    """Disk space set aside under PAROCTL_HOME (a file of ROOM_BYTES, really allocated) for the
    length of a switch; released before a rollback writes anything, so that a disk filled during
    the switch (by the new serve's log, or anything else) still lets the previous serve back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def claim(cls) -> Room:
        """Set the room aside, or refuse (StateError naming PAROCTL_HOME) while nothing is touched:
        a switch needs the room and as much again free for the new serve's own writes."""
        home = state.home()
        path = home / ROOM_FILE
        try:
            home.mkdir(parents=True, exist_ok=True)
            _allocate(path, ROOM_BYTES)
            info = os.statvfs(home)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise StateError(_no_room(home, exc.strerror or str(exc))) from exc
        free = info.f_bavail * info.f_frsize
        if free < ROOM_BYTES:
            with contextlib.suppress(OSError):
                path.unlink()
            raise StateError(_no_room(home, f"only {free >> 20} MiB free"))
        return cls(path)

    def release(self) -> None:
        """Give the room back (idempotent)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _allocate(path: Path, size: int) -> None:
    """Make path a file of size bytes whose blocks are allocated now (a stale one is reused)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            # A filesystem without fallocate: blocks are allocated by writing them.
            block = bytes(1 << 20)
            os.lseek(fd, 0, os.SEEK_SET)
            for _ in range(0, size, len(block)):
                os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def _no_room(home: Path, why: str) -> str:
    need = 2 * ROOM_BYTES >> 20
    return (
        f"{home}: {why}: a switch needs {need} MiB free in PAROCTL_HOME (the new serve's logs "
        "and records, and as much set aside so that a rollback can write); nothing was stopped. "
        "Free space there and retry"
    )


# --- the pieces a rollback is made of -------------------------------------------------------------


def note_step(jr: journal.Journal, deps: Deps, step: str, **change: Any) -> None:
    """A journal step the rollback takes whether or not it could be written (a full disk)."""
    try:
        jr.step(step, **change)
    except (OSError, StateError) as exc:
        deps.events(Event("warn", f"journal not written ({failure_cause(exc)}); rolling back"))


def settle_old(live: LiveRecord, deps: Deps) -> bool:
    """Finish stopping the old serve a failure or signal cut short; False when it may run."""
    try:
        stop_serve(live.serve, deps.runtime_for)
    except ParoctlError as exc:
        deps.events(Event("warn", f"stopping {live.serve.profile}: {exc.message}"))
        return False
    if (now := state.read_live()) is not None and now.serve.profile == live.serve.profile:
        state.clear_live()
    return True


def still_serving(live: LiveRecord, deps: Deps) -> bool:
    """Whether the live record's serve runs and answers with its served names."""
    serve = live.serve
    runtime = deps.runtime_for(serve.runtime, serve.scope)
    if not runtime.is_active(serve.profile):
        return False
    client = Client(serve.url, retries=0, api_key=api_key_named(serve.profile))
    try:
        return client.health() and sorted(client.models()) == sorted(serve.served_names)
    except RuntimeFailure:
        return False
    finally:
        client.close()


def keep_failed_log(profile: Profile, deps: Deps, cause: str) -> str:
    """Copy a failed boot's log under failed-boots/ and store the failed boot; say where it is
    (the runtime's own log when the copy cannot be written: a full disk must not stop rollbacks)."""
    runtime = deps.runtime_for(profile.body.runtime.kind, profile.body.runtime.scope)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = state.home() / "failed-boots" / f"{profile.name}-{stamp}.log"
    try:
        lines = list(runtime.logs(profile.name))
    except ParoctlError:
        lines = []
    try:
        state.atomic_write(path, f"# switch to {profile.name} failed: {cause}\n" + "\n".join(lines))
    except (OSError, StateError) as exc:
        deps.events(Event("warn", f"the failed boot's log not kept: {failure_cause(exc)}"))
        path = runtime.log_path(profile.name)
    deps.keep(
        {
            "boot_id": journal.new_boot_id(),
            "profile": profile.name,
            "hash": profile.hash,
            "ok": False,
            "cause": cause,
            "log": str(path),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    return f"the failed boot's log: {path}"


def before(interrupted: journal.Entry | None) -> tuple[str, str | None] | None:
    """What was live before an interrupted switch (its rollback target): profile and hash."""
    if interrupted is None or interrupted.from_profile is None:
        return None
    return interrupted.from_profile, interrupted.from_hash


def previous_profile(
    was: tuple[str, str | None] | None, load_profile: Callable[[str], Profile], deps: Deps
) -> Profile | None:
    """The profile to roll back to (was: what was live, profile and hash), as it loads now."""
    if not was:
        return None
    name, booted_hash = was
    try:
        previous = load_profile(name)
    except ParoctlError as exc:
        deps.events(
            Event(
                "warn",
                f"the live profile {name} no longer loads "
                f"({exc.message.splitlines()[0]}); no rollback possible",
            )
        )
        return None
    if previous.hash != booted_hash:
        deps.events(
            Event(
                "warn",
                f"{previous.name} changed since it booted; a rollback boots "
                "the profile as it is now",
            )
        )
    return previous


def journaled_start(jr: journal.Journal, profile: Profile) -> bool:
    """Whether this switch got as far as starting profile (the journal names it as the serve
    from just before runtime.start on). A boot refused before that (its port held by another
    process, a missing image) started nothing: there is nothing of ours to stop or wait for,
    and the port's holder must not be waited out as if it were ours."""
    return jr.entry.serve is not None and jr.entry.serve.profile == profile.name


def stop_quietly(profile: Profile, deps: Deps) -> bool:
    """Stop a failed serve; False (and a warning) when it may still run."""
    runtime = deps.runtime_for(profile.body.runtime.kind, profile.body.runtime.scope)
    try:
        runtime.stop(profile.name, float(profile.body.container.stop_grace_s))
        net.wait_port_closed(
            net.connect_host(profile.body.serve.host), profile.body.serve.port, timeout=30.0
        )
    except ParoctlError as exc:
        deps.events(Event("warn", f"stopping {profile.name}: {exc.message}"))
        return False
    return True
