"""Serves that live.json does not name: found through their runtimes, taken only once verified.

- `discover` finds every profile whose runtime reports it running (a unit started by
  `systemctl start` or enabled at boot, a local process group), with the profile hash it was
  started from (the unit's rendered header, the local pid record) and what its port answers.
- `adopt` makes such a serve live after the same checks a switch's boot passes (identity,
  markers, CPU decision, provenance, sanity); it starts and stops nothing.
- finishing an interrupted switch (`switch --resume`) is the switch's own work:
  paroctl/switch/switch.py `resume`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from paroctl import state
from paroctl.errors import ParoctlError, RuntimeFailure, UsageError
from paroctl.events import Event
from paroctl.profile import profiles
from paroctl.profile.profiles import Profile
from paroctl.records import LiveRecord
from paroctl.serve.plan import plan_for
from paroctl.switch import journal, recovery
from paroctl.switch.record import (
    BootRecord,
    Deps,
    SwitchFailed,
    api_key_for,
    record_from_live,
    serve_ref,
)
from paroctl.switch.verify import verify_where_it_runs


@dataclass(frozen=True)
class Found:
    """A running serve of a known profile that paroctl has not recorded as live."""

    profile: Profile
    pid: int | None
    running_hash: str | None  # None: started from something paroctl did not render
    healthy: bool
    served_names: tuple[str, ...]

    @property
    def current(self) -> bool:
        """Started from the profile as it is now (the hash in its unit or pid record)."""
        return self.running_hash == self.profile.hash

    def as_live(self) -> LiveRecord:
        """A live record of it, so the switch can drain and stop it like the old serve."""
        return LiveRecord(serve=serve_ref(self.profile, running_hash=self.running_hash or ""))

    def describe(self) -> str:
        """One line: what runs, where, and whether it answers as the profile says."""
        body = self.profile.body
        where = serve_ref(self.profile).url
        pid = f", pid {self.pid}" if self.pid is not None else ""
        health = "ok" if self.healthy else "NOT ANSWERING"
        names = ", ".join(self.served_names) or "-"
        if self.current:
            origin = "started from the profile as it is now"
        elif self.running_hash:
            origin = f"started from an older version of the profile (hash {self.running_hash})"
        else:
            origin = "not started from a unit paroctl rendered"
        return (
            f"{self.profile.name} ({body.runtime.kind}{pid}) at {where}, health {health}, "
            f"serves {names}; {origin}"
        )


def discover(
    runtime_for: recovery.RuntimeFor, candidates: Iterable[Profile] | None = None
) -> list[Found]:
    """Every candidate profile (default: all that load) whose runtime reports it running."""
    found = []
    for profile in candidates if candidates is not None else _loadable():
        body = profile.body
        try:
            runtime = runtime_for(body.runtime.kind, body.runtime.scope)
            if not runtime.is_active(profile.name):
                continue
            pid, running = runtime.main_pid(profile.name), runtime.running_hash(profile.name)
        except (ParoctlError, OSError):
            continue  # no such runtime here (no systemd on this machine): nothing of it runs
        try:
            key = api_key_for(profile)
        except ParoctlError:
            key = None  # its names then read as not answering; adopt/switch say why
        healthy, names = recovery.probe(serve_ref(profile).url, key)
        found.append(Found(profile, pid, running, healthy, names))
    return found


def _loadable() -> list[Profile]:
    loaded = []
    for name in profiles.list_names():
        try:
            loaded.append(profiles.load(name))
        except ParoctlError:
            continue  # `profile validate` reports it; a broken file cannot be what runs
    return loaded


def adopt(target: Profile, deps: Deps, *, timeout_s: float | None = None) -> BootRecord:
    """Verify the running serve of target (started outside paroctl) and make it live."""
    with state.locked():
        entry = journal.read()
        if entry is not None:
            raise UsageError(
                f"an interrupted {recovery.describe(entry)} is recorded: `paroctl switch "
                "--resume` finishes it, `paroctl stop` settles it"
            )
        live = state.read_live()
        if live:
            if live.serve.profile == target.name and live.serve.hash == target.hash:
                deps.events(Event("step", f"{target.name} is already live"))
                return record_from_live(live)
            raise UsageError(
                f"{live.serve.profile} is live; `paroctl adopt` takes a serve paroctl does not "
                "track (`paroctl switch` changes the live serve)"
            )
        return take(target, deps, timeout_s=timeout_s, origin="adopt")


def take(target: Profile, deps: Deps, *, timeout_s: float | None, origin: str) -> BootRecord:
    """The adoption itself (lock held): identity first, then the boot's own verification."""
    body = target.body
    runtime = deps.runtime_for(body.runtime.kind, body.runtime.scope)
    if not runtime.is_active(target.name):
        raise RuntimeFailure(
            f"{target.name} is not running under its runtime ({body.runtime.kind}); "
            f"`paroctl switch {target.name}` starts it"
        )
    running = runtime.running_hash(target.name)
    if running != target.hash:
        started = (
            f"an older version of the profile (hash {running})"
            if running
            else "something paroctl did not render"
        )
        raise UsageError(
            f"the running {target.name} was started from {started}, not the profile as it is "
            f"now (hash {target.hash}); `paroctl switch {target.name}` restarts it as the "
            "profile says"
        )
    deps.events(Event("step", f"verifying the running {target.name} ({origin})"))
    serve = plan_for(target)  # the plan it runs by, derived once for the cache and the checks
    cache = Path(serve.layout.cache_dir)
    try:
        return verify_where_it_runs(
            serve,
            deps,
            jr=None,
            timeout_s=timeout_s,
            first_boot=not (cache.is_dir() and any(cache.iterdir())),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            origin=origin,
        )
    except ParoctlError as exc:
        raise SwitchFailed(
            f"{target.name} runs but does not verify as its profile: {exc.message}\nit was "
            "not recorded as live; `paroctl stop` stops it, `paroctl switch NAME` replaces it"
        ) from exc
