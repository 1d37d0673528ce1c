"""The switch protocol over a runtime and an HTTP client: the old serve never passes for the new.

lock -> resolve the live serve -> drain and stop it -> wait until its port is closed and its
processes are gone (and GPU memory is back) -> start the new one -> follow its log through the boot
phases -> /v1/models lists exactly the profile's served names -> boot markers -> KV tokens ->
one sanity completion -> record the boot. Any failure after the old serve stopped: keep the log,
stop the new serve, bring the previous profile back and verify it the same way.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from paroctl import gpu, net, state
from paroctl.client import Client
from paroctl.errors import ParoctlError, RuntimeFailure
from paroctl.events import Event as Event
from paroctl.events import EventSink as EventSink
from paroctl.image import images
from paroctl.profile import secrets
from paroctl.profile.profiles import Profile
from paroctl.serve import cpu, engine, modelinfo, render
from paroctl.serve.runtime.base import Runtime, ServeSpec
from paroctl.switch import journal, recovery

PHASES = ("starting", "loading weights", "compiling", "capturing graphs", "kv cache sized", "ready")
KV_RE = re.compile(r"KV cache size: ([\d,]+) tokens")
# vLLM's own log lines that mark each boot phase (vllm 0.32: gpu/cpu_model_runner.py,
# compilation/backends.py, v1/core/kv_cache_utils.py, entrypoints/launchers/launcher.py).
PHASE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("loading weights", re.compile(r"Starting to load model|Loading weights|Loading safetensors")),
    # Not a bare "torch.compile": an eager boot logs "Enforce eager set, disabling torch.compile".
    ("compiling", re.compile(r"Dynamo bytecode transform|Compiling a graph for|compile took")),
    ("capturing graphs", re.compile(r"Capturing (CUDA )?graphs")),
    ("kv cache sized", KV_RE),
    ("ready", re.compile(r"Application startup complete|Available routes are")),
)
POLL_S = 0.05
DRAIN_TIMEOUT_S = 30.0
RUNNING = "vllm:num_requests_running"
# How a serve started with engine.LOAD_TRACKING_FLAG says so in its boot log (vLLM's
# "non-default args: {...}" line): its drain may then read /load.
LOAD_TRACKED = "'enable_server_load_tracking': True"
ALIVE_CHECK_S = 0.25  # how often a boot's process is asked whether it still runs
DRAIN_POLL_S = 0.05  # a request just finished (or cut off, like the sanity check) leaves fast
PORT_CLOSE_MARGIN_S = 30.0
GPU_IDLE_MIB = 1024
GPU_WAIT_S = 60.0


class SwitchFailed(ParoctlError):
    """A switch did not end on the requested profile; the message says where the box is now."""


@dataclass
class BootRecord:
    """What a boot proved, recorded in the results store and as the live pointer."""

    boot_id: str
    profile: str
    hash: str
    runtime: str
    scope: str
    host: str
    port: int
    served_names: list[str]
    knobs: dict[str, str]
    image: str
    cache_dir: str
    first_boot: bool
    kv_tokens: int | None
    phases: dict[str, float]
    started_at: str
    boot_s: float
    health_s: float
    grace_s: int
    log: str
    ok: bool = True
    cause: str = ""
    since: str = field(default="")
    cpu: dict[str, Any] | None = None  # a CPU box: the dtype/cores/KV decision it booted with
    origin: str = "switch"  # "switch", "adopt" (started outside paroctl) or "resume"
    # What the stop's drain reads: "load" (/load, when the boot log shows load tracking on) or
    # "metrics" (/metrics' running gauge; also what a record without this field gets).
    drain: str = "metrics"

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return asdict(self)


@dataclass
class Deps:
    """The switch's collaborators; tests and the systemd-in-a-container harness swap them."""

    runtime_for: Callable[[str, str], Runtime]
    events: EventSink = lambda event: None
    record_boot: Callable[[Mapping[str, Any]], None] | None = None


