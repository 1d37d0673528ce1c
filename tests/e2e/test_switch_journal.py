"""paroctl killed mid-switch, against real vLLM CPU serves (local runtime): the journal tells the
next status/stop/switch what runs, so nothing serves untracked. SIGKILL at every journal step
(stopping the old serve, old gone, during the new serve's boot, during its verification), each
followed by status and stop, a new switch or `switch --resume`; SIGTERM mid-boot (rolls back).
A kill at an exact step uses PAROCTL_TEST_HOLD_AT (paroctl stops itself there). Tests run in
order on one box and cost 8 vLLM boots in all (2 of them cut short)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from paroctl import net, state
from paroctl.client import Client, metric_value
from paroctl.errors import ParoctlError
from paroctl.procfs import group_members, read_proc
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import journal

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "paroctl.cli.main"]
NAMES = ("cpu-demo", "cpu-demo-alt")
BOOT_S = 300.0


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory,
    demo_parts: object,
    stop_box: Callable[[dict[str, str], Iterable[str]], None],
    cpu_box_profiles: Callable[[Path, Iterable[str]], int],
) -> Iterator[dict[str, str]]:
    """One PAROCTL_HOME and profiles dir for the module; the two CPU profiles on a free port."""
    root = tmp_path_factory.mktemp("journal-box")
    prof_dir = root / "profiles"
    port = cpu_box_profiles(prof_dir, ("cpu-demo",))
    # One sequence at a time: a request the test keeps running holds the switch's sanity
    # completion back, so "verifying" lasts as long as the test wants (no race with the kill).
    alt = (REPO / "profiles" / "cpu-demo-alt.yaml").read_text()
    assert "max_num_seqs: 4" in alt
    (prof_dir / "cpu-demo-alt.yaml").write_text(alt.replace("max_num_seqs: 4", "max_num_seqs: 1"))
    env = {"PAROCTL_HOME": str(root / "home"), "PAROCTL_PROFILES_DIR": str(prof_dir)}
    yield {**env, "port": str(port), "root": str(root)}
    stop_box(env, NAMES)


@pytest.fixture(autouse=True)
def on_box(box: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_HOME", box["PAROCTL_HOME"])
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", box["PAROCTL_PROFILES_DIR"])


def cli_env(box: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "PAROCTL_HOME": box["PAROCTL_HOME"],
        "PAROCTL_PROFILES_DIR": box["PAROCTL_PROFILES_DIR"],
    }


def paroctl(box: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one paroctl command to completion (a fresh process, like an operator's next command)."""
    return subprocess.run(
        [*CLI, *args], env=cli_env(box), capture_output=True, text=True, timeout=BOOT_S * 2
    )


def start_switch(
    box: dict[str, str], name: str, hold_at: str | None = None
) -> tuple[subprocess.Popen[str], Path]:
    """`paroctl switch name` in the background, its output to a file (a pipe could fill up).
    With hold_at, paroctl stops itself (SIGSTOP) once the journal recorded that step."""
    out = Path(box["root"]) / f"switch-{name}-{time.monotonic_ns()}.out"
    env = cli_env(box) | ({"PAROCTL_TEST_HOLD_AT": hold_at} if hold_at else {})
    with open(out, "w") as handle:
        child = subprocess.Popen(
            [*CLI, "switch", name], env=env, stdout=handle, stderr=subprocess.STDOUT
        )
    return child, out


def held_at(box: dict[str, str], name: str, step: str) -> subprocess.Popen[str]:
    """`paroctl switch name`, stopped right after the journal recorded step (then kill it)."""
    child, out = start_switch(box, name, hold_at=step)

    def stopped_there() -> bool:
        assert child.poll() is None, f"paroctl exited before {step}: {out.read_text()}"
        info = read_proc(child.pid)
        return info is not None and info.state == "T"

    wait_for(f"paroctl held at {step}", stopped_there)
    entry = journal.read()
    assert entry is not None and entry.step == step, out.read_text()
    return child


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = BOOT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def at_step(step: str, child: subprocess.Popen[str], **want: object) -> Callable[[], bool]:
    """A predicate: the journal has reached step (with serve fields as given); child still runs."""

    def reached() -> bool:
        assert child.poll() is None, f"paroctl exited ({child.returncode}) before {step}"
        try:
            entry = journal.read()
        except ParoctlError:
            return False
        if entry is None or entry.step != step or entry.serve is None:
            return False
        return all(getattr(entry.serve, key) == value for key, value in want.items())

    return reached


def started_pid(child: subprocess.Popen[str], name: str) -> int:
    """Wait until the switch journaled the new serve's pid (it is booting now); return it."""
    at_start = at_step("starting", child, profile=name)

    def pid_known() -> bool:
        entry = journal.read() if at_start() else None
        return entry is not None and entry.serve is not None and entry.pid is not None

    wait_for(f"{name} started", pid_known)
    entry = journal.read()
    assert entry is not None and entry.serve is not None and entry.pid is not None
    return entry.pid


