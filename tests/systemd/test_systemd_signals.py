"""Signals and a full disk during a switch on the systemd runtime: units inside a real systemd,
paroctl as separate processes (an operator's commands). SIGTERM, SIGHUP and SIGINT at each
journal step and while the old unit is going down end with exit 130 and the old serve live and
verified; a PAROCTL_HOME that fills mid-switch ends in a rollback (exit 2, the path named).

The units run the stand-in vLLM of tests/test_switch_signals.py (the container's own python3,
stdlib only) through the profile's serve.entrypoint: a unit starts and answers in a second where
a vLLM boot takes a minute or more (tests/systemd/test_systemd_journal.py has those).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from paroctl import net

if TYPE_CHECKING:
    from tests.systemd.conftest import SystemdBox

pytestmark = pytest.mark.e2e

# A step and the signal sent there: every step, every signal, in four switches (CI time).
CASES = (
    ("stopping-old", signal.SIGHUP),
    ("old-gone", signal.SIGTERM),
    ("starting", signal.SIGINT),
    ("verifying", signal.SIGTERM),
)


@pytest.fixture(scope="module")
def signals(script: Callable[[str], ModuleType]) -> ModuleType:
    """The stand-in serve and the box helpers of tests/test_switch_signals.py."""
    return script("tests/test_switch_signals.py")


def systemd_profiles(directory: Path, port: int, ctl: Path, visible: Path) -> None:
    """cpu-a, cpu-b, cpu-bad as systemd units running the stand-in; their env files and caches
    under visible (a directory the container sees at the same path)."""
    extra = (
        "runtime: {kind: systemd, engine: none}\n"
        f"box: {{etc_dir: '{visible}/etc', cache_root: '{visible}/cache'}}\n"
    )
    for name, served in (("cpu-a", "stand-in-a"), ("cpu-b", "stand-in-b")):
        (directory / f"{name}.yaml").write_text(
            f"description: a stand-in unit ({name})\nextends: _cpu\n{extra}"
            f"model: {{path: SmolLM2-135M-Instruct, served_names: [{served}]}}\n"
            f"serve: {{port: {port}, entrypoint: [/usr/bin/python3, '{ctl}/stand_in.py', "
            f"'{ctl}']}}\n"
        )


def make_box(
    systemd_box: SystemdBox, signals: ModuleType, root: Path, home: Path | None = None
) -> Any:
    """Profiles and a stand-in for the systemd box under root; PAROCTL_HOME the box's own, or
    home (a host directory the units never read: env files and caches stay where they see)."""
    visible = systemd_box.home / f"signals-{os.getpid()}-{root.name}"
    ctl = visible / "ctl"
    ctl.mkdir(parents=True)
    (ctl / "stand_in.py").write_text(signals.STAND_IN)
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "_cpu.yaml").write_text((signals.REPO / "profiles" / "_cpu.yaml").read_text())
    port = net.free_port()
    systemd_profiles(profiles, port, ctl, visible)
    home = home or systemd_box.home
    env = {
        **os.environ,
        "PAROCTL_HOME": str(home),
        "PAROCTL_PROFILES_DIR": str(profiles),
        "PAROCTL_CACHE": str(systemd_box.cache),
        "PAROCTL_UNIT_DIR": str(systemd_box.unit_dir),
        "PAROCTL_SYSTEMCTL_PREFIX": shlex.join(systemd_box.runtime.prefix),
    }
    env.pop("PAROCTL_TEST_HOLD_AT", None)
    return signals.Box(root, home, ctl, port, env)


@pytest.fixture(scope="module")
def module_box(
    systemd_box: SystemdBox, signals: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One box for the signal tests: each starts with cpu-a live and leaves it so."""
    made = make_box(systemd_box, signals, tmp_path_factory.mktemp("sd-signals"))
    try:
        yield made
    finally:
        made.paroctl("stop")
        systemd_box.stop_all()


