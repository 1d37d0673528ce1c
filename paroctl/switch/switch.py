"""The switch protocol over a runtime and an HTTP client: the old serve never passes for the new.

lock -> resolve the live serve -> drain and stop it -> wait until its port is closed and its
processes are gone (and GPU memory is back) -> start the new one -> verify it (paroctl/switch/
verify.py: boot phases, /v1/models lists exactly the profile's served names, boot markers, KV
tokens, one sanity completion) -> record the boot. Any failure once the old serve's stop began
(a check, a bug, a full disk, or a signal: Ctrl-C, SIGTERM, SIGHUP, which the CLI raises as
KeyboardInterrupt) keeps the log, stops the new serve, finishes stopping the old one, brings the
previous profile back and verifies it the same way; a signal during that rollback waits for its
end (record.rolling_back). A signal before the old serve was touched leaves it serving. A signal
ends the switch with SwitchInterrupted (exit 130). Disk room for the rollback is set aside before
anything stops (recovery.Room). `resume` finishes a switch that was interrupted (its journal's
owner is gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from paroctl import env, gpu, net, state
from paroctl.client import Client
from paroctl.errors import ParoctlError, RuntimeFailure, StateError, UsageError
from paroctl.events import Event, EventSink
from paroctl.image import provenance
from paroctl.profile.profiles import Profile
from paroctl.records import BootRecord, LiveRecord
from paroctl.serve import engine, modelinfo, render
from paroctl.serve.plan import ServePlan, plan_for
from paroctl.serve.runtime.base import Runtime
from paroctl.switch import adopt, journal, recovery
from paroctl.switch.record import (
    Deps,
    SwitchFailed,
    SwitchInterrupted,
    failure_cause,
    record_from_live,
    rolling_back,
    serve_ref,
    take_deferred,
)
from paroctl.switch.verify import RUNNING, verify_running, verify_where_it_runs

DRAIN_TIMEOUT_S = 30.0
DRAIN_POLL_S = 0.05  # a request just finished (or cut off, like the sanity check) leaves fast
PORT_CLOSE_MARGIN_S = 30.0
GPU_IDLE_MIB = 1024
GPU_WAIT_S = 60.0


def default_runtime(kind: str, scope: str) -> Runtime:
    """The runtime `runtime.kind` names; PAROCTL_SYSTEMCTL_PREFIX prefixes systemctl (ssh, exec)."""
    if kind == "local":
        from paroctl.serve.runtime.local import LocalRuntime

        return LocalRuntime()
    import shlex

    from paroctl.serve.runtime.systemd import SystemdRuntime

    prefix = tuple(shlex.split(env.get("PAROCTL_SYSTEMCTL_PREFIX", "") or ""))
    return SystemdRuntime(scope=scope, prefix=prefix)  # type: ignore[arg-type]


def default_deps(events: EventSink | None = None) -> Deps:
    """Production collaborators: real runtimes, the results store."""

    def record(boot: Mapping[str, Any]) -> None:
        from paroctl.store import results

        results.open_store().record_boot(boot)

    return Deps(runtime_for=default_runtime, events=events or (lambda e: None), record_boot=record)


# --- the protocol --------------------------------------------------------------------------------


def switch(
    target: Profile,
    deps: Deps,
    *,
    load_profile: Callable[[str], Profile],
    rollback: bool = True,
    timeout_s: float | None = None,
) -> BootRecord:
    """Make `target` the live serve, or roll back to what was live; raise SwitchFailed if not."""
    with state.locked():
        interrupted = recovery.recover(deps.runtime_for, deps.events)
        live = state.read_live()
        if live is None and interrupted is None:
            live, taken = _untracked(target, deps, timeout_s)
            if taken is not None:
                return taken
        same = live and live.serve.profile == target.name and live.serve.hash == target.hash
        if same and live and recovery.still_serving(live, deps):
            deps.events(Event("step", f"{target.name} is already live and answering"))
            return record_from_live(live)
        # After an interrupted switch nothing is live; what was live before it is the fallback.
        was = (live.serve.profile, live.serve.hash) if live else recovery.before(interrupted)
        previous = recovery.previous_profile(was, load_profile, deps)
        if previous is not None and previous.name == target.name:
            previous = None  # rolling back to the profile that just failed cannot help
        room = recovery.Room.claim()  # a full disk refuses here, before anything is touched
        try:
            _preflight(target, deps)  # before the old serve is touched
            jr = _begin(live, target.name)
            return _take(target, live, previous, deps, jr, room, rollback, timeout_s)
        finally:
            room.release()


@dataclass
class _Old:
    """The serve being replaced, and how far its stop got."""

    live: LiveRecord | None
    touched: bool = False  # its runtime was asked to stop it: it may be stopping, or gone
    refused: bool = False  # the stop failed: what runs is unknown, nothing is started after it


def _begin(live: LiveRecord | None, to_profile: str) -> journal.Journal:
    """The journal's first entry; a write that fails (a full disk) refuses the switch here."""
    try:
        return journal.Journal.begin(live, to_profile)
    except KeyboardInterrupt:
        journal.clear()  # written or not: nothing was touched, nothing is left to settle
        raise
    except (OSError, StateError) as exc:
        kept = f"; {live.serve.profile} still serves" if live else ""
        raise StateError(
            f"cannot record the switch ({failure_cause(exc)}); nothing was stopped{kept}"
        ) from exc


