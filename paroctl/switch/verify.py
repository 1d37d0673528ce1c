"""Verification of a started serve: the old serve never passes for the new.

Follow its log through the boot phases -> /health -> /v1/models lists exactly the profile's served
names -> boot markers -> the CPU decision and the image's provenance in the log -> KV tokens -> one
sanity completion -> record the boot as the live pointer. The switch's boot, `adopt` and
`switch --resume` all take a serve through here.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from paroctl import net, state
from paroctl.client import Client
from paroctl.errors import ParoctlError, RuntimeFailure
from paroctl.events import Event, EventSink
from paroctl.image import provenance
from paroctl.profile.profiles import Profile
from paroctl.serve import cpu, modelinfo
from paroctl.serve.plan import ServePlan
from paroctl.serve.runtime.base import Runtime
from paroctl.switch import journal
from paroctl.switch.record import BootRecord, Deps, api_key_for, serve_ref

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
RUNNING = "vllm:num_requests_running"
# How a serve started with plan.LOAD_TRACKING_FLAG says so in its boot log (vLLM's
# "non-default args: {...}" line): its drain may then read /load.
LOAD_TRACKED = "'enable_server_load_tracking': True"
ALIVE_CHECK_S = 0.25  # how often a boot's process is asked whether it still runs
FULL_DISK_BYTES = 1 << 20  # less free than this where a serve's log goes: it died writing it


def verify_running(
    serve: ServePlan,
    deps: Deps,
    runtime: Runtime,
    *,
    jr: journal.Journal | None,
    start: float,
    timeout_s: float | None,
    first_boot: bool,
    started_at: str,
    origin: str = "switch",
) -> BootRecord:
    """Prove a started serve is its plan's (health, names, markers, CPU decision, provenance,
    sanity) and make it the live pointer; `serve` is the plan its unit or process was started
    from (the CPU decision in it). Also how `adopt` and `switch --resume` take a serve."""
    profile, cpu_plan = serve.profile, serve.cpu
    body = profile.body
    host, port = net.connect_host(body.serve.host), body.serve.port
    watcher = LogWatcher(runtime.logs(profile.name, follow=True), start, deps.events)
    client = Client(f"http://{host}:{port}", retries=0, timeout_s=60, api_key=api_key_for(profile))
    try:
        health_s = _wait_healthy(profile, runtime, client, watcher, start, timeout_s)
        # The sanity completion is the one check that waits on the model: it runs while the
        # others (and the journal's step, which recovery reads like "starting") read what the
        # boot produced; all must pass before anything is recorded.
        sanity = _in_background(lambda: _sanity(profile, client), "paroctl-sanity")
        if jr is not None:
            jr.step("verifying")
            journal.hold("verifying")
        _check_identity(profile, client)
        # The log can trail the HTTP server: read the args line (load tracking) once the log
        # has caught up with health, so the drain is decided on what the serve was started with.
        watcher.wait_for("ready", timeout_s=5.0)
        drain = "load" if any(LOAD_TRACKED in line for line in watcher.snapshot()) else "metrics"
        metrics = (
            _in_background(lambda: _read_metrics(client, deps), "paroctl-metrics")
            if drain == "metrics"
            else lambda: None
        )
        _check_markers(profile, watcher)
        lines = watcher.snapshot()
        if cpu_plan is not None and (wrong := cpu.log_problems(cpu_plan, lines)):
            raise RuntimeFailure("the serve did not take the CPU decision: " + "; ".join(wrong))
        provenance.check_boot_provenance(profile, lines)
        provenance.check_boot_source(profile, lines)
        # Built while the completion runs: after it, only what needs its answer. (vLLM's worker
        # busy-polls its queue for 1 s after each message: on 2 cores that halves paroctl's.)
        modelinfo.keep_boot(serve)
        record = _boot_record(
            serve, runtime, jr, watcher,
            first_boot=first_boot, started_at=started_at, health_s=health_s, drain=drain,
            origin=origin,
        )  # fmt: skip
        sanity()
        metrics()
    finally:
        client.close()
    return _make_live(record, deps, jr, start, first_boot=first_boot)


def _make_live(
    record: BootRecord, deps: Deps, jr: journal.Journal | None, start: float, *, first_boot: bool
) -> BootRecord:
    """Warn about the KV reading, stamp the record and make it the live pointer (and a stored
    boot); the journal's entry goes once live.json describes the box."""
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
    stored = _in_background(lambda: deps.keep(as_dict), "paroctl-record")
    state.write_live(record.live())
    if jr is not None:
        jr.clear()  # live.json describes the box now; every caller would clear it next
    stored()
    deps.events(Event("step", f"{record.serve.profile} is live", record.boot_s))
    return record