@pytest.fixture
def box(module_box: Any) -> Any:
    """cpu-a live and answering (switched to where it is not)."""
    if module_box.live() != "cpu-a" or module_box.answering() != ["stand-in-a"]:
        done = module_box.paroctl("switch", "cpu-a")
        assert done.returncode == 0, done.stdout + done.stderr
        assert module_box.answering() == ["stand-in-a"]
    return module_box


@pytest.fixture
def tmpfs_box(systemd_box: SystemdBox, signals: ModuleType, tmp_path: Path,
              mount_tmpfs: Callable[..., None]) -> Iterator[Any]:  # fmt: skip
    """cpu-a live, with PAROCTL_HOME a fresh 80 MiB tmpfs on the host."""
    home = tmp_path / "home"
    home.mkdir()
    mount_tmpfs(home, "80m")
    made = make_box(systemd_box, signals, tmp_path, home)
    try:
        done = made.paroctl("switch", "cpu-a")
        assert done.returncode == 0, done.stdout + done.stderr
        yield made
    finally:
        with contextlib.suppress(FileNotFoundError):
            (home / "filler").unlink()
        made.paroctl("stop")
        systemd_box.stop_all()
        subprocess.run(["umount", "--lazy", str(home)], check=False)  # busy: detached


def assert_a_serves(box: Any, sd_box: SystemdBox) -> None:
    assert box.answering() == ["stand-in-a"]
    assert box.live() == "cpu-a"
    assert not (box.home / "journal.json").exists()
    assert sd_box.runtime.is_active("cpu-a") and not sd_box.runtime.is_active("cpu-b")


@pytest.mark.parametrize(("step", "sig"), CASES, ids=[f"{s}-{g.name}" for s, g in CASES])
def test_a_signal_at_each_step_leaves_the_old_unit_live_and_verified(
    box: Any, systemd_box: SystemdBox, signals: ModuleType, step: str, sig: signal.Signals
) -> None:
    child, out = signals.held_at(box, "cpu-b", step)
    text = signals.signal_and_wait(child, sig, out)
    assert child.returncode == 130, text
    assert f"switch to cpu-b interrupted: {sig.name} received" in text
    kept = "nothing was stopped: cpu-a still serves"
    rolled = "rolled back: cpu-a is live again and verified"
    assert (kept if step == "stopping-old" else rolled) in text, text
    assert_a_serves(box, systemd_box)
    status = box.paroctl("status")
    assert status.returncode == 0 and "health:  ok" in status.stdout, status.stdout


def test_a_signal_while_the_old_unit_stops_brings_it_back(
    box: Any, systemd_box: SystemdBox, signals: ModuleType
) -> None:
    """The signal lands once "stopping cpu-a" is printed, while systemd is still stopping the
    unit (its stand-in holds on in its SIGTERM handler until the test lets it go)."""
    hold, term = box.ctl / "hold-stop", box.ctl / f"{box.port}.term"
    term.unlink(missing_ok=True)
    hold.touch()
    try:
        child, out = box.start("switch", "cpu-b")
        signals.wait_for("cpu-a told to stop", term.exists)  # written inside the container
        assert "stopping cpu-a" in out.read_text()
        child.send_signal(signal.SIGHUP)
    finally:
        hold.unlink()
    text = signals.go_on(child, out)
    assert child.returncode == 130, text
    assert "switch to cpu-b interrupted: SIGHUP received" in text
    assert "rolled back: cpu-a is live again and verified" in text, text
    assert_a_serves(box, systemd_box)


def test_a_home_that_fills_mid_switch_rolls_back(
    tmpfs_box: Any,
    systemd_box: SystemdBox,
    script: Callable[[str], ModuleType],
    signals: ModuleType,
) -> None:
    box = tmpfs_box
    disk = script("tests/test_switch_disk_full.py")
    child, out = signals.held_at(box, "cpu-b", "old-gone")
    disk.fill(box.home)
    text = signals.go_on(child, out)
    assert child.returncode == 2, text
    assert "crashed" not in text and "Traceback" not in text
    assert str(box.home) in text and "No space left on device" in text, text
    assert "rolled back: cpu-a is live again and verified" in text, text
    assert_a_serves(box, systemd_box)
