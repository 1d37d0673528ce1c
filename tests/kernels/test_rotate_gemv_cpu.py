"""The one-launch decode op (`gemv_mma.rotate_gemv_mma`) on the CPU: through the Triton
interpreter (the plain-op GEMV; the interpreter runs the programs one after another, so the
rotation roles, taken first, are done before any GEMV program waits) and as sm_90 builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paro_kernels.triton import aot, gemv_mma

_CHILD = """
import sys, torch
from _triton_cases import bias, hi_planes, merged_layer_bits, packed, rel, runs
from paro_kernels import reference as ref
from paro_kernels.triton import gemv_mma, launch, repack
k, sizes, g, m, bits = eval(sys.argv[1])
parts = merged_layer_bits(k, sizes, g, bits, seed=k + m)
prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu",
                      bits=bits, **(hi_planes(parts) if bits == 5 else {}))
x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
want = torch.cat([ref.paro_linear_ref(x, *p.args(), bits, g, p.bias,
                                      **(p.hi() if bits == 5 else {})) for p in parts], 1)
two = gemv_mma.gemv_mma_linear(prep, x, bias(parts), prologue="givens")
out = []
for rows in (-1, 0):
    y = gemv_mma.rotate_gemv_mma(x, prep, bias(parts), rows=rows)
    assert torch.equal(y, two), rows  # programs in order: the same sums in the same order
    out.append(rel(y, want))
ctr = launch.scratch("rotate_gemv_ctr", 1, torch.int32, torch.device("cpu"))
assert not ctr.any()
print(*out)
"""


@pytest.mark.parametrize(
    "case", [(256, [64, 64], 128, 5, 4), (384, [64, 32, 32], 128, 11, 5)],
    ids=lambda c: f"int{c[4]}-m{c[3]}",
)  # fmt: skip
def test_interpreter_one_launch_equals_two(case: tuple) -> None:  # type: ignore[type-arg]
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parents[1] / "kernels")])
    out = subprocess.run([sys.executable, "-c", _CHILD, repr(case)], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rels = [float(v) for v in out.stdout.strip().splitlines()[-1].split()]
    assert len(rels) == 2 and max(rels) <= 2e-3


@pytest.mark.parametrize("hi", [False, True], ids=["int4", "int5"])
@pytest.mark.parametrize("m", [2, 16, 32])
def test_aot_one_launch_sm90(m: int, hi: bool) -> None:
    # The sm_90 build at the launcher's config and cap (`gemv_mma.ROTATE_CAP`): the GEMV
    # programs' mmas and unpack as `gemv_mma_kernel`'s (the same instruction counts); the
    # group's weight words loaded before the wait (the acquire loop) and its activation pairs
    # after it, volatile; registers within the cap, so the split's programs an SM fit.
    rep, c = aot.compile_rotate_gemv_mma("sm90", m, 7168, 5120, 128, (6144, 6656), hi=hi, p=3)
    _, c0 = aot.compile_gemv_mma("sm90", m, 7168, 5120, 128, (6144, 6656), hi=hi)
    ptx, ptx0 = c.asm["ptx"], c0.asm["ptx"]  # type: ignore[attr-defined]
    assert rep.mma and rep.spills == 0, rep
    mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    assert ptx.count(mma) == ptx0.count(mma) > 0
    assert ptx.count("lop3.b32") >= ptx0.count("lop3.b32")
    tiles = gemv_mma.mma_tiles(m)
    vol = "ld.volatile.global.v4"  # both: the split-K finish's reads; here the pairs besides
    assert ptx.count(vol) - ptx0.count(vol) == 4 * tiles
    wait = ptx.index("ld.global.gpu.acquire.b32")  # the wait loop's read (an atomic add of 0)
    words = [i for i in range(len(ptx)) if ptx.startswith("ld.global.v4.b32", i)]
    assert any(i < wait for i in words)  # the weight words are in flight during the wait
    cap, fit = gemv_mma.ROTATE_CAP[(tiles, 5 if hi else 4)]
    regs = aot.cubin_usage(c)["REG"]
    assert 0 < regs <= cap and fit <= 65536 // (-(-regs // 8) * 8 * 128), (regs, cap, fit)