def default_runtime(kind: str, scope: str) -> Runtime:
    """The runtime `runtime.kind` names; PAROCTL_SYSTEMCTL_PREFIX prefixes systemctl (ssh, exec)."""
    if kind == "local":
        from paroctl.serve.runtime.local import LocalRuntime

        return LocalRuntime()
    import shlex

    from paroctl.serve.runtime.systemd import SystemdRuntime

    prefix = tuple(shlex.split(state.env("PAROCTL_SYSTEMCTL_PREFIX", "") or ""))
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
        same = live and live.get("profile") == target.name and live.get("hash") == target.hash
        if same and live and _still_serving(live, deps):
            deps.events(Event("step", f"{target.name} is already live and answering"))
            return record_from_live(live)
        # After an interrupted switch nothing is live; what was live before it is the fallback.
        before_switch = live or before(interrupted)
        previous = previous_profile(before_switch, load_profile, deps)
        if previous is not None and previous.name == target.name:
            previous = None  # rolling back to the profile that just failed cannot help
        _preflight(target, deps)  # before the old serve is touched
        jr = journal.Journal.begin(live, target.name)
        if live:
            _stop_old(live, deps, jr)
        try:
            record = boot(target, deps, timeout_s=timeout_s, jr=jr)
        except ParoctlError as exc:
            cause = exc.message
        except (Exception, KeyboardInterrupt) as exc:  # a bug, Ctrl-C or SIGTERM must not strand
            cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            jr.clear()
            return record
        fail(target, previous, cause, deps, jr, rollback=rollback)


def _untracked(
    target: Profile, deps: Deps, timeout_s: float | None
) -> tuple[dict[str, Any] | None, BootRecord | None]:
    """Serves running with nothing recorded (a unit started by systemd alone): the target itself,
    started from the profile as it is, is verified and taken as it runs; anything else is what
    the switch replaces (stopped like the old serve; the first one is the rollback target)."""
    from paroctl.switch import adopt

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
        images.check_profile_image(target)
        result = doctor.doctor_once(ref, engine.api_for(target, doctor.RUN_TIMEOUT_S))
        result.raise_for_mismatch(ref)
    except ParoctlError as exc:
        raise SwitchFailed(
            f"switch to {target.name} refused before anything was stopped: {exc.message}"
        ) from exc
    deps.events(Event("step", f"image {ref}: doctor ok" + (" (cached)" if result.cached else "")))


def before(interrupted: journal.Entry | None) -> Mapping[str, Any] | None:
    """What was live before an interrupted switch (its rollback target), as a live-like record."""
    if interrupted is None or interrupted.from_profile is None:
        return None
    return {"profile": interrupted.from_profile, "hash": interrupted.from_hash}


def _stop_old(live: Mapping[str, Any], deps: Deps, jr: journal.Journal) -> None:
    _hold("stopping-old")
    try:
        stop_live(live, deps)
    except BaseException:
        if state.read_live() is not None:
            jr.clear()  # stop_live did not get as far as clearing live.json: it still tracks it
        raise
    jr.step("old-gone", serve=None)
    _hold("old-gone")


def fail(
    target: Profile,
    previous: Profile | None,
    cause: str,
    deps: Deps,
    jr: journal.Journal,
    *,
    rollback: bool,
) -> NoReturn:
    """Keep the failed boot's log, stop it, bring previous back; the journal follows each step."""
    started = _journaled_start(jr, target)
    jr.step("rolling-back", rolling_back=True)
    log = _keep_failed_log(target, deps, cause)
    where = f"the failed boot's log: {log}"
    if started and not _stop_quietly(target, deps):
        # The journal stays: it is the only record of a serve that may still run.
        raise SwitchFailed(
            f"switch to {target.name} failed: {cause}\nand {target.name} could not be stopped; "
            f"{journal.path()} keeps it tracked (`paroctl stop` retries); {where}"
        )
    if previous is None or not rollback:
        jr.clear()
        if previous is None:
            raise SwitchFailed(
                f"switch to {target.name} failed: {cause}\nnothing was live before, so the box "
                f"is left stopped; {where}"
            )
        raise SwitchFailed(
            f"switch to {target.name} failed: {cause}\n--no-rollback: the box is left "
            f"stopped (previous: {previous.name}); {where}"
        )
    deps.events(Event("warn", f"rolling back to {previous.name}"))
    jr.step("rolling-back", serve=None, boot_id=journal.new_boot_id())
    try:
        boot(previous, deps, timeout_s=None, jr=jr)
    except ParoctlError as again:
        if not _journaled_start(jr, previous) or _stop_quietly(previous, deps):
            jr.clear()
        raise SwitchFailed(
            f"switch to {target.name} failed: {cause}\nthe rollback to {previous.name} "
            f"failed too: {again.message}\nthe box is stopped; {where}"
        ) from again
    jr.clear()
    raise SwitchFailed(
        f"switch to {target.name} failed: {cause}\nrolled back: {previous.name} is live "
        f"again and verified; {where}"
    )


