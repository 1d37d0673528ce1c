"""Build a plan's kernel cache (sm_90 or gfx1201) on a CPU machine, for the GPU check that the
shipped cache serves with zero JIT compiles (tests/kernels/test_precompiled_gpu.py, run by
`gpu_tests.sh precompiled`) and for `asm_same.py`.

    python benchmarks/gpu/precompile_check.py --plan PLAN.json --out DIR [--target sm90]
        [--libtriton PATH]

Run it with the Triton version the GPU box has (3.6 on the H200 of 2026-12-01). `--libtriton`
names the libtriton.so of the GPU box's Python (cp312) wheel when this interpreter differs
(cp311 here): a cache key hashes libtriton's bytes (`triton_key()`), the only part of the key
that differs between two Python builds of one Triton wheel. The GPU run compares the manifest's
`triton_key` with its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path


def _patch_libtriton(path: Path) -> None:
    import hashlib

    from triton.runtime import cache

    here = Path(cache.__file__).resolve().parent.parent / "_C" / "libtriton.so"
    mine = hashlib.sha256(here.read_bytes()).hexdigest()
    theirs = hashlib.sha256(path.read_bytes()).hexdigest()
    orig = cache.triton_key.__wrapped__

    @functools.lru_cache
    def triton_key() -> str:
        return str(orig()).replace(mine, theirs)

    cache.triton_key = triton_key


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--target", default="sm90")
    ap.add_argument("--libtriton", type=Path)
    a = ap.parse_args()
    if a.libtriton:
        _patch_libtriton(a.libtriton)
    from paro_vllm import kernel_cache

    plans = [kernel_cache.Plan.from_json(d) for d in json.loads(a.plan.read_text())["plans"]]
    print(json.dumps(kernel_cache.build(plans, a.target, a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