def _take(
    target: Profile,
    live: LiveRecord | None,
    previous: Profile | None,
    deps: Deps,
    jr: journal.Journal,
    room: recovery.Room,
    rollback: bool,
    timeout_s: float | None,
) -> BootRecord:
    """Stop the old serve, boot the target; any failure or signal on the way rolls back."""
    old = _Old(live)
    try:
        if live:
            _stop_old(old, deps, jr)
        record = boot(target, deps, timeout_s=timeout_s, jr=jr)
    except (Exception, KeyboardInterrupt) as exc:  # a bug, a full disk, Ctrl-C, SIGTERM, SIGHUP
        if old.refused:
            raise
        fail(
            target, previous, failure_cause(exc), deps, jr,
            rollback=rollback, room=room, old=old, interrupted=isinstance(exc, KeyboardInterrupt),
        )  # fmt: skip
    jr.clear()
    return record


def _untracked(
    target: Profile, deps: Deps, timeout_s: float | None
) -> tuple[LiveRecord | None, BootRecord | None]:
    """Serves running with nothing recorded (a unit started by systemd alone): the target itself,
    started from the profile as it is, is verified and taken as it runs; anything else is what
    the switch replaces (stopped like the old serve; the first one is the rollback target)."""
    found = adopt.discover(deps.runtime_for)
    for serve in found:
        deps.events(Event("warn", f"running but not recorded as live: {serve.describe()}"))
    if len(found) == 1 and found[0].profile.name == target.name and found[0].current:
        try:
            return None, adopt.take(target, deps, timeout_s=timeout_s, origin="adopt")
        except ParoctlError as exc:
            deps.events(Event("warn", f"{exc.message.splitlines()[0]}; restarting it"))
    for serve in found[1:]:
        stop_live(serve.as_live(), deps)
    return (found[0].as_live() if found else None), None


def _preflight(target: Profile, deps: Deps) -> None:
    """What can refuse a switch before it stops anything: the image is there and built for this
    registry, and its doctor (vLLM finds the plugin, the methods and kernels load, the versions
    match the labels) passed once for that image id."""
    if not target.uses_engine or target.body.image is None:
        return
    from paroctl.image import doctor

    ref = target.body.image.ref
    try:
        provenance.check_profile_image(target)
        result = doctor.doctor_once(ref, engine.api_for(target, doctor.RUN_TIMEOUT_S))
        result.raise_for_mismatch(ref)
    except ParoctlError as exc:
        raise SwitchFailed(
            f"switch to {target.name} refused before anything was stopped: {exc.message}"
        ) from exc
    deps.events(Event("step", f"image {ref}: doctor ok" + (" (cached)" if result.cached else "")))