def kill(child: subprocess.Popen[str], sig: signal.Signals) -> None:
    child.send_signal(sig)
    child.wait(timeout=BOOT_S * 2)


def answering(box: dict[str, str]) -> list[str]:
    with Client(f"http://127.0.0.1:{box['port']}", retries=0) as client:
        return client.models()


def healthy(box: dict[str, str]) -> bool:
    with Client(f"http://127.0.0.1:{box['port']}", retries=0) as client:
        return client.health()


def assert_gone(pid: int, box: dict[str, str]) -> None:
    """A stopped serve: its port refuses, its process and its whole group (engine core) are gone."""
    assert not net.port_open("127.0.0.1", int(box["port"]))
    assert_no_process(pid)


def assert_no_process(pid: int) -> None:
    """The serve's process and its whole group (vLLM's engine core) are gone."""
    info = read_proc(pid)
    # Its parent (a killed paroctl) is gone; whether init has reaped it yet is not ours to test.
    assert info is None or info.state == "Z"
    assert group_members(pid) == []


def assert_one_verified(box: dict[str, str], name: str, served: str) -> None:
    """Exactly one serve, verified and recorded: live.json, the runtime and the port agree."""
    assert journal.read() is None
    live = state.read_live()
    assert live is not None and live.serve.profile == name
    assert [n for n in NAMES if LocalRuntime().is_active(n)] == [name]
    assert answering(box) == [served]


def test_sigkill_during_boot_then_status_stop_switch(box: dict[str, str]) -> None:
    child, _ = start_switch(box, "cpu-demo")
    pid = started_pid(child, "cpu-demo")
    kill(child, signal.SIGKILL)
    assert journal.read().step == "starting"  # type: ignore[union-attr]
    assert LocalRuntime().is_active("cpu-demo")  # stranded: live.json names nothing

    status = paroctl(box, "status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines() == [
        f"switch:  INTERRUPTED (paroctl pid {child.pid} is gone): nothing -> cpu-demo, "
        f"step starting; journal {journal.path()}",
        f"serving: cpu-demo (local, pid {pid}) at http://127.0.0.1:{box['port']}, "
        "health NOT ANSWERING, serves -; not recorded as live",
        "         `paroctl switch --resume` finishes the switch; `paroctl stop` stops it; "
        "`paroctl switch NAME` stops it first",
        "live: nothing (run `paroctl switch NAME`)",
    ]

    stop = paroctl(box, "stop")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout == "cpu-demo stopped (left running by an interrupted switch)\n"
    assert_gone(pid, box)
    assert journal.read() is None and state.read_live() is None
    assert paroctl(box, "status").stdout == "live: nothing (run `paroctl switch NAME`)\n"

    again = paroctl(box, "switch", "cpu-demo")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("cpu-demo is live at http://127.0.0.1:")
    assert_one_verified(box, "cpu-demo", "smollm2-demo")


def test_sigkill_during_verification_then_status_and_switch(box: dict[str, str]) -> None:
    child, out = start_switch(box, "cpu-demo-alt")
    pid = started_pid(child, "cpu-demo-alt")
    # Freeze paroctl while the serve finishes booting, occupy the serve's one sequence slot,
    # then let paroctl verify: its sanity completion waits behind ours, so the kill lands there.
    os.kill(child.pid, signal.SIGSTOP)
    try:
        wait_for("cpu-demo-alt healthy", lambda: healthy(box))
        busy = occupy(box)
        os.kill(child.pid, signal.SIGCONT)
        wait_for("verifying", at_step("verifying", child, profile="cpu-demo-alt"), timeout=60)
        time.sleep(0.5)  # into the sanity completion, behind ours
    finally:
        os.kill(child.pid, signal.SIGCONT)
    kill(child, signal.SIGKILL)
    entry = journal.read()
    assert entry is not None and entry.step == "verifying", out.read_text()
    assert entry.from_profile == "cpu-demo" and state.read_live() is None

    status = paroctl(box, "status")
    assert status.stdout.splitlines()[:3] == [
        f"switch:  INTERRUPTED (paroctl pid {child.pid} is gone): cpu-demo -> cpu-demo-alt, "
        f"step verifying; journal {journal.path()}",
        f"serving: cpu-demo-alt (local, pid {pid}) at http://127.0.0.1:{box['port']}, "
        "health ok, serves smollm2-alt; not recorded as live",
        "         `paroctl switch --resume` finishes the switch; `paroctl stop` stops it; "
        "`paroctl switch NAME` stops it first",
    ]

    again = paroctl(box, "switch", "cpu-demo")
    busy.join(timeout=30)  # our request died with the stranded serve
    assert again.returncode == 0, again.stderr
    assert (
        f"an interrupted switch cpu-demo -> cpu-demo-alt (paroctl pid {child.pid}), step "
        "verifying left cpu-demo-alt (local) untracked; stopping it"
    ) in " ".join(again.stderr.split())
    assert_no_process(pid)
    assert_one_verified(box, "cpu-demo", "smollm2-demo")