def stop_live(live: Mapping[str, Any], deps: Deps) -> None:
    """Drain and stop the live serve; return once its port is closed and its processes are gone."""
    name, host, port = live["profile"], net.connect_host(live["host"]), int(live["port"])
    runtime = deps.runtime_for(live.get("runtime", "local"), live.get("scope", "system"))
    start = time.monotonic()
    _drain(host, port, deps, via=str(live.get("drain", "metrics")))
    deps.events(Event("step", f"stopping {name}"))
    grace = float(live.get("grace_s", 30))
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
    """Start a profile and prove it serves (journaled); on success it becomes the live pointer."""
    cpu_plan = cpu.plan_for(profile)
    if cpu_plan is not None:
        profile = cpu.apply(profile, cpu_plan)
        deps.events(Event("step", cpu_plan.summary()))
    body = profile.body
    runtime = deps.runtime_for(body.runtime.kind, body.runtime.scope)
    where = engine.layout(profile)
    host, port = net.connect_host(body.serve.host), body.serve.port
    if net.port_open(host, port):
        raise RuntimeFailure(
            f"{host}:{port} is already in use by something paroctl does not run; free the port "
            "before switching (it could answer in the new serve's place)"
        )
    images.check_profile_image(profile)
    _prepare(profile, runtime)
    cache = Path(where.cache_dir)
    first_boot = not (cache.is_dir() and any(cache.iterdir()))
    cache.mkdir(parents=True, exist_ok=True)
    modelinfo.seed(profile)  # after first_boot: a seeded file is not a compile cache
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    deps.events(
        Event("step", f"starting {profile.name}" + (" (fresh cache)" if first_boot else ""))
    )
    start = time.monotonic()
    serve = _journal_serve(profile)
    jr.step("starting", serve=serve)
    runtime.start(_spec(profile))
    jr.step("starting", serve=replace(serve, pid=runtime.main_pid(profile.name)))
    _hold("starting")
    return verify_running(
        profile,
        deps,
        runtime,
        jr=jr,
        start=start,
        timeout_s=timeout_s,
        cpu_plan=cpu_plan,
        first_boot=first_boot,
        started_at=started_at,
    )