def _stop_old(old: _Old, deps: Deps, jr: journal.Journal) -> None:
    """Drain and stop the live serve (journaled); old records how far the stop got."""
    assert old.live is not None
    journal.hold("stopping-old")
    _drain(net.connect_host(old.live.serve.host), old.live.serve.port, deps, via=old.live.drain)
    old.touched = True
    try:
        _stop_and_wait(old.live, deps)
    except (RuntimeFailure, SwitchFailed):
        old.refused = True
        if state.read_live() is not None:
            jr.clear()  # live.json still tracks it: the journal would only repeat that
        raise
    jr.step("old-gone", serve=None)
    journal.hold("old-gone")


def fail(
    target: Profile,
    previous: Profile | None,
    cause: str,
    deps: Deps,
    jr: journal.Journal,
    *,
    rollback: bool,
    room: recovery.Room | None = None,
    old: _Old | None = None,
    interrupted: bool = False,
) -> NoReturn:
    """Keep the failed boot's log, stop it, bring previous back (or keep the old serve, when it
    was never touched); the journal follows each step. A signal during this is deferred: what
    runs here is what leaves the box serving. Raises SwitchInterrupted after a signal."""
    with rolling_back():
        try:
            _fail(target, previous, cause, deps, jr, rollback, room, old, interrupted)
        except SwitchFailed as exc:
            why = take_deferred()  # taken in any case: the next rollback starts with none
            if why is None or isinstance(exc, SwitchInterrupted):
                raise
            raise SwitchInterrupted(f"{exc.message}\n(then interrupted: {why})") from exc


def _fail(
    target: Profile,
    previous: Profile | None,
    cause: str,
    deps: Deps,
    jr: journal.Journal,
    rollback: bool,
    room: recovery.Room | None,
    old: _Old | None,
    interrupted: bool,
) -> NoReturn:
    error = SwitchInterrupted if interrupted else SwitchFailed
    head = f"switch to {target.name} {'interrupted' if interrupted else 'failed'}: {cause}"
    if recovery.had_finished(jr.entry, state.read_live()):  # the signal came after the new
        jr.clear()  # serve was verified and recorded: it stays
        raise error(f"{head}\n{target.name} is live and verified (it was when the signal came)")
    old = old or _Old(None)
    was = old.live
    if was is not None and not old.touched and recovery.still_serving(was, deps):
        jr.clear()
        raise error(f"{head}\nnothing was stopped: {was.serve.profile} still serves")
    # the cause first: the rollback below can take a boot's time before the error is printed
    deps.events(Event("warn", f"{head}; rolling back" if rollback and previous else head))
    if room is not None:
        room.release()  # before any write: a full disk is a likely cause of this failure
    started = recovery.journaled_start(jr, target)
    recovery.note_step(jr, deps, "rolling-back", rolling_back=True)
    journal.hold("rolling-back")
    where = recovery.keep_failed_log(target, deps, cause)
    if started and not recovery.stop_quietly(target, deps):
        # The journal stays: it is the only record of a serve that may still run.
        raise error(
            f"{head}\nand {target.name} could not be stopped; "
            f"{journal.path()} keeps it tracked (`paroctl stop` retries); {where}"
        )
    if was is not None and not recovery.settle_old(was, deps):
        raise error(f"{head}\nand {was.serve.profile} could not be stopped; {where}")
    if previous is None or not rollback:
        jr.clear()
        if previous is None:
            raise error(f"{head}\nnothing was live before, so the box is left stopped; {where}")
        raise error(
            f"{head}\n--no-rollback: the box is left stopped (previous: {previous.name}); {where}"
        )
    deps.events(Event("warn", f"rolling back to {previous.name}"))
    recovery.note_step(jr, deps, "rolling-back", serve=None, boot_id=journal.new_boot_id())
    try:
        boot(previous, deps, timeout_s=None, jr=jr)
    except (Exception, KeyboardInterrupt) as exc:
        if not recovery.journaled_start(jr, previous) or recovery.stop_quietly(previous, deps):
            jr.clear()
        raise error(
            f"{head}\nthe rollback to {previous.name} failed too: {failure_cause(exc)}\n"
            f"the box is stopped; {where}"
        ) from exc
    jr.clear()
    raise error(f"{head}\nrolled back: {previous.name} is live again and verified; {where}")


