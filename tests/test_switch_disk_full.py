"""A full disk under PAROCTL_HOME, for real: PAROCTL_HOME is a small tmpfs, filled by a file until
the kernel answers ENOSPC. A switch started on it refuses with exit 2 naming the path (no crash
report) and leaves the live serve alone; a disk that fills while the switch runs (the old serve
already stopped, or the new one starting) ends in a rollback: the old serve live and verified.

Mounting a tmpfs needs CAP_SYS_ADMIN (root here and in CI); without it these tests skip. The serves
are the stand-ins of tests/test_switch_signals.py under the real LocalRuntime; the systemd
version is tests/systemd/test_systemd_signals.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from paroctl import net
from paroctl.errors import StateError
from paroctl.procfs import read_proc
from paroctl.serve.runtime.base import ServeSpec
from paroctl.serve.runtime.local import LocalRuntime

# 64 MiB is what a switch asks for (paroctl/switch/recovery.py: Room), with room to spare.
TMPFS_SIZE = "80m"


def fill(directory: Path) -> Path:
    """Write a file in directory until the filesystem is full (ENOSPC); return its path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        for chunk in (1 << 20, 4096, 1):
            block = bytes(chunk)
            with contextlib.suppress(OSError):
                while True:
                    handle.write(block)
    with pytest.raises(OSError) as full, open(directory / "probe", "wb") as probe:
        probe.write(bytes(4096))
        probe.flush()
        os.fsync(probe.fileno())
    assert full.value.errno == errno.ENOSPC
    (directory / "probe").unlink(missing_ok=True)
    return filler


@pytest.fixture(scope="module")
def signals(script: Callable[[str], ModuleType]) -> ModuleType:
    """The stand-in serve and the box helpers of tests/test_switch_signals.py."""
    return script("tests/test_switch_signals.py")


@pytest.fixture
def box(tmp_path: Path, signals: ModuleType, mount_tmpfs: Callable[..., None]) -> Iterator[Any]:
    """A box whose PAROCTL_HOME is a fresh tmpfs of TMPFS_SIZE, with cpu-a live on it."""
    home = tmp_path / "home"
    home.mkdir()
    mount_tmpfs(home, TMPFS_SIZE)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "stand_in.py").write_text(signals.STAND_IN)
    port = net.free_port()
    entrypoint = [sys.executable, str(ctl / "stand_in.py"), str(ctl)]
    signals.write_profiles(tmp_path / "profiles", port, entrypoint)
    env = {
        **os.environ,
        "PAROCTL_HOME": str(home),
        "PAROCTL_PROFILES_DIR": str(tmp_path / "profiles"),
        "PAROCTL_CACHE": str(tmp_path / "cache"),
        "PAROCTL_CPU_FLAGS": "avx2",
    }
    env.pop("PAROCTL_TEST_HOLD_AT", None)
    made = signals.Box(tmp_path, home, ctl, port, env)
    try:
        done = made.paroctl("switch", "cpu-a")
        assert done.returncode == 0, done.stderr
        yield made
    finally:
        (home / "filler").unlink(missing_ok=True)
        made.paroctl("stop")
        subprocess.run(["umount", "--lazy", str(home)], check=False)  # busy: detached


def test_a_switch_on_a_full_disk_refuses_and_leaves_the_live_serve(box: Any) -> None:
    fill(box.home)
    done = box.paroctl("switch", "cpu-b")
    assert done.returncode == 2, done.stderr
    assert "crashed" not in done.stderr and "Traceback" not in done.stderr
    assert f"Error: {box.home}: No space left on device" in done.stderr
    assert "nothing was stopped" in done.stderr
    assert box.answering() == ["stand-in-a"]
    assert box.live() == "cpu-a"
    assert not (box.home / "journal.json").exists()


@pytest.mark.parametrize("step", ["old-gone", "starting"])
def test_a_disk_that_fills_mid_switch_rolls_back(box: Any, signals: ModuleType, step: str) -> None:
    child, out = signals.held_at(box, "cpu-b", step)
    fill(box.home)  # cpu-a is stopped (and at "starting", cpu-b runs): now the disk is full
    text = signals.go_on(child, out)
    assert child.returncode == 2, text
    assert "crashed" not in text and "Traceback" not in text
    assert "switch to cpu-b failed: " in text
    assert str(box.home) in text and ("No space left on device" in text or "disk full" in text)
    assert "rolled back: cpu-a is live again and verified" in text, text
    assert box.answering() == ["stand-in-a"]
    assert box.live() == "cpu-a"
    assert not (box.home / "journal.json").exists()
    assert not (box.home / ".switch-room").exists()


def test_a_serve_whose_pid_file_cannot_be_written_does_not_run_on(
    tmp_path: Path, mount_tmpfs: Callable[..., None]
) -> None:
    """LocalRuntime.start on a full disk: the process starts, its pid file cannot be written;
    nothing could find the serve again, so it is killed and the error names the file."""
    home = tmp_path / "home"
    home.mkdir()
    mount_tmpfs(home, TMPFS_SIZE)
    try:
        runtime = LocalRuntime(root=home / "runs")
        (home / "runs" / "sleeper").mkdir(parents=True)
        fill(home)
        argv = (sys.executable, "-c", f"import time; time.sleep(600)  # {tmp_path}")
        with pytest.raises(StateError, match=r"/runs/sleeper/serve\.pid: cannot record the serve"):
            runtime.start(ServeSpec("sleeper", argv, port=net.free_port()))
        sleepers = [
            pid
            for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if (info := read_proc(pid)) is not None
            and info.state != "Z"
            and argv[2].encode() in _cmdline(pid)
        ]
        assert sleepers == []
    finally:
        subprocess.run(["umount", "--lazy", str(home)], check=False)  # busy: detached


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
