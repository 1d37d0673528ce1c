"""LocalRuntime against real processes: start, stop, liveness, pid reuse, logs, stubborn kids."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paroctl import net
from paroctl.errors import RuntimeFailure
from paroctl.procfs import group_members, read_proc
from paroctl.serve.runtime import Runtime, ServeSpec
from paroctl.serve.runtime.local import PID_FILE, LocalRuntime

PY = sys.executable

SLEEPER = "import time; print('ready', flush=True); time.sleep(600)"
# The parent exits on SIGTERM as usual; its child ignores SIGTERM, so only SIGKILL removes it.
STUBBORN = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('child ready', flush=True); time.sleep(600)"])
print(f"child pid {child.pid}", flush=True)
time.sleep(600)
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(root=tmp_path / "runs")
    yield rt
    # Never leave a test's processes behind, whatever the test did.
    if rt.root.exists():
        for run_dir in rt.root.iterdir():
            rt.stop(run_dir.name, grace_s=1.0)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def log_has(rt: LocalRuntime, name: str, text: str) -> Callable[[], bool]:
    return lambda: rt.log_path(name).exists() and text in rt.log_path(name).read_text()


def spec(name: str, code: str, **kwargs: object) -> ServeSpec:
    return ServeSpec(name=name, argv=(PY, "-c", code), **kwargs)  # type: ignore[arg-type]


def test_satisfies_the_runtime_protocol(runtime: LocalRuntime) -> None:
    assert isinstance(runtime, Runtime)


def test_start_is_active_stop(runtime: LocalRuntime) -> None:
    runtime.start(spec("sleeper", SLEEPER))
    wait_for(log_has(runtime, "sleeper", "ready"))
    pid = runtime.main_pid("sleeper")
    assert pid is not None and runtime.is_active("sleeper")
    info = read_proc(pid)
    assert info is not None and info.pgid == pid and info.sid == pid  # its own session and group
    runtime.stop("sleeper", grace_s=5.0)
    assert not runtime.is_active("sleeper")
    assert runtime.main_pid("sleeper") is None
    assert group_members(pid) == []
    assert not (runtime.run_dir("sleeper") / PID_FILE).exists()


def test_stdin_is_devnull_and_env_is_forwarded(runtime: LocalRuntime) -> None:
    code = (
        "import os, sys; print('stdin', repr(sys.stdin.read()), os.environ['PAROCTL_T_KNOB'],"
        " flush=True)"
    )
    runtime.start(spec("envcheck", code, env={"PAROCTL_T_KNOB": "on"}))
    wait_for(lambda: not runtime.is_active("envcheck"))
    assert list(runtime.logs("envcheck")) == ["stdin '' on"]


def test_second_start_of_a_live_serve_is_refused(runtime: LocalRuntime) -> None:
    runtime.start(spec("once", SLEEPER))
    with pytest.raises(RuntimeFailure, match="already running"):
        runtime.start(spec("once", SLEEPER))


def test_http_server_port_closes_on_stop(runtime: LocalRuntime, tmp_path: Path) -> None:
    port = net.free_port()
    argv = (PY, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path))
    runtime.start(ServeSpec(name="http", argv=argv, port=port))
    wait_for(lambda: net.port_open("127.0.0.1", port))
    pid = runtime.main_pid("http")
    assert pid is not None
    start = time.monotonic()
    runtime.stop("http", grace_s=60.0)
    # Closed by the time stop returned, and SIGTERM was enough: no wait for the 60 s grace. The
    # bounds leave room for a loaded 2-core CI machine (a 3.04 s stop failed a 3 s bound there).
    assert net.wait_port_closed("127.0.0.1", port, timeout=5.0) < 2.0
    assert time.monotonic() - start < 20.0
    assert group_members(pid) == []


def test_sigterm_ignoring_child_is_killed_after_grace(runtime: LocalRuntime) -> None:
    runtime.start(spec("stubborn", STUBBORN))
    wait_for(log_has(runtime, "stubborn", "child ready"))
    leader = runtime.main_pid("stubborn")
    assert leader is not None
    child_pid = int(runtime.log_path("stubborn").read_text().split("child pid ")[1].split()[0])
    assert sorted(group_members(leader)) == sorted([leader, child_pid])
    start = time.monotonic()
    runtime.stop("stubborn", grace_s=1.0)
    elapsed = time.monotonic() - start
    # The grace was waited out, then SIGKILL ended the group long before the child's own 600 s
    # (the upper bound leaves room for a loaded 2-core CI machine).
    assert 1.0 <= elapsed < 20.0
    assert group_members(leader) == []
    info = read_proc(child_pid)
    assert info is None or info.state in ("Z", "X")


def test_pid_reuse_is_not_mistaken_for_our_serve(runtime: LocalRuntime) -> None:
    runtime.start(spec("reused", SLEEPER))
    wait_for(log_has(runtime, "reused", "ready"))
    runtime.stop("reused", grace_s=5.0)
    # Simulate the kernel handing our old pid to someone else: a pid file naming a live process
    # (this test itself) whose start time differs from the recorded one.
    me = read_proc(os.getpid())
    assert me is not None
    pid_file = runtime.run_dir("reused") / PID_FILE
    record = {
        "pid": os.getpid(),
        "start_ticks": me.start_ticks - 1,
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "argv": [PY, "-c", SLEEPER],
        "host": "127.0.0.1",
        "port": 8000,
        "started_at": time.time(),
    }
    pid_file.write_text(json.dumps(record))
    assert not runtime.is_active("reused")
    assert runtime.main_pid("reused") is None
    runtime.stop("reused", grace_s=0.1)  # must not signal us: we would not survive to the assert
    assert not pid_file.exists()
    # The same record with the right start time *is* recognised, so the guard is the start time.
    record["start_ticks"] = me.start_ticks
    pid_file.write_text(json.dumps(record))
    assert runtime.is_active("reused")
    pid_file.unlink()


def test_previous_log_is_rotated(runtime: LocalRuntime) -> None:
    runtime.start(spec("rot", "print('first boot')"))
    wait_for(lambda: not runtime.is_active("rot"))
    runtime.start(spec("rot", "print('second boot')"))
    wait_for(lambda: not runtime.is_active("rot"))
    run_dir = runtime.run_dir("rot")
    assert (run_dir / "serve.log").read_text() == "second boot\n"
    assert (run_dir / "serve.log.1").read_text() == "first boot\n"
    runtime.start(spec("rot", "print('third boot')"))
    wait_for(lambda: not runtime.is_active("rot"))
    assert (run_dir / "serve.log.1").read_text() == "second boot\n"


def test_follow_logs_until_the_serve_exits(runtime: LocalRuntime) -> None:
    code = "import time\nfor i in range(5):\n    print('line', i, flush=True); time.sleep(0.1)"
    runtime.start(spec("follow", code))
    lines = list(runtime.logs("follow", follow=True))
    assert lines == [f"line {i}" for i in range(5)]
    assert not runtime.is_active("follow")


def test_stop_of_unknown_serve_is_a_no_op(runtime: LocalRuntime) -> None:
    runtime.stop("never-started", grace_s=1.0)
    assert not runtime.is_active("never-started")
    assert list(runtime.logs("never-started")) == []


def test_bad_serve_names_are_refused(runtime: LocalRuntime) -> None:
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(RuntimeFailure, match="invalid serve name"):
            runtime.run_dir(bad)


def test_missing_binary_is_a_runtime_failure(runtime: LocalRuntime) -> None:
    with pytest.raises(RuntimeFailure, match="cannot start serve"):
        runtime.start(ServeSpec(name="nobin", argv=("/nonexistent/serve",)))


def test_default_root_is_under_paroctl_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAROCTL_HOME", str(tmp_path / "home"))
    assert LocalRuntime().root == tmp_path / "home" / "runs"