def stop_live(live: LiveRecord, deps: Deps) -> None:
    """Drain and stop the live serve; return once its port is closed and its processes are gone."""
    _drain(net.connect_host(live.serve.host), live.serve.port, deps, via=live.drain)
    _stop_and_wait(live, deps)


def _stop_and_wait(live: LiveRecord, deps: Deps) -> None:
    serve = live.serve
    name, host, port = serve.profile, net.connect_host(serve.host), serve.port
    runtime = deps.runtime_for(serve.runtime, serve.scope)
    start = time.monotonic()
    deps.events(Event("step", f"stopping {name}"))
    grace = float(serve.grace_s)
    runtime.stop(name, grace)
    try:
        net.wait_port_closed(host, port, timeout=grace + PORT_CLOSE_MARGIN_S)
    except RuntimeFailure as exc:
        raise SwitchFailed(
            f"{name} was stopped but {host}:{port} still answers ({exc}); refusing to start "
            "anything that could be mistaken for it"
        ) from exc
    if runtime.is_active(name):
        raise SwitchFailed(f"{name}: its port closed but its process is still running")
    _wait_gpu_memory(deps)
    state.clear_live()
    deps.events(Event("step", f"{name} stopped", time.monotonic() - start))


def boot(
    profile: Profile, deps: Deps, *, timeout_s: float | None, jr: journal.Journal
) -> BootRecord:
    """Start a profile and prove it serves (journaled); on success it becomes the live pointer.
    Its serve plan is derived here, once, and handed on: not at the switch's top, because a CPU
    profile's KV space is a share of the memory available once the old serve is gone."""
    serve = plan_for(profile)
    if serve.cpu is not None:
        deps.events(Event("step", serve.cpu.summary()))
    profile, where = serve.profile, serve.layout
    body = profile.body
    runtime = deps.runtime_for(body.runtime.kind, body.runtime.scope)
    host, port = net.connect_host(body.serve.host), body.serve.port
    if net.port_open(host, port):
        raise RuntimeFailure(
            f"{host}:{port} is already in use by something paroctl does not run; free the port "
            "before switching (it could answer in the new serve's place)"
        )
    provenance.check_profile_image(profile)
    _prepare(serve, runtime)
    cache = Path(where.cache_dir)
    first_boot = not (cache.is_dir() and any(cache.iterdir()))
    cache.mkdir(parents=True, exist_ok=True)
    modelinfo.seed_cache(serve)  # after first_boot: a seeded file is not a compile cache
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    deps.events(
        Event("step", f"starting {profile.name}" + (" (fresh cache)" if first_boot else ""))
    )
    start = time.monotonic()
    jr.step("starting", serve=serve_ref(profile))
    runtime.start(engine.serve_spec(serve))
    jr.step("starting", pid=runtime.main_pid(profile.name))
    journal.hold("starting")
    return verify_running(
        serve,
        deps,
        runtime,
        jr=jr,
        start=start,
        timeout_s=timeout_s,
        first_boot=first_boot,
        started_at=started_at,
    )


