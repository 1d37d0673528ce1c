"""Switch pieces that need no serve: log phases, KV parsing, boot markers, GPU tool parsing, plan."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from paroctl import gpu, state
from paroctl.errors import RuntimeFailure
from paroctl.events import Event
from paroctl.profile import profiles
from paroctl.records import LiveRecord
from paroctl.switch import journal, switch, verify
from paroctl.switch.record import SwitchFailed

REPO = Path(__file__).resolve().parents[1]

VLLM_CPU_LOG = [
    "INFO 11-29 12:40:30 [cpu_model_runner.py:68] Starting to load model /m/SmolLM2...",
    "INFO 11-29 12:40:33 [default_loader.py:502] Loading weights took 0.35 seconds",
    "INFO 11-29 12:40:40 [kv_cache_utils.py:2328] CPU KV cache size: 93,184 tokens, Maximum "
    "concurrency for 2,048 tokens per request: 45.50x",
    "INFO 11-29 12:40:44 [launcher.py:186] Available routes are:",
]


def test_log_watcher_phases_and_kv() -> None:
    events: list[Event] = []
    watcher = verify.LogWatcher(iter(()), 0.0, events.append)
    for line in VLLM_CPU_LOG:
        watcher.feed(line)
    assert list(watcher.phases) == ["starting", "loading weights", "kv cache sized", "ready"]
    assert watcher.kv_tokens == 93184
    assert watcher.current() == "ready"
    assert [e.message for e in events if e.kind == "phase"] == list(watcher.phases)


def test_log_watcher_compiled_boot_phases() -> None:
    watcher = verify.LogWatcher(iter(()), 0.0, lambda e: None)
    watcher.feed("Dynamo bytecode transform time: 12.1 s")
    watcher.feed("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%")
    watcher.feed("GPU KV cache size: 862,604 tokens, Maximum concurrency for 262,144 ...")
    assert watcher.current() == "kv cache sized"
    assert watcher.kv_tokens == 862604
    assert "compiling" in watcher.phases and "capturing graphs" in watcher.phases


def test_a_log_that_cannot_be_followed_fails_the_markers_not_the_thread() -> None:
    """The runtime stops answering mid-follow (systemd's container gone): the follower thread
    records why instead of dying with a traceback, and the marker check refuses the boot."""

    def lines() -> Iterator[str]:
        yield VLLM_CPU_LOG[0]
        raise RuntimeFailure("`systemctl show` failed with exit code 126")

    watcher = verify.LogWatcher(lines(), 0.0, lambda e: None)
    deadline = time.monotonic() + 5
    while watcher.failure is None and time.monotonic() < deadline:
        watcher.wait_line(0.1)
    assert watcher.failure == "`systemctl show` failed with exit code 126"
    assert watcher.snapshot() == [VLLM_CPU_LOG[0]]
    profile = profiles.load("cpu-demo")
    with pytest.raises(RuntimeFailure, match=r"^boot markers: the log could not be followed \("):
        verify._check_markers(profile, watcher)


def test_marker_problems() -> None:
    lines = ["paro-vllm: method=nvfp4_mxfp4 backend=triton layers=112/112", "ok"]
    assert verify.marker_problems(
        ("layers=304/304", "re:method=nvfp4_\\w+"), ("layers=112/112",), lines
    ) == [
        "expected boot line not seen: 'layers=304/304'",
        "forbidden boot line seen: 'layers=112/112' in "
        "'paro-vllm: method=nvfp4_mxfp4 backend=triton layers=112/112'",
    ]
    assert verify.marker_problems(("ok",), ("Traceback",), lines) == []


def test_gpu_tool_parsers() -> None:
    assert gpu.parse_nvidia_smi("0, 812\n1, 30211\n") == {0: 812, 1: 30211}
    rocm = (
        '{"card0": {"VRAM Total Memory (B)": "34342961152", "VRAM Total Used Memory (B)": '
        '"1073741824"}, "card1": {"VRAM Total Used Memory (B)": "0"}}'
    )
    assert gpu.parse_rocm_smi(rocm) == {0: 1024, 1: 0}


def test_plan_names_every_step() -> None:
    target = profiles.load("cpu-demo-alt")
    live = {
        "profile": "cpu-demo",
        "runtime": "local",
        "host": "127.0.0.1",
        "port": 8123,
        "grace_s": 30,
    }
    lines = switch.plan(target, LiveRecord.from_dict(live))
    assert lines[1] == "live: cpu-demo (local, http://127.0.0.1:8123)"
    assert lines[3].startswith("stop cpu-demo (grace 30 s); wait until 127.0.0.1:8123 is closed")
    assert any(
        line.startswith("start cpu-demo-alt: ") and "--served-model-name smollm2-alt" in line
        for line in lines
    )
    assert "check /v1/models == ['smollm2-alt']" in lines
    assert lines[-1] == "on failure: keep the log, stop cpu-demo-alt, restart cpu-demo"


@pytest.mark.parametrize(
    ("via", "path", "what"),
    [("metrics", "/metrics", "requests running"), ("load", "/load", "requests in flight")],
)
def test_drain_reports_each_change_once(
    monkeypatch: pytest.MonkeyPatch, via: str, path: str, what: str
) -> None:
    """A busy serve polled many times prints one line per count, not one per poll; the drain
    reads only the endpoint its record names (any other path answers 404 and ends it early)."""
    counts = iter([7, 7, 7, 7, 3, 3, 7, 0])
    asked: list[str] = []

    class Serve(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            if self.path != path:
                self.send_error(404)
                return
            count = next(counts)
            body = (
                f"vllm:num_requests_running {count}\n".encode()
                if via == "metrics"
                else json.dumps({"server_load": count}).encode()
            )
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(switch, "DRAIN_POLL_S", 0.001)
    events: list[Event] = []
    deps = switch.Deps(runtime_for=lambda kind, scope: None, events=events.append)  # type: ignore[arg-type,return-value]
    try:
        switch._drain("127.0.0.1", server.server_address[1], deps, via=via)
    finally:
        server.shutdown()
    assert [e.message for e in events] == [
        f"draining: 7 {what}",
        f"draining: 3 {what}",
        f"draining: 7 {what}",
    ]
    assert set(asked) == {path} and len(asked) == 8


def test_progress_in_a_log_is_one_line_per_change(capsys: pytest.CaptureFixture[str]) -> None:
    from paroctl.cli import serve as serve_cli

    with serve_cli._progress() as sink:  # stderr is captured: not a terminal
        sink(Event("phase", "loading weights", 1.25))
        sink(Event("progress", "draining: 7 requests running"))
        sink(Event("step", "stopping cpu-demo"))
        sink(Event("warn", "still busy"))
    assert capsys.readouterr().err.splitlines() == [
        "- loading weights (1.2 s)",
        "- draining: 7 requests running",
        "- stopping cpu-demo",
        "warning: still busy",
    ]


def test_a_port_held_by_another_process_fails_fast_and_leaves_no_journal(
    profile_dir: Path, deadline: Callable[[float], AbstractContextManager[None]]
) -> None:
    # A real listener (not ours) on the profile's port, nothing live: the boot is refused before
    # anything starts, so the failure path has nothing to stop and must not wait out the port's
    # holder (it did: 30 s, then "could not be stopped" with a journal left behind).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def answer() -> None:  # accepts every connection, as a serve would
        with contextlib.suppress(OSError):
            while True:
                listener.accept()[0].close()

    threading.Thread(target=answer, daemon=True).start()
    text = (REPO / "profiles" / "cpu-demo.yaml").read_text()
    (profile_dir / "cpu-demo.yaml").write_text(text + f"serve:\n  port: {port}\n")
    try:
        with deadline(10), pytest.raises(SwitchFailed) as failed:
            switch.switch(
                profiles.load("cpu-demo"), switch.default_deps(), load_profile=profiles.load
            )
    finally:
        listener.close()
    message = str(failed.value)
    assert f"127.0.0.1:{port} is already in use by something paroctl does not run" in message
    assert "nothing was live before, so the box is left stopped" in message
    assert "could not be stopped" not in message
    assert journal.read() is None and state.read_live() is None


def test_systemd_runtime_without_systemd_says_so_without_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where systemd is not the init system (sd_booted's /run/systemd/system is absent), asking a
    unit's state fails at once with the reason; no systemctl process is started. With a prefix
    (systemd elsewhere: a container, ssh) the local check does not apply."""
    from paroctl import proc
    from paroctl.errors import RuntimeFailure
    from paroctl.serve.runtime import systemd

    monkeypatch.setattr(systemd, "SYSTEMD_BOOTED", tmp_path / "run-systemd-system")
    ran: list[list[str]] = []
    monkeypatch.setattr(proc, "run", lambda argv, **kw: ran.append(list(argv)))
    with pytest.raises(RuntimeFailure) as info:
        systemd.SystemdRuntime().is_active("paro-int5")
    assert "no systemd runs on this machine" in info.value.message
    assert "paroctl-paro-int5.service" in info.value.message
    assert ran == []
    with contextlib.suppress(Exception):
        systemd.SystemdRuntime(prefix=("docker", "exec", "box")).is_active("paro-int5")
    assert ran and ran[0][:3] == ["docker", "exec", "box"]