def verify_running(
    profile: Profile,
    deps: Deps,
    runtime: Runtime,
    *,
    jr: journal.Journal | None,
    start: float,
    timeout_s: float | None,
    cpu_plan: cpu.CpuPlan | None,
    first_boot: bool,
    started_at: str,
    origin: str = "switch",
) -> BootRecord:
    """Prove a started serve is profile's (health, names, markers, CPU decision, provenance,
    sanity) and make it the live pointer; `profile` is the one its unit or process was started
    from (with the CPU decision applied). Also how `adopt` and `switch --resume` take a serve."""
    body = profile.body
    host, port = net.connect_host(body.serve.host), body.serve.port
    watcher = LogWatcher(runtime.logs(profile.name, follow=True), start, deps.events)
    client = Client(
        f"http://{host}:{port}", retries=0, timeout_s=60, api_key=secrets.api_key_for(profile)
    )
    try:
        health_s = _wait_healthy(profile, runtime, client, watcher, start, timeout_s)
        # The sanity completion is the one check that waits on the model: it runs while the
        # others (and the journal's step, which recovery reads like "starting") read what the
        # boot produced; all must pass before anything is recorded.
        sanity = _in_background(lambda: _sanity(profile, client), "paroctl-sanity")
        if jr is not None:
            jr.step("verifying")
            _hold("verifying")
        drain = "load" if any(LOAD_TRACKED in line for line in watcher.snapshot()) else "metrics"
        metrics = (
            _in_background(lambda: _read_metrics(client, deps), "paroctl-metrics")
            if drain == "metrics"
            else lambda: None
        )
        _check_identity(profile, client)
        watcher.wait_for("ready", timeout_s=5.0)
        _check_markers(profile, watcher)
        lines = watcher.snapshot()
        if cpu_plan is not None and (wrong := cpu.log_problems(cpu_plan, lines)):
            raise RuntimeFailure("the serve did not take the CPU decision: " + "; ".join(wrong))
        images.check_boot_provenance(profile, lines)
        images.check_boot_source(profile, lines)
        # Built while the completion runs: after it, only what needs its answer. (vLLM's worker
        # busy-polls its queue for 1 s after each message: on 2 cores that halves paroctl's.)
        modelinfo.keep(profile)
        record = _boot_record(
            profile, runtime, jr, watcher, cpu_plan,
            first_boot=first_boot, started_at=started_at, health_s=health_s, drain=drain,
            origin=origin,
        )  # fmt: skip
        sanity()
        metrics()
    finally:
        client.close()
    if record.kv_tokens is None:
        deps.events(Event("warn", "no KV cache size line in the log"))
    elif first_boot:
        deps.events(
            Event(
                "warn",
                f"KV cache {record.kv_tokens:,} tokens on a FRESH compile cache: not trusted",
            )
        )
    record = replace(
        record,
        boot_s=round(time.monotonic() - start, 3),
        since=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    # No journal step of its own: live.json with the journal's boot id says this switch finished
    # (recovery.had_finished), one durable write less between the sanity and the answer. The
    # results store's row (its own file and fsync) is written beside live.json and the journal's
    # removal, not after them.
    as_dict = record.as_dict()
    stored = _in_background(lambda: _record(deps, as_dict), "paroctl-record")
    state.write_live(as_dict)
    if jr is not None:
        jr.clear()  # live.json describes the box now; every caller would clear it next
    stored()
    deps.events(Event("step", f"{profile.name} is live", record.boot_s))
    return record


def _boot_record(
    profile: Profile,
    runtime: Runtime,
    jr: journal.Journal | None,
    watcher: LogWatcher,
    cpu_plan: cpu.CpuPlan | None,
    *,
    first_boot: bool,
    started_at: str,
    health_s: float,
    drain: str,
    origin: str,
) -> BootRecord:
    """The record of a verified boot (boot_s and since are set once the sanity answered)."""
    body = profile.body
    return BootRecord(
        boot_id=jr.boot_id if jr is not None else journal.new_boot_id(),
        profile=profile.name,
        hash=profile.hash,
        runtime=body.runtime.kind,
        scope=body.runtime.scope,
        host=body.serve.host,
        port=body.serve.port,
        served_names=list(body.model.served_names),
        knobs=dict(profile.knobs),
        image=body.image.ref if body.image else engine.serve_argv(profile)[0],
        cache_dir=engine.layout(profile).cache_dir,
        first_boot=first_boot,
        kv_tokens=watcher.kv_tokens,
        phases=dict(watcher.phases),
        started_at=started_at,
        boot_s=0.0,
        health_s=round(health_s, 3),
        grace_s=body.container.stop_grace_s,
        log=str(runtime.log_path(profile.name)),
        since="",
        cpu=cpu_plan.as_dict() if cpu_plan else None,
        origin=origin,
        drain=drain,
    )


def _in_background(work: Callable[[], None], name: str) -> Callable[[], None]:
    """Start work in a daemon thread; the returned call waits for it and re-raises its error. A
    check that fails first raises without waiting (the thread ends with its request, or with
    the process: nothing waits on it at exit)."""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the waiting thread, raised there
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()

    def wait() -> None:
        done.wait()
        if failed:
            raise failed[0]

    return wait


def _hold(step: str) -> None:
    """Fault injection for the kill-at-every-step tests: with PAROCTL_TEST_HOLD_AT=<step>, stop
    this process (SIGSTOP) right after the journal recorded step, so a test can SIGKILL it there
    deterministically. Unset (always, outside those tests) it does nothing."""
    if state.env("PAROCTL_TEST_HOLD_AT") == step:
        os.kill(os.getpid(), signal.SIGSTOP)


def plan(
    target: Profile, live: Mapping[str, Any] | None, interrupted: journal.Entry | None = None
) -> list[str]:
    """The exact actions a switch would take, for --dry-run."""
    cpu_plan = cpu.plan_for(target)
    target = cpu.apply(target, cpu_plan)
    body = target.body
    where = engine.layout(target)
    host, port = net.connect_host(body.serve.host), body.serve.port
    lines = [f"lock {state.home() / 'locks' / 'box.lock'}"]
    if interrupted is not None:
        lines.append(recovery.plan_line(interrupted, live))
        live = recovery.live_after(interrupted, live)
    elif live is None:
        from paroctl.switch import adopt

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
        lines += [
            f"live: {live['profile']} ({live.get('runtime')}, http://{live['host']}:{live['port']})",
            f"drain {live['profile']}: wait up to {DRAIN_TIMEOUT_S:g} s for running requests",
            f"stop {live['profile']} (grace {live.get('grace_s', 30)} s); wait until "
            f"{net.connect_host(live['host'])}:{live['port']} is closed and its processes are gone",
        ]
    else:
        lines.append("live: nothing")
    if cpu_plan is not None:
        lines.append(cpu_plan.summary())
    if body.runtime.kind == "systemd":
        lines.append(f"install {target.unit_name}.service and daemon-reload")
    spec = _spec(target)
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
        lines.append(f"on failure: keep the log, stop {target.name}, restart {live['profile']}")
    return lines


# --- pieces --------------------------------------------------------------------------------------


class LogWatcher:
    """Follows a serve's log in a thread: phases with timings, the KV size, every line."""

    def __init__(self, lines: Iterator[str], start: float, events: EventSink) -> None:
        self.lines: list[str] = []
        self.phases: dict[str, float] = {"starting": 0.0}
        self.kv_tokens: int | None = None
        self.failure: str | None = None  # why following the log stopped early, if it did
        self._start = start
        self._events = events
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every line
        events(Event("phase", "starting", 0.0))
        threading.Thread(target=self._pump, args=(lines,), daemon=True).start()

    def _pump(self, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                self.feed(line)
        except (ParoctlError, OSError) as exc:  # the runtime could not be asked any more
            with self._lock:
                self.failure = exc.message if isinstance(exc, ParoctlError) else str(exc)
                self._changed.notify_all()

    def feed(self, line: str) -> None:
        """Take one log line (public so the phase logic is testable without a serve)."""
        with self._lock:
            self.lines.append(line)
            for phase, pattern in PHASE_PATTERNS:
                match = pattern.search(line)
                if not match:
                    continue
                if phase == "kv cache sized" and self.kv_tokens is None:
                    self.kv_tokens = int(match.group(1).replace(",", ""))
                if phase not in self.phases:
                    elapsed = round(time.monotonic() - self._start, 3)
                    self.phases[phase] = elapsed
                    self._events(Event("phase", phase, elapsed))
            self._changed.notify_all()

    def current(self) -> str:
        """The latest phase reached."""
        with self._lock:
            return max(self.phases, key=PHASES.index)

    def wait_for(self, phase: str, timeout_s: float) -> bool:
        """Wait until a phase's line arrived (the log can trail the HTTP server by a moment)."""
        with self._changed:
            return self._changed.wait_for(lambda: phase in self.phases, timeout=timeout_s)

    def wait_line(self, timeout_s: float) -> None:
        """Return when the next log line arrives, or after timeout_s."""
        with self._changed:
            self._changed.wait(timeout=timeout_s)

    def snapshot(self) -> list[str]:
        """A copy of every line so far."""
        with self._lock:
            return list(self.lines)


def marker_problems(
    expect: tuple[str, ...], forbid: tuple[str, ...], lines: list[str]
) -> list[str]:
    """Boot-marker violations: expected lines never seen, forbidden lines seen (pure)."""
    problems = [f"expected boot line not seen: {m!r}" for m in expect if not _seen(m, lines)]
    for marker in forbid:
        hit = next((line for line in lines if _matches(marker, line)), None)
        if hit is not None:
            problems.append(f"forbidden boot line seen: {marker!r} in {hit.strip()[:160]!r}")
    return problems


def _seen(marker: str, lines: list[str]) -> bool:
    return any(_matches(marker, line) for line in lines)


def _matches(marker: str, line: str) -> bool:
    return bool(re.search(marker[3:], line)) if marker.startswith("re:") else marker in line


def _spec(profile: Profile) -> ServeSpec:
    body = profile.body
    argv = engine.run_argv(profile) if profile.uses_engine else engine.serve_argv(profile)
    env = {} if profile.uses_engine else engine.forwarded_env(profile)
    return ServeSpec(profile.name, tuple(argv), env, body.serve.port, body.serve.host, profile.hash)


def _prepare(profile: Profile, runtime: Runtime) -> None:
    """Write the env-forwarding list (and, for systemd, the unit) the serve will read."""
    env_art = render.render(profile, "env")
    state.atomic_write(Path(engine.layout(profile).env_file), env_art.content)
    if profile.body.runtime.kind == "systemd":
        from paroctl.serve.runtime import systemd

        systemd.install_apply(systemd.install_plan(profile, "service", reload=False))
        reload = getattr(runtime, "daemon_reload", None)
        if reload is not None:
            reload()


def _wait_healthy(
    profile: Profile,
    runtime: Runtime,
    client: Client,
    watcher: LogWatcher,
    start: float,
    timeout_s: float | None,
) -> float:
    """Poll /health until it answers; return the seconds since start when it first did."""
    limit = timeout_s or profile.body.serve.boot_timeout_s
    deadline = start + limit
    host, port = net.connect_host(profile.body.serve.host), profile.body.serve.port
    next_alive_check = 0.0
    while True:
        # A bare connect first: a refused one costs ~0.1 ms, an HTTP client's ~1-2 ms of the
        # core the booting server needs (the loop runs 20+ times a second for a minute or more).
        if net.port_open(host, port, timeout=1.0) and client.health():
            return time.monotonic() - start
        now = time.monotonic()
        if now >= next_alive_check:
            if not runtime.is_active(profile.name):
                raise RuntimeFailure(
                    f"{profile.name} exited during boot (phase: {watcher.current()}); last log "
                    f"lines:\n{_tail(watcher.snapshot())}"
                )
            next_alive_check = now + ALIVE_CHECK_S
        if now > deadline:
            raise RuntimeFailure(
                f"{profile.name} not healthy after {limit:g} s (phase: {watcher.current()})"
            )
        # Asked again on the next log line (the server logs as it comes up) or after POLL_S.
        watcher.wait_line(POLL_S)


def _check_identity(profile: Profile, client: Client) -> None:
    names = client.models()
    expected = list(profile.body.model.served_names)
    if sorted(names) != sorted(expected):
        raise RuntimeFailure(
            f"identity check: /v1/models lists {names}, expected {expected}: this is not the "
            f"{profile.name} serve"
        )


def _check_markers(profile: Profile, watcher: LogWatcher) -> None:
    if watcher.failure is not None:  # a forbidden line could be in what was never read
        raise RuntimeFailure(
            f"boot markers: the log could not be followed ({watcher.failure}); nothing proves "
            "the markers"
        )
    problems = marker_problems(
        profile.body.boot.expect, profile.body.boot.forbid, watcher.snapshot()
    )
    if problems:
        raise RuntimeFailure("boot markers: " + "; ".join(problems))


def _sanity(profile: Profile, client: Client) -> None:
    """One greedy completion of the profile's sanity prompt, within boot.sanity_max_tokens, must
    contain its expected answer."""
    boot_cfg = profile.body.boot
    reply = client.completion(
        profile.body.model.served_names[0],
        boot_cfg.sanity_prompt,
        max_tokens=boot_cfg.sanity_max_tokens,
        temperature=0.0,
    )
    text = reply["choices"][0]["text"]
    if not sanity_passes(boot_cfg.sanity_expect, text):
        raise RuntimeFailure(
            f"sanity completion: {boot_cfg.sanity_prompt!r} -> {text!r}, expected "
            f"{boot_cfg.sanity_expect!r} in it"
        )


def _read_metrics(client: Client, deps: Deps) -> None:
    """Read /metrics once while the sanity completion runs, for a serve whose drain reads it (no
    load tracking): a vLLM serve's first /metrics answer is slow (~0.3 s of its API server, once;
    later ones ~15 ms). Asked here it overlaps the model's forward pass, where the next switch's
    drain would pay all of it. It must be answered, not just asked: a request dropped unanswered
    (measured: sent, then closed) leaves the first answer slow."""
    try:
        client.gauges(RUNNING)
    except RuntimeFailure as exc:
        deps.events(Event("warn", f"/metrics does not answer ({exc}); a stop cannot drain"))


def sanity_passes(expect: str, text: str) -> bool:
    """The sanity check (pure): a case-insensitive substring, or a regex after `re:`."""
    if expect.startswith("re:"):
        return re.search(expect[3:], text) is not None
    return expect.lower() in text.lower()


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


def _still_serving(live: Mapping[str, Any], deps: Deps) -> bool:
    runtime = deps.runtime_for(live.get("runtime", "local"), live.get("scope", "system"))
    if not runtime.is_active(live["profile"]):
        return False
    client = Client(
        f"http://{net.connect_host(live['host'])}:{live['port']}",
        retries=0,
        api_key=secrets.api_key_named(live.get("profile")),
    )
    try:
        return client.health() and sorted(client.models()) == sorted(live["served_names"])
    except RuntimeFailure:
        return False
    finally:
        client.close()


def previous_profile(
    live: Mapping[str, Any] | None, load_profile: Callable[[str], Profile], deps: Deps
) -> Profile | None:
    if not live:
        return None
    try:
        previous = load_profile(live["profile"])
    except ParoctlError as exc:
        deps.events(
            Event(
                "warn",
                f"the live profile {live['profile']} no longer loads "
                f"({exc.message.splitlines()[0]}); no rollback possible",
            )
        )
        return None
    if previous.hash != live.get("hash"):
        deps.events(
            Event(
                "warn",
                f"{previous.name} changed since it booted; a rollback boots "
                "the profile as it is now",
            )
        )
    return previous


def record_from_live(live: Mapping[str, Any]) -> BootRecord:
    known = {k: live[k] for k in BootRecord.__dataclass_fields__ if k in live}
    return BootRecord(**known)


def _keep_failed_log(profile: Profile, deps: Deps, cause: str) -> Path:
    runtime = deps.runtime_for(profile.body.runtime.kind, profile.body.runtime.scope)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = state.home() / "failed-boots" / f"{profile.name}-{stamp}.log"
    try:
        lines = list(runtime.logs(profile.name))
    except ParoctlError:
        lines = []
    state.atomic_write(path, f"# switch to {profile.name} failed: {cause}\n" + "\n".join(lines))
    _record(
        deps,
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
    return path


def _record(deps: Deps, boot_record: Mapping[str, Any]) -> None:
    """Store a boot; a store failure is reported, never a reason to roll a good serve back."""
    if deps.record_boot is None:
        return
    try:
        deps.record_boot(boot_record)
    except ParoctlError as exc:
        deps.events(Event("warn", f"boot not recorded in the results store: {exc.message}"))


def _journaled_start(jr: journal.Journal, profile: Profile) -> bool:
    """Whether this switch got as far as starting profile (the journal names it as the serve
    from just before runtime.start on). A boot refused before that (its port held by another
    process, a missing image) started nothing: there is nothing of ours to stop or wait for,
    and the port's holder must not be waited out as if it were ours."""
    return jr.entry.serve is not None and jr.entry.serve.profile == profile.name


def _stop_quietly(profile: Profile, deps: Deps) -> bool:
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


def _journal_serve(profile: Profile) -> journal.Serve:
    body = profile.body
    return journal.Serve(
        profile=profile.name,
        hash=profile.hash,
        runtime=body.runtime.kind,
        scope=body.runtime.scope,
        host=body.serve.host,
        port=body.serve.port,
        served_names=tuple(body.model.served_names),
        grace_s=float(body.container.stop_grace_s),
    )


def _tail(lines: list[str], count: int = 15) -> str:
    return "\n".join(lines[-count:])