def resume(
    deps: Deps,
    *,
    load_profile: Callable[[str], Profile],
    rollback: bool = True,
    timeout_s: float | None = None,
) -> BootRecord:
    """Finish (or roll back, if that is what it was doing) the interrupted switch: a new serve
    still booting or verifying is verified where it runs; any other step is settled (what runs
    is stopped) and the switch, or its rollback, is run again."""
    with state.locked():
        entry = journal.read()
        if entry is None:
            raise UsageError("no interrupted switch to resume: the journal is empty")
        if journal.owner_alive(entry.owner):
            raise StateError(
                f"the switch is still running (paroctl pid {entry.owner.pid}); let it finish"
            )
        live = state.read_live()
        if recovery.had_finished(entry, live) and live is not None:
            journal.clear()
            deps.events(Event("step", f"the interrupted switch had finished: {live.serve.profile}"))
            return record_from_live(live)
        target = load_profile(entry.to_profile)
        if _booting_target(entry, target, deps):
            return _finish_boot(entry, target, deps, load_profile, rollback, timeout_s)
    # Any other step: settle what runs (switch() recovers first) and take the step again.
    goal = entry.from_profile if entry.rolling_back else entry.to_profile
    if goal is None:
        with state.locked():
            recovery.recover(deps.runtime_for, deps.events)
        raise SwitchFailed(
            f"the interrupted {recovery.describe(entry)} had nothing to roll back to; the box "
            "is stopped"
        )
    deps.events(Event("step", f"resuming: switching to {goal} again"))
    return switch(
        load_profile(goal), deps, load_profile=load_profile, rollback=rollback, timeout_s=timeout_s
    )


def _booting_target(entry: journal.Entry, target: Profile, deps: Deps) -> bool:
    serve = entry.serve
    if serve is None or entry.rolling_back or entry.step not in ("starting", "verifying"):
        return False
    if serve.profile != target.name or serve.hash != target.hash:
        return False  # the profile changed since: boot it as it is now
    return bool(deps.runtime_for(serve.runtime, serve.scope).is_active(target.name))


def _finish_boot(
    entry: journal.Entry,
    target: Profile,
    deps: Deps,
    load_profile: Callable[[str], Profile],
    rollback: bool,
    timeout_s: float | None,
) -> BootRecord:
    """Verify the serve the interrupted switch started, where it runs; roll back if it fails."""
    room = recovery.Room.claim()
    jr = journal.Journal.take_over(entry)
    previous = recovery.previous_profile(recovery.before(entry), load_profile, deps)
    deps.events(Event("step", f"resuming: verifying {target.name} where it runs"))
    try:
        record = verify_where_it_runs(
            plan_for(target),  # the plan of the serve to verify, derived once for it
            deps,
            jr=jr,
            timeout_s=timeout_s,
            first_boot=True,  # unknown after the kill: its KV size is not trusted
            started_at=entry.started_at,
            origin="resume",
        )
    except (Exception, KeyboardInterrupt) as exc:
        fail(
            target, previous, failure_cause(exc), deps, jr,
            rollback=rollback, room=room, interrupted=isinstance(exc, KeyboardInterrupt),
        )  # fmt: skip
    finally:
        room.release()
    jr.clear()
    return record