def verify_where_it_runs(
    serve: ServePlan,
    deps: Deps,
    *,
    jr: journal.Journal | None,
    timeout_s: float | None,
    first_boot: bool,
    started_at: str,
    origin: str,
) -> BootRecord:
    """The boot's verification of a running serve, by the plan it booted with (`plan_for` of its
    profile: the CPU decision in it); how `adopt` and `switch --resume` take a running serve."""
    runtime = deps.runtime_for(serve.profile.body.runtime.kind, serve.profile.body.runtime.scope)
    return verify_running(
        serve,
        deps,
        runtime,
        jr=jr,
        start=time.monotonic(),
        timeout_s=timeout_s,
        first_boot=first_boot,
        started_at=started_at,
        origin=origin,
    )


def _boot_record(
    serve: ServePlan,
    runtime: Runtime,
    jr: journal.Journal | None,
    watcher: LogWatcher,
    *,
    first_boot: bool,
    started_at: str,
    health_s: float,
    drain: str,
    origin: str,
) -> BootRecord:
    """The record of a verified boot (boot_s and since are set once the sanity answered)."""
    profile, cpu_plan = serve.profile, serve.cpu
    body = profile.body
    return BootRecord(
        serve=serve_ref(profile),
        boot_id=jr.boot_id if jr is not None else journal.new_boot_id(),
        knobs=dict(profile.knobs),
        image=body.image.ref if body.image else serve.argv[0],
        cache_dir=serve.layout.cache_dir,
        first_boot=first_boot,
        kv_tokens=watcher.kv_tokens,
        phases=dict(watcher.phases),
        started_at=started_at,
        boot_s=0.0,
        health_s=round(health_s, 3),
        log=str(runtime.log_path(profile.name)),
        since="",
        cpu=cpu_plan,
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
                    f"{profile.name} exited during boot (phase: {watcher.current()})"
                    f"{_full_disk(runtime, profile.name)}; last log lines:\n"
                    f"{_tail(watcher.snapshot())}"
                )
            next_alive_check = now + ALIVE_CHECK_S
        if now > deadline:
            raise RuntimeFailure(
                f"{profile.name} not healthy after {limit:g} s (phase: {watcher.current()})"
            )
        # Asked again on the next log line (the server logs as it comes up) or after POLL_S.
        watcher.wait_line(POLL_S)


def _full_disk(runtime: Runtime, name: str) -> str:
    """Where a serve's log is written on a full filesystem (a serve dies writing it), said."""
    try:
        log = runtime.log_path(name)
        if not log.is_absolute():
            return ""  # not a file (systemd's journal): its own space is journald's business
        where = log.parent
        info = os.statvfs(where)
    except (OSError, ParoctlError):
        return ""
    if info.f_bavail * info.f_frsize >= FULL_DISK_BYTES:
        return ""
    return f"; {where}: No space left on device (the serve's log is written there)"


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
    payload = {
        "model": profile.body.model.served_names[0],
        "prompt": boot_cfg.sanity_prompt,
        "max_tokens": boot_cfg.sanity_max_tokens,
        "temperature": 0.0,
    }
    text = client.post("/v1/completions", payload).text()
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


def _tail(lines: list[str], count: int = 15) -> str:
    return "\n".join(lines[-count:])
