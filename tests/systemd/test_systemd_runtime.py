"""SystemdRuntime against a real systemd (in a container) running real vLLM CPU serves as units."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from paroctl import net, proc
from paroctl.client import Client
from paroctl.errors import RuntimeFailure
from paroctl.serve.runtime import Runtime, ServeSpec
from paroctl.serve.runtime.systemd import SystemdRuntime, parse_show, split_cursor, unit_for

if TYPE_CHECKING:  # conftest is not importable as a module at run time
    from .conftest import ProfileDir, SystemdBox

HOST = "127.0.0.1"


def _spec(name: str, port: int) -> ServeSpec:
    # SystemdRuntime runs the installed unit; only the name matters.
    return ServeSpec(name=name, argv=("unused",), port=port)


def _install_pair(box: SystemdBox, profiles_dir: ProfileDir) -> tuple[int, int]:
    """Install units sd-a and sd-b (each Conflicts= the other) on two free ports."""
    port_a, port_b = net.free_port(), net.free_port()
    profiles_dir.write("sd-a", "sd-a-model", port_a)
    profiles_dir.write("sd-b", "sd-b-model", port_b)
    # Render both only after both exist: each unit's Conflicts= lists the directory's others.
    for name in ("sd-a", "sd-b"):
        box.install(profiles_dir.load(name))
    return port_a, port_b


def _wait_for_line(runtime: SystemdRuntime, name: str, needle: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for line in runtime.logs(name, follow=True):
        if needle in line:
            return
        if time.monotonic() >= deadline:
            break
    raise AssertionError(f"{needle!r} not in {name}'s journal within {timeout_s:g} s")


def _wait_inactive(runtime: SystemdRuntime, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while runtime.is_active(name):
        assert time.monotonic() < deadline, f"{name} still active after {timeout_s:g} s"
        time.sleep(0.2)


# --- pure parts ----------------------------------------------------------------------------------


def test_argv_builders_take_the_prefix() -> None:
    runtime = SystemdRuntime(scope="user", prefix=("ssh", "box"))
    assert runtime.systemctl("start", "--", unit_for("a")) == [
        "ssh",
        "box",
        "systemctl --user start -- paroctl-a.service",
    ]
    assert runtime.journalctl("--after-cursor=s=1;i=2") == [
        "ssh",
        "box",
        "journalctl --user '--after-cursor=s=1;i=2'",
    ]
    docker = SystemdRuntime(prefix=("docker", "exec", "sd"))
    assert docker.systemctl("show", "-p", "MainPID", "--", "paroctl-a.service") == [
        "docker",
        "exec",
        "sd",
        "systemctl",
        "show",
        "-p",
        "MainPID",
        "--",
        "paroctl-a.service",
    ]
    assert isinstance(runtime, Runtime)


def test_parse_show_and_cursor() -> None:
    assert parse_show("A=1\nB=x=y\n\nnoise\n") == {"A": "1", "B": "x=y"}
    assert split_cursor("one\ntwo\n-- cursor: s=1;i=2\n") == (["one", "two"], "s=1;i=2")
    assert split_cursor("") == ([], None)


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "a b", "-x"])
def test_unit_for_rejects_names_that_are_not_units(bad: str) -> None:
    with pytest.raises(RuntimeFailure, match="invalid serve name"):
        unit_for(bad)


# --- against the real systemd --------------------------------------------------------------------


@pytest.mark.e2e
def test_stop_unknown_unit_is_a_noop(sd_env: SystemdBox) -> None:
    runtime = sd_env.runtime
    start = time.monotonic()
    runtime.stop("never-installed", grace_s=60)
    assert time.monotonic() - start < 20  # no wait for the 60 s grace
    assert not runtime.is_active("never-installed")
    assert runtime.main_pid("never-installed") is None
    assert list(runtime.logs("never-installed")) == []


@pytest.mark.e2e
def test_start_missing_unit_names_it(sd_env: SystemdBox) -> None:
    with pytest.raises(RuntimeFailure) as info:
        sd_env.runtime.start(_spec("never-installed", 1))
    assert "paroctl-never-installed.service is not loaded (LoadState=not-found)" in str(info.value)
    assert "paroctl unit install never-installed" in str(info.value)


@pytest.mark.e2e
def test_start_failure_carries_the_journal(sd_env: SystemdBox, sd_profiles: ProfileDir) -> None:
    sd_profiles.write("sd-bad", "sd-bad-model", net.free_port())
    profile = sd_profiles.load("sd-bad")
    sd_env.install(profile)
    # A unit whose ExecStartPre fails: `systemctl start` fails, and the error shows why.
    unit = sd_env.unit_dir / unit_for("sd-bad")
    text = unit.read_text().replace("ExecStartPre=/usr/bin/mkdir", "ExecStartPre=/usr/bin/false")
    unit.write_text(text)
    sd_env.runtime.daemon_reload()
    with pytest.raises(RuntimeFailure) as info:
        sd_env.runtime.start(_spec("sd-bad", 1))
    message = str(info.value)
    assert message.startswith("cannot start paroctl-sd-bad.service: Job for paroctl-sd-bad")
    assert "--- last journal lines ---" in message
    assert "Control process exited, code=exited, status=1/FAILURE" in message
    assert not sd_env.runtime.is_active("sd-bad")


@pytest.mark.e2e
def test_unit_serves_then_stops_cleanly(sd_env: SystemdBox, sd_profiles: ProfileDir) -> None:
    runtime = sd_env.runtime
    port_a, _ = _install_pair(sd_env, sd_profiles)
    start = time.monotonic()
    runtime.start(_spec("sd-a", port_a))
    with Client(f"http://{HOST}:{port_a}") as client:
        client.wait_healthy(sd_env.boot_timeout_s, alive=lambda: runtime.is_active("sd-a"))
        sd_env.timings["unit start -> /health s"] = time.monotonic() - start
        assert client.models() == ["sd-a-model"]
    assert runtime.is_active("sd-a")
    pid = runtime.main_pid("sd-a")
    assert isinstance(pid, int) and pid > 1
    assert str(runtime.log_path("sd-a")) == "journal:paroctl-sd-a.service"
    lines = list(runtime.logs("sd-a"))
    assert any("Started paroctl-sd-a.service" in line for line in lines)
    assert any("non-default args" in line and "sd-a-model" in line for line in lines)
    assert any("Maximum concurrency" in line for line in lines)
    with pytest.raises(RuntimeFailure, match="already active"):
        runtime.start(_spec("sd-a", port_a))

    start = time.monotonic()
    runtime.stop("sd-a", grace_s=30)
    sd_env.timings["unit stop s"] = time.monotonic() - start
    net.wait_port_closed(HOST, port_a, timeout=5)
    assert not runtime.is_active("sd-a")
    assert runtime.main_pid("sd-a") is None
    assert runtime.cgroup_pids("sd-a") == []
    # The stopped run's journal stays readable (systemd clears InvocationID on stop).
    assert any("Stopped paroctl-sd-a.service" in line for line in runtime.logs("sd-a"))
    runtime.stop("sd-a", grace_s=5)  # a second stop is a no-op


@pytest.mark.e2e
def test_conflicts_stops_the_other_unit(sd_env: SystemdBox, sd_profiles: ProfileDir) -> None:
    runtime = sd_env.runtime
    port_a, port_b = _install_pair(sd_env, sd_profiles)
    runtime.start(_spec("sd-a", port_a))
    # Let A's vLLM get going (API server and engine processes exist) before B displaces it.
    _wait_for_line(runtime, "sd-a", "non-default args", 120)
    assert runtime.is_active("sd-a")

    start = time.monotonic()
    runtime.start(_spec("sd-b", port_b))
    _wait_inactive(runtime, "sd-a", 60)
    assert runtime.cgroup_pids("sd-a") == []
    assert not net.port_open(HOST, port_a)
    with Client(f"http://{HOST}:{port_b}") as client:
        client.wait_healthy(sd_env.boot_timeout_s, alive=lambda: runtime.is_active("sd-b"))
        sd_env.timings["conflicting start -> /health s"] = time.monotonic() - start
        assert client.models() == ["sd-b-model"]
    assert not runtime.is_active("sd-a")
    assert any("Stopped paroctl-sd-a.service" in line for line in runtime.logs("sd-a"))


@pytest.mark.e2e
def test_logs_hold_only_the_current_run(sd_env: SystemdBox, sd_profiles: ProfileDir) -> None:
    runtime = sd_env.runtime
    port_a, _ = _install_pair(sd_env, sd_profiles)
    runtime.start(_spec("sd-a", port_a))
    _wait_for_line(runtime, "sd-a", "non-default args", 120)
    first = runtime.invocation_id("sd-a")
    first_pid = runtime.main_pid("sd-a")
    runtime.stop("sd-a", grace_s=30)
    # After the stop, logs() still reads the last run: the follow ends instead of hanging.
    assert any("Stopped paroctl-sd-a.service" in line for line in runtime.logs("sd-a", True))

    runtime.start(_spec("sd-a", port_a))
    _wait_for_line(runtime, "sd-a", "non-default args", 120)
    second = runtime.invocation_id("sd-a")
    assert first and second and first != second
    lines = list(runtime.logs("sd-a"))
    assert sum("Started paroctl-sd-a.service" in line for line in lines) == 1
    assert not any("Stopped paroctl-sd-a.service" in line for line in lines)
    if first_pid != runtime.main_pid("sd-a"):
        assert not any(f"(APIServer pid={first_pid})" in line for line in lines)
    # The whole unit journal has both runs: the filtering is by invocation, not luck.
    whole = proc.run(
        runtime.journalctl("-u", unit_for("sd-a"), "-o", "cat", "--no-pager"), timeout=60
    ).stdout
    assert whole.count("Started paroctl-sd-a.service") >= 2
    runtime.stop("sd-a", grace_s=30)
    assert not runtime.is_active("sd-a")


@pytest.mark.e2e
def test_stop_kills_after_grace(sd_env: SystemdBox, sd_profiles: ProfileDir) -> None:
    runtime = sd_env.runtime
    sd_profiles.write("sd-stubborn", "sd-stubborn-model", net.free_port())
    sd_env.install(sd_profiles.load("sd-stubborn"))
    # A serve that ignores SIGTERM: stop() must SIGKILL it after grace_s, not wait out the
    # unit's TimeoutStopSec (45 s).
    unit = sd_env.unit_dir / unit_for("sd-stubborn")
    lines = unit.read_text().splitlines()
    lines = [
        "ExecStart=/bin/sh -c \"trap '' TERM; sleep 600 & trap '' TERM; wait\""
        if line.startswith("ExecStart=")
        else line
        for line in lines
    ]
    unit.write_text("\n".join(lines) + "\n")
    runtime.daemon_reload()
    runtime.start(_spec("sd-stubborn", 1))
    assert runtime.is_active("sd-stubborn")
    assert len(runtime.cgroup_pids("sd-stubborn")) >= 2
    start = time.monotonic()
    runtime.stop("sd-stubborn", grace_s=2)
    elapsed = time.monotonic() - start
    assert 2 <= elapsed < 15
    assert not runtime.is_active("sd-stubborn")
    assert runtime.cgroup_pids("sd-stubborn") == []