def plan(
    target: Profile, live: LiveRecord | None, interrupted: journal.Entry | None = None
) -> list[str]:
    """The exact actions a switch would take, for --dry-run."""
    serve = plan_for(target)
    target, where = serve.profile, serve.layout
    body = target.body
    host, port = net.connect_host(body.serve.host), body.serve.port
    lines = [f"lock {state.home() / 'locks' / 'box.lock'}"]
    if interrupted is not None:
        lines.append(recovery.plan_line(interrupted, live))
        live = recovery.live_after(interrupted, live)
    elif live is None:
        found = adopt.discover(default_runtime)
        lines += [f"running but not recorded as live: {serve.describe()}" for serve in found]
        if len(found) == 1 and found[0].profile.name == target.name and found[0].current:
            lines.append(
                f"verify {target.name} where it runs and record it as live; if it does not "
                "verify, stop it and boot it as below"
            )
        lines += [f"stop {serve.profile.name} (not the rollback target)" for serve in found[1:]]
        live = found[0].as_live() if found else None
    if live:
        old = live.serve
        lines += [
            f"live: {old.profile} ({old.runtime}, http://{old.host}:{old.port})",
            f"drain {old.profile}: wait up to {DRAIN_TIMEOUT_S:g} s for running requests",
            f"stop {old.profile} (grace {old.grace_s} s); wait until "
            f"{net.connect_host(old.host)}:{old.port} is closed and its processes are gone",
        ]
    else:
        lines.append("live: nothing")
    if serve.cpu is not None:
        lines.append(serve.cpu.summary())
    if body.runtime.kind == "systemd":
        lines.append(f"install {target.unit_name}.service and daemon-reload")
    spec = engine.serve_spec(serve)
    lines += [
        f"write {where.env_file} ({len(spec.env)} variables)",
        f"start {target.name}: {' '.join(spec.argv)}",
        f"wait for http://{host}:{port}/health (timeout {body.serve.boot_timeout_s} s), "
        "following the log",
        f"check /v1/models == {list(body.model.served_names)}",
        f"check boot markers: expect {list(body.boot.expect)}, forbid {list(body.boot.forbid)}",
        "read the KV cache size from the log (flagged when the compile cache is fresh)",
        f"sanity: {body.boot.sanity_prompt!r} -> expect {body.boot.sanity_expect!r}",
        f"record the boot; point live at {target.name}",
    ]
    if live:
        lines.append(f"on failure: keep the log, stop {target.name}, restart {live.serve.profile}")
    return lines


# --- pieces --------------------------------------------------------------------------------------


def _prepare(serve: ServePlan, runtime: Runtime) -> None:
    """Write the env-forwarding list (and, for systemd, the unit) the serve will read."""
    env_art = render.artefact(serve, "env")
    state.atomic_write(Path(serve.layout.env_file), env_art.content)
    if serve.profile.body.runtime.kind == "systemd":
        from paroctl.serve.runtime import systemd

        systemd.install_apply(systemd.plan_install(serve, "service", reload=False))
        reload = getattr(runtime, "daemon_reload", None)
        if reload is not None:
            reload()


def _drain(host: str, port: int, deps: Deps, via: str = "metrics") -> None:
    """Let running requests finish (bounded) so a stop does not cut a client off mid-answer.
    via "load": /load's requests in flight (a few ms a read; every generation request the API
    server holds, queued ones included); "metrics": /metrics' running gauge."""
    client = Client(f"http://{host}:{port}", retries=0, timeout_s=5)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    shown: float | None = None
    what = "requests in flight" if via == "load" else "requests running"
    try:
        while time.monotonic() < deadline:
            running = float(client.load()) if via == "load" else client.gauges(RUNNING)[RUNNING]
            if running <= 0:
                return
            if running != shown:  # one line per change: a log is not a terminal's live line
                deps.events(Event("progress", f"draining: {running:g} {what}"))
                shown = running
            time.sleep(DRAIN_POLL_S)
        deps.events(Event("warn", f"still busy after {DRAIN_TIMEOUT_S:g} s; stopping anyway"))
    except RuntimeFailure:
        return  # not answering: nothing to drain
    finally:
        client.close()


def _wait_gpu_memory(deps: Deps) -> None:
    """Wait until the GPUs' memory is released (where a vendor tool can read it)."""
    deadline = time.monotonic() + GPU_WAIT_S
    while True:
        used = gpu.memory_used_mib()
        if used is None or all(mib <= GPU_IDLE_MIB for mib in used.values()):
            return
        if time.monotonic() > deadline:
            deps.events(Event("warn", f"GPU memory still in use after {GPU_WAIT_S:g} s: {used}"))
            return
        time.sleep(0.5)