def occupy(box: dict[str, str]) -> threading.Thread:
    """Keep the serve's only sequence slot busy for a while (a long completion, in a thread)."""

    def generate() -> None:
        client = Client(f"http://127.0.0.1:{box['port']}", retries=0, timeout_s=BOOT_S)
        # The serve is stopped under it (a ParoctlError): that is the point.
        with client, contextlib.suppress(ParoctlError):
            client.completion("smollm2-alt", "Once upon a time", max_tokens=900, ignore_eos=True)

    thread = threading.Thread(target=generate, daemon=True)
    thread.start()

    def running() -> bool:
        with Client(f"http://127.0.0.1:{box['port']}", retries=0) as client:
            return metric_value(client.metrics(), "vllm:num_requests_running") >= 1

    wait_for("our request running", running, timeout=30)
    return thread


def test_sigterm_mid_boot_rolls_back(box: dict[str, str]) -> None:
    assert state.read_live().serve.profile == "cpu-demo"  # type: ignore[union-attr]
    child, out = start_switch(box, "cpu-demo-alt")
    pid = started_pid(child, "cpu-demo-alt")
    kill(child, signal.SIGTERM)
    text = out.read_text()
    assert child.returncode == 130, text
    message = " ".join(text.split())
    assert "switch to cpu-demo-alt interrupted: SIGTERM received" in message
    assert "rolled back: cpu-demo is live again and verified" in message, text
    assert_one_verified(box, "cpu-demo", "smollm2-demo")
    assert_no_process(pid)


def test_sigkill_while_stopping_old_then_status_and_resume(box: dict[str, str]) -> None:
    assert state.read_live().serve.profile == "cpu-demo"  # type: ignore[union-attr]
    old_pid = LocalRuntime().main_pid("cpu-demo")
    assert old_pid is not None
    child = held_at(box, "cpu-demo-alt", "stopping-old")
    kill(child, signal.SIGKILL)

    status = paroctl(box, "status")
    assert status.stdout.splitlines()[:3] == [
        f"switch:  INTERRUPTED (paroctl pid {child.pid} is gone): cpu-demo -> cpu-demo-alt, "
        f"step stopping-old; journal {journal.path()}",
        f"serving: cpu-demo (local, pid {old_pid}) at http://127.0.0.1:{box['port']}, "
        "health ok, serves smollm2-demo; still recorded as live (the switch was stopping it)",
        "         `paroctl switch --resume` finishes the switch; `paroctl stop` stops it; "
        "`paroctl switch NAME` stops it first",
    ]
    resume = paroctl(box, "switch", "--resume")
    assert resume.returncode == 0, resume.stderr
    assert resume.stdout.startswith("cpu-demo-alt is live at http://127.0.0.1:")
    assert_no_process(old_pid)
    assert_one_verified(box, "cpu-demo-alt", "smollm2-alt")


def test_sigkill_after_old_gone_then_status_and_stop(box: dict[str, str]) -> None:
    old_pid = LocalRuntime().main_pid("cpu-demo-alt")
    assert old_pid is not None
    child = held_at(box, "cpu-demo", "old-gone")
    kill(child, signal.SIGKILL)
    assert_gone(old_pid, box)
    assert state.read_live() is None

    status = paroctl(box, "status")
    assert status.stdout.splitlines() == [
        f"switch:  INTERRUPTED (paroctl pid {child.pid} is gone): cpu-demo-alt -> cpu-demo, "
        f"step old-gone; journal {journal.path()}",
        "serving: nothing (the old serve was stopped, the new one not started)",
        "         `paroctl switch --resume` finishes the switch",
        "live: nothing (run `paroctl switch NAME`)",
    ]
    stop = paroctl(box, "stop")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout == "nothing is live (an interrupted switch had left nothing running)\n"
    assert journal.read() is None and state.read_live() is None
    assert [n for n in NAMES if LocalRuntime().is_active(n)] == []


def test_sigkill_during_boot_then_resume_verifies_it_where_it_runs(box: dict[str, str]) -> None:
    assert state.read_live() is None  # the box the previous test left: clean and stopped
    child = held_at(box, "cpu-demo", "starting")
    kill(child, signal.SIGKILL)
    entry = journal.read()
    assert entry is not None and entry.serve is not None and entry.pid is not None
    pid = entry.pid

    resume = paroctl(box, "switch", "--resume")
    assert resume.returncode == 0, resume.stderr
    assert "cpu-demo is live at" in resume.stdout and "(resumed)" in resume.stdout
    # Verified where it ran, not restarted: the serve the killed switch started is the live one.
    assert LocalRuntime().main_pid("cpu-demo") == pid
    assert_one_verified(box, "cpu-demo", "smollm2-demo")
    assert state.read_live().origin == "resume"  # type: ignore[union-attr]
