"""pytest plugin for the GPU suite on a machine of several GPUs (`benchmarks/gpu/shard.sh` loads it
with `-p _gpu_spread`): xdist worker gwI sees GPU I mod PARO_TEST_GPUS alone.

Why: the GPU suite took about 30 s of a busy worker a test (H200, 2026-12-05: 19,839 s of worker
time for 671 tests on the one-GPU machine's 16 cores, every worker busy), so a machine with more
GPUs has more cores (nvidia-h200-x2: 32) and GPUs to spread the workers over. Each worker gets one
GPU through CUDA_VISIBLE_DEVICES, set at configure time, before anything initialises CUDA, so the
tests' `device="cuda"` and `.cuda()` mean that GPU and the kernels launch there unchanged. Without
PARO_TEST_GPUS (or with 1), or outside xdist, nothing changes.
"""

from __future__ import annotations

import os
import re

import pytest


def pytest_configure(config: pytest.Config) -> None:
    gpus = int(os.environ.get("PARO_TEST_GPUS", "1") or "1")
    # xdist's own mark of a worker (a controller started from inside a worker inherits the env)
    worker_input = getattr(config, "workerinput", None)
    worker = re.fullmatch(r"gw(\d+)", worker_input["workerid"]) if worker_input else None
    if gpus > 1 and worker is not None:
        # a list the machine already narrowed to ("2,3") is indexed, not replaced
        seen = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        ids = seen if len(seen) >= gpus else [str(i) for i in range(gpus)]
        os.environ["CUDA_VISIBLE_DEVICES"] = ids[int(worker.group(1)) % gpus].strip()
