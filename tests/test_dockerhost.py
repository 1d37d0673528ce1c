"""dockerhost's host-wide lock: two processes that would start dockerd (or build one image tag)
at once take turns. Without it two test workers started two daemons that fought over containerd
("failed to start containerd: timeout")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HOLD = """
import sys, time
from paroctl import dockerhost
with dockerhost._host_lock("dockerd"):
    print("in", time.monotonic(), flush=True)
    time.sleep(0.4)
    print("out", time.monotonic(), flush=True)
"""


def test_two_processes_take_the_host_lock_in_turn(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the lock file lives in the temp dir
    procs = [
        subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        times = dict(line.split() for line in out.splitlines())
        spans.append((float(times["in"]), float(times["out"])))
    (_, a_out), (b_in, _) = sorted(spans)
    assert a_out <= b_in, f"both held the lock at once: {spans}"
    assert (tmp_path / "paroctl-dockerd.lock").exists()
