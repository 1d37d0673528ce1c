"""The kernel cache built on CPU, used on the GPU: zero JIT compiles over the plan's shapes.

PRECOMPILE_CACHE names the cache root (its `sm90/` built on CPU by
benchmarks/gpu/precompile_check.py) and PRECOMPILE_PLAN the plan it was built from; unset, the test builds the small plan's cache
itself on this machine's CPU first. Every layer of the plan runs through the
plugin's real Triton entry point (custom ops, real launches) at every M bucket; Triton's cache is
routed through `ShippedCacheManager` with an empty writable cache, so each specialization is
either a shipped hit or a compile, and the test requires zero compiles.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu
EXTRA_MS = 24
CAPTURE = 128  # the plans' largest capture size
REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(REPO / "plugin"))


def _run_layer(plan: Any, layer: Any, prep: object, ms: list[int]) -> int:
    """The layer at each M through the plugin's Triton entry point (real launches)."""
    import torch
    from paro_vllm import activations, mx_triton_backend, triton_backend

    for m in ms:
        x = torch.randn(m, layer.k, device="cuda", dtype=torch.bfloat16)
        if layer.method == "paroquant":
            act = activations.act_config(plan.knobs, m, layer.group_size)
            y = triton_backend.apply(prep, x, None, act)
        else:
            y = mx_triton_backend.apply(prep, x, None, plan.knobs["PARO_ACT_FORMAT"])
        assert y.shape == (m, sum(layer.sizes))
    return len(ms)


def test_shipped_cache_serves_every_launch_without_jit(tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU to launch the kernels: torch.cuda.is_available() is False")
    root, plan_path = os.environ.get("PRECOMPILE_CACHE"), os.environ.get("PRECOMPILE_PLAN")
    if not root or not plan_path:
        # No cache carried in (benchmarks/gpu/gpu_tests.sh carries the one built on another CPU):
        # build the small plan's cache here on this machine's CPU, with the same walk.
        root, plan_path = str(tmp_path / "cache"), str(DATA / "precompile_h200_plan_fallback.json")
        build = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "gpu" / "precompile_check.py"), "--plan", plan_path,
             "--out", str(Path(root) / "sm90")],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(REPO / "kernels"), str(REPO / "plugin"), os.environ.get("PYTHONPATH", "")])},
        )  # fmt: skip
        assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    from paro_kernels.triton import precompile
    from paro_vllm import kernel_cache

    shipped = Path(root) / "sm90"
    manifest = precompile.read_manifest(shipped)
    print(f"manifest: triton {manifest.get('triton')} key {manifest.get('triton_key')}")
    print(f"this GPU's triton key: {precompile.triton_key_sha()}")
    precompile.activate(shipped, tmp_path / "writable")
    precompile.STATS.reset()
    plans = [
        kernel_cache.Plan.from_json(d) for d in json.loads(Path(plan_path).read_text())["plans"]
    ]
    rng = random.Random(17)
    preps = [(p, la, q) for p in plans for la in dict.fromkeys(p.layers)
             for q in kernel_cache.preps(la, "cuda")]  # fmt: skip
    calls = sum(_run_layer(p, la, q, list(p.ms)) for p, la, q in preps)
    torch.cuda.synchronize()
    s = precompile.STATS
    hits, jit = sum(s.shipped.values()), sum(s.compiled.values())
    print(f"H200 kernel cache: {calls} linear calls at the plans' M buckets, precompiled hits "
          f"{hits} ({len(manifest.get('keys', {}))} in the manifest), JIT compiles {jit} "
          f"{dict(s.compiled)}, local {sum(s.local.values())}")  # fmt: skip
    # Then prefill Ms the plans never sampled (above the largest capture size, 128 here): they
    # must reuse the sampled specializations (the kernel_cache docstring's claim).
    extra = sum(
        _run_layer(p, la, q, [rng.randint(CAPTURE + 1, max(p.ms)) for _ in range(EXTRA_MS)])
        for p, la, q in preps
    )
    torch.cuda.synchronize()
    jit2 = sum(s.compiled.values()) - jit
    print(f"H200 kernel cache: {extra} more calls at random prefill Ms, JIT compiles {jit2} "
          f"{dict(s.compiled)}")  # fmt: skip
    assert jit == 0 and not s.local, dict(s.compiled)
    assert hits == len(manifest["keys"])
    assert jit2 == 0, dict(s.compiled)
