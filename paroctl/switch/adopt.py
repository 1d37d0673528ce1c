"""Serves that live.json does not name: found through their runtimes, taken only once verified.

- `discover` finds every profile whose runtime reports it running (a unit started by
  `systemctl start` or enabled at boot, a local process group), with the profile hash it was
  started from (the unit's rendered header, the local pid record) and what its port answers.
- `adopt` makes such a serve live after the same checks a switch's boot passes (identity,
  markers, CPU decision, provenance, sanity); it starts and stops nothing.
- `resume` finishes an interrupted switch: a new serve still booting or verifying is verified
  where it runs; any other step is settled (what runs is stopped) and the switch, or its
  rollback, is run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paroctl import net, state
from paroctl.errors import ParoctlError, RuntimeFailure, StateError
from paroctl.events import Event
from paroctl.profile import profiles, secrets
from paroctl.profile.profiles import Profile
from paroctl.serve import cpu, engine
from paroctl.switch import journal, recovery
from paroctl.switch import switch as switch_mod


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

    def as_live(self) -> dict[str, Any]:
        """A live.json-shaped record, so the switch can drain and stop it like the old serve."""
        body = self.profile.body
        return {
            "profile": self.profile.name,
            "hash": self.running_hash or "",
            "runtime": body.runtime.kind,
            "scope": body.runtime.scope,
            "host": body.serve.host,
            "port": body.serve.port,
            "served_names": list(body.model.served_names),
            "grace_s": body.container.stop_grace_s,
        }

    def describe(self) -> str:
        """One line: what runs, where, and whether it answers as the profile says."""
        body = self.profile.body
        where = f"http://{net.connect_host(body.serve.host)}:{body.serve.port}"
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
            key = secrets.api_key_for(profile)
        except ParoctlError:
            key = None  # its names then read as not answering; adopt/switch say why
        healthy, names = recovery.probe(body.serve.host, body.serve.port, key)
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


def adopt(
    target: Profile, deps: switch_mod.Deps, *, timeout_s: float | None = None
) -> switch_mod.BootRecord:
    """Verify the running serve of target (started outside paroctl) and make it live."""
    with state.locked():
        entry = journal.read()
        if entry is not None:
            raise StateError(
                f"an interrupted {recovery.describe(entry)} is recorded: `paroctl switch "
                "--resume` finishes it, `paroctl stop` settles it"
            )
        live = state.read_live()
        if live:
            if live.get("profile") == target.name and live.get("hash") == target.hash:
                deps.events(Event("step", f"{target.name} is already live"))
                return switch_mod.record_from_live(live)
            raise StateError(
                f"{live['profile']} is live; `paroctl adopt` takes a serve paroctl does not "
                "track (`paroctl switch` changes the live serve)"
            )
        return take(target, deps, timeout_s=timeout_s, origin="adopt")


def take(
    target: Profile, deps: switch_mod.Deps, *, timeout_s: float | None, origin: str
) -> switch_mod.BootRecord:
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
        raise StateError(
            f"the running {target.name} was started from {started}, not the profile as it is "
            f"now (hash {target.hash}); `paroctl switch {target.name}` restarts it as the "
            "profile says"
        )
    deps.events(Event("step", f"verifying the running {target.name} ({origin})"))
    cache = Path(engine.layout(target).cache_dir)
    try:
        return _verify_where_it_runs(
            target,
            deps,
            jr=None,
            timeout_s=timeout_s,
            first_boot=not (cache.is_dir() and any(cache.iterdir())),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            origin=origin,
        )
    except ParoctlError as exc:
        raise switch_mod.SwitchFailed(
            f"{target.name} runs but does not verify as its profile: {exc.message}\nit was "
            "not recorded as live; `paroctl stop` stops it, `paroctl switch NAME` replaces it"
        ) from exc


def resume(
    deps: switch_mod.Deps,
    *,
    load_profile: Callable[[str], Profile],
    rollback: bool = True,
    timeout_s: float | None = None,
) -> switch_mod.BootRecord:
    """Finish (or roll back, if that is what it was doing) the interrupted switch."""
    with state.locked():
        entry = journal.read()
        if entry is None:
            raise StateError("no interrupted switch to resume: the journal is empty")
        if journal.owner_alive(entry.owner):
            raise StateError(
                f"the switch is still running (paroctl pid {entry.owner.pid}); let it finish"
            )
        live = state.read_live()
        if recovery.had_finished(entry, live) and live is not None:
            journal.clear()
            deps.events(Event("step", f"the interrupted switch had finished: {live['profile']}"))
            return switch_mod.record_from_live(live)
        target = load_profile(entry.to_profile)
        if _booting_target(entry, target, deps):
            return _finish_boot(entry, target, deps, load_profile, rollback, timeout_s)
    # Any other step: settle what runs (switch() recovers first) and take the step again.
    goal = entry.from_profile if entry.rolling_back else entry.to_profile
    if goal is None:
        with state.locked():
            recovery.recover(deps.runtime_for, deps.events)
        raise switch_mod.SwitchFailed(
            f"the interrupted {recovery.describe(entry)} had nothing to roll back to; the box "
            "is stopped"
        )
    deps.events(Event("step", f"resuming: switching to {goal} again"))
    return switch_mod.switch(
        load_profile(goal), deps, load_profile=load_profile, rollback=rollback, timeout_s=timeout_s
    )


def _booting_target(entry: journal.Entry, target: Profile, deps: switch_mod.Deps) -> bool:
    serve = entry.serve
    if serve is None or entry.rolling_back or entry.step not in ("starting", "verifying"):
        return False
    if serve.profile != target.name or serve.hash != target.hash:
        return False  # the profile changed since: boot it as it is now
    return bool(deps.runtime_for(serve.runtime, serve.scope).is_active(target.name))


def _finish_boot(
    entry: journal.Entry,
    target: Profile,
    deps: switch_mod.Deps,
    load_profile: Callable[[str], Profile],
    rollback: bool,
    timeout_s: float | None,
) -> switch_mod.BootRecord:
    """Verify the serve the interrupted switch started, where it runs; roll back if it fails."""
    jr = journal.Journal.take_over(entry)
    previous = switch_mod.previous_profile(switch_mod.before(entry), load_profile, deps)
    deps.events(Event("step", f"resuming: verifying {target.name} where it runs"))
    try:
        record = _verify_where_it_runs(
            target,
            deps,
            jr=jr,
            timeout_s=timeout_s,
            first_boot=True,  # unknown after the kill: its KV size is not trusted
            started_at=entry.started_at,
            origin="resume",
        )
    except ParoctlError as exc:
        cause = exc.message
    except (Exception, KeyboardInterrupt) as exc:
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    else:
        jr.clear()
        return record
    switch_mod.fail(target, previous, cause, deps, jr, rollback=rollback)


def _verify_where_it_runs(
    target: Profile,
    deps: switch_mod.Deps,
    *,
    jr: journal.Journal | None,
    timeout_s: float | None,
    first_boot: bool,
    started_at: str,
    origin: str,
) -> switch_mod.BootRecord:
    """The boot's verification of target's running serve, with the CPU decision it booted with."""
    plan = cpu.plan_for(target)
    runtime = deps.runtime_for(target.body.runtime.kind, target.body.runtime.scope)
    return switch_mod.verify_running(
        cpu.apply(target, plan),
        deps,
        runtime,
        jr=jr,
        start=time.monotonic(),
        timeout_s=timeout_s,
        cpu_plan=plan,
        first_boot=first_boot,
        started_at=started_at,
        origin=origin,
    )
