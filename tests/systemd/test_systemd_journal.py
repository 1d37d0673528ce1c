"""A box booted by systemd alone, and paroctl killed at every journal step, on the systemd runtime:
real vLLM units inside a real systemd, paroctl as separate processes (an operator's commands).

One test, one story (a unit left running by one step is the next step's old serve): `systemctl
start` alone -> status reports it -> adopt; SIGKILL while stopping the old unit -> stop; during
the boot -> `switch --resume` verifies the unit where it runs; after the old unit is gone ->
stop; during verification -> stop. 3 vLLM boots. The kill lands at an exact step through
PAROCTL_TEST_HOLD_AT (paroctl stops itself right after the journal recorded the step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from paroctl import net, proc, state
from paroctl.client import Client
from paroctl.procfs import read_proc
from paroctl.serve.runtime.systemd import unit_for
from paroctl.switch import journal

if TYPE_CHECKING:
    from tests.systemd.conftest import ProfileDir, SystemdBox

pytestmark = pytest.mark.e2e

CLI = [sys.executable, "-m", "paroctl.cli.main"]


def paroctl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """One paroctl command in a fresh process (the env the fixtures set: box home, prefix)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def killed_at(name: str, step: str, out: Path) -> int:
    """Run `paroctl switch name`, SIGKILL it right after the journal recorded step; its pid."""
    env = {**os.environ, "PAROCTL_TEST_HOLD_AT": step}
    with open(out, "w") as handle:
        child = subprocess.Popen(
            [*CLI, "switch", name], env=env, stdout=handle, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 900
    while (info := read_proc(child.pid)) is None or info.state != "T":
        assert child.poll() is None, f"paroctl exited before {step}: {out.read_text()}"
        assert time.monotonic() < deadline, f"paroctl never reached {step}"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    entry = journal.read()
    assert entry is not None and entry.step == step, out.read_text()
    return child.pid


def models(port: int) -> list[str]:
    with Client(f"http://127.0.0.1:{port}", retries=0) as client:
        return client.models()


def active(box: SystemdBox) -> list[str]:
    return [name for name in ("sd-a", "sd-b") if box.runtime.is_active(name)]


def assert_clean(box: SystemdBox, port: int) -> None:
    assert journal.read() is None and state.read_live() is None
    assert active(box) == [] and not net.port_open("127.0.0.1", port)


def test_systemd_alone_then_kills_at_every_step(
    sd_env: SystemdBox, sd_profiles: ProfileDir, tmp_path: Path
) -> None:
    port = net.free_port()
    sd_profiles.write("sd-a", "smollm2-sd-a", port)
    sd_profiles.write("sd-b", "smollm2-sd-b", port)
    state.clear_live()
    journal.clear()
    url = f"http://127.0.0.1:{port}"

    # 1. The unit installed and started by systemd alone (as after a reboot with it enabled).
    sd_env.install(sd_profiles.load("sd-a"))
    proc.run(sd_env.runtime.systemctl("start", unit_for("sd-a")), timeout=120)
    with Client(url, retries=0) as client:
        client.wait_healthy(timeout_s=sd_env.boot_timeout_s)
    pid = sd_env.runtime.main_pid("sd-a")
    status = paroctl("status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines() == [
        f"serving: sd-a (systemd, pid {pid}) at {url}, health ok, serves smollm2-sd-a; "
        "started from the profile as it is now; not recorded as live",
        "         `paroctl adopt sd-a` verifies and records it; `paroctl stop` stops it",
    ]
    adopted = paroctl("adopt", "sd-a")
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.startswith(f"sd-a is live at {url} as smollm2-sd-a (adopted as it runs)")
    live = state.read_live()
    assert live is not None and (live.serve.profile, live.origin) == ("sd-a", "adopt")
    assert sd_env.runtime.main_pid("sd-a") == pid  # taken as it runs, not restarted
    assert "adopted as it ran" in paroctl("status").stdout.splitlines()[0]

    # 2. Killed while stopping the old unit: stop settles it (the old unit was the live one).
    killer = killed_at("sd-b", "stopping-old", tmp_path / "2.out")
    lines = paroctl("status").stdout.splitlines()
    assert lines[0].startswith(f"switch:  INTERRUPTED (paroctl pid {killer} is gone): sd-a -> sd-b")
    assert "still recorded as live (the switch was stopping it)" in lines[1]
    stop = paroctl("stop")
    assert stop.returncode == 0, stop.stderr
    assert "sd-a stopped" in stop.stdout
    assert_clean(sd_env, port)

    # 3. Killed during the boot: `switch --resume` verifies the unit where it runs.
    killed_at("sd-b", "starting", tmp_path / "3.out")
    booting = sd_env.runtime.main_pid("sd-b")
    assert booting is not None
    resume = paroctl("switch", "--resume")
    assert resume.returncode == 0, resume.stderr
    assert "(resumed)" in resume.stdout
    assert sd_env.runtime.main_pid("sd-b") == booting and active(sd_env) == ["sd-b"]
    assert models(port) == ["smollm2-sd-b"] and journal.read() is None
    assert state.read_live().serve.profile == "sd-b"  # type: ignore[union-attr]

    # 4. Killed after the old unit is gone, before the new one started: nothing runs.
    killed_at("sd-a", "old-gone", tmp_path / "4.out")
    assert active(sd_env) == [] and state.read_live() is None
    assert "serving: nothing" in paroctl("status").stdout
    stop = paroctl("stop")
    assert stop.stdout == "nothing is live (an interrupted switch had left nothing running)\n"
    assert_clean(sd_env, port)

    # 5. Killed during verification: status names the unit, stop stops it through systemd.
    killed_at("sd-a", "verifying", tmp_path / "5.out")
    lines = paroctl("status").stdout.splitlines()
    assert lines[1].startswith(f"serving: sd-a (systemd, pid {sd_env.runtime.main_pid('sd-a')})")
    assert "health ok, serves smollm2-sd-a; not recorded as live" in lines[1]
    stop = paroctl("stop")
    assert stop.stdout == "sd-a stopped (left running by an interrupted switch)\n", stop.stderr
    assert_clean(sd_env, port)
