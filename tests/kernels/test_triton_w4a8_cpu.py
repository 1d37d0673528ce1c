"""CPU checks of the W4A8 / W5A8 kernels: the interpreter at small shapes, AOT ISA for gfx1201.

The interpreter runs fp8 and int8 `tl.dot` on the CPU (checked: exact against torch), but its
fp32 -> e4m3 cast carries a mantissa round-up into the wrong binade; the prologue rounds onto the
e4m3 grid itself, so the interpreter sees the same codes as the GPUs. fp16 activations: numpy has
no bf16.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paro_kernels import reference as ref
from paro_kernels.triton import aot

compile_ = aot._compile  # the real build, before a test wraps it

# (K, partition sizes, G, M, format, scale, zp epilogue, bits): every mode at least once.
INTERP_CASES = [
    (256, [96], 128, 3, "fp8", "group", False, 4),
    (256, [64, 32], 64, 17, "int8", "group", True, 5),
    (384, [64, 32, 32], 128, 70, "fp8", "token", True, 4),
    (256, [128], 64, 33, "int8", "token", False, 5),
]
_CHILD = """
import sys, torch
from _triton_cases import bias, exact_gemm, hi_planes, merged_layer_bits, packed, rel, runs
from _triton_cases import reference_a8
from paro_kernels.triton import gemm, prologue, repack, route
k, sizes, g, m, fmt, scale, zpe, bits = eval(sys.argv[1])
parts = merged_layer_bits(k, sizes, g, bits, seed=k + m)
prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu", bits=bits,
                    **hi_planes(parts))
x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
q, asc, rs = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, g, fmt, scale)
y = gemm.w4a8_gemm(q, asc, rs, prep, torch.float16, bias(parts), token=scale == "token",
                   zp_epilogue=zpe)
y2 = route.linear_a8(prep, x, bias(parts), fmt, scale, zpe)
assert y.shape == (m, sum(sizes)) and y.dtype == torch.float16
print(rel(y, exact_gemm(q, asc, parts, g, bits)), rel(y2, reference_a8(x, parts, g, bits, fmt, scale)))
"""


def _interpret(src: str, case: tuple) -> list[float]:  # type: ignore[type-arg]
    """Run `src` on `case` in a child under the Triton interpreter (read when a kernel is
    decorated); the numbers on its last line (the child must succeed)."""
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parents[1] / "kernels")])
    out = subprocess.run(
        [sys.executable, "-c", src, repr(case)], env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]


@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: "-".join(map(str, c[3:])))
def test_interpreter_w4a8_matches_fp64(case: tuple) -> None:  # type: ignore[type-arg]
    gemm, e2e = _interpret(_CHILD, case)
    assert gemm <= 1e-3  # exact arithmetic on the kernel's codes: the fp16 output floor
    assert e2e <= 5e-3  # vs the independent reference: + rare code flips at rounding ties


# gfx1201's form of the fp8 GEMM (`prologue.e4m3_bits`): the weights' e4m3 built from bits.
_E4M3_CHILD = _CHILD.replace(
    "from paro_kernels.triton import gemm, prologue, repack, route\n",
    "from paro_kernels.triton import gemm, prologue, repack, route\nprologue.e4m3_bits = lambda hip: True\n",
)


@pytest.mark.parametrize(
    "case", [c for c in INTERP_CASES if c[4] == "fp8"], ids=lambda c: "-".join(map(str, c[3:]))
)
def test_interpreter_w4a8_e4m3_from_bits_matches_fp64(case: tuple) -> None:  # type: ignore[type-arg]
    assert "prologue.e4m3_bits = lambda hip: True" in _E4M3_CHILD
    gemm, e2e = _interpret(_E4M3_CHILD, case)
    assert gemm <= 1e-3 and e2e <= 5e-3  # the bounds of the converting form above


_BITS_CHILD = """
import torch, triton, triton.language as tl
from paro_kernels.triton.gemm_kernels import _e4m3_exact

@triton.jit
def enc(v_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, _e4m3_exact(tl.load(v_ptr + offs)))

v = torch.arange(-16, 17, dtype=torch.int32)
v = torch.cat((v, torch.zeros(64 - v.numel(), dtype=torch.int32)))
out = torch.empty(64, dtype=torch.float8_e4m3fn)
enc[(1,)](v, out, N=64)
same = out.view(torch.uint8).equal(v.to(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8))
print(int(same), int(out.to(torch.float32).equal(v.to(torch.float32))))
"""


def test_e4m3_from_bits_is_exact_for_every_code_difference() -> None:
    # Every c - off the W4A8 / W5A8 GEMM forms (int4: -8..7, int5: -16..15; and 16): the bytes
    # equal torch's e4m3 encoding and decode to the integer itself (zero to +0).
    same_bytes, same_values = _interpret(_BITS_CHILD, ())
    assert same_bytes == 1 and same_values == 1


_GRID_CHILD = """
import torch, triton, triton.language as tl
from paro_kernels.triton.prologue_kernels import _e4m3_from_grid, _e4m3_round

@triton.jit
def enc(v_ptr, o_ptr, N: tl.constexpr, ROUND: tl.constexpr):
    offs = tl.arange(0, N)
    v = tl.load(v_ptr + offs)
    tl.store(o_ptr + offs, _e4m3_from_grid(_e4m3_round(v), v) if ROUND else _e4m3_from_grid(v))

def run(v, rnd):
    out = torch.empty(v.numel(), dtype=torch.float8_e4m3fn)
    enc[(1,)](v, out, N=v.numel(), ROUND=rnd)
    return out.view(torch.uint8)

codes = torch.arange(256, dtype=torch.uint8)
codes = codes[(codes & 0x7F) != 0x7F]  # every finite e4m3 code (0x80 is -0)
grid = codes.view(torch.float8_e4m3fn).to(torch.float32)
grid = torch.cat((grid, torch.zeros(256 - grid.numel())))
same_grid = run(grid, False)[: codes.numel()].equal(codes)
# Off the grid: RNE (`_e4m3_round`) then the bytes, against torch's RNE encoding; 4096 values
# over 2^-12 .. 448 both signs, plus every tie of the grid (midpoints, exact in fp32).
g = torch.Generator().manual_seed(0)
mags = torch.exp2(torch.empty(3072).uniform_(-12, 8.8, generator=g)).clamp(max=448.0)
mids = (grid[:127].abs().sort().values[:-1] + grid[:127].abs().sort().values[1:]) / 2
v = torch.cat((mags, mids[mids > 0], torch.zeros(1024)))[:4096]
v = v * torch.where(torch.rand(4096, generator=g) < 0.5, -1.0, 1.0)
same_rne = run(v, True).equal(v.to(torch.float8_e4m3fn).view(torch.uint8))
print(int(same_grid), int(same_rne), int(((codes & 0x7F) < 8).sum()))
"""


def test_e4m3_from_grid_encodes_every_code_and_rounds_like_torch() -> None:
    # gfx1201's activation quantizers (`prologue.e4m3_bits`): every finite e4m3 value, subnormals and
    # -0 included, back to its own byte; and RNE + bytes of arbitrary fp32 values (every
    # rounding tie of the grid among them) equal torch's encoding.
    same_grid, same_rne, small = _interpret(_GRID_CHILD, ())
    assert same_grid == 1 and same_rne == 1 and small == 16  # 0..7 subnormal codes, both signs


# The fp8 prologue in gfx1201's form (the codes' bytes from bits) against the converting form
# (the interpreter converts on-grid values exactly: `_e4m3_round` rounds first): the same bytes,
# scales and sums. Columns over 6 decades, so per-token codes reach the e4m3 subnormals.
_GRID_PROLOGUE_CHILD = """
import sys, torch
from _triton_cases import hi_planes, merged_layer_bits, packed, runs
from paro_kernels.triton import mx_gemm, prologue, repack
from paro_kernels import reference as ref
k, sizes, g, m, scale = eval(sys.argv[1])
parts = merged_layer_bits(k, sizes, g, 4, seed=k + m)
prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu",
                    **hi_planes(parts))
x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * torch.logspace(-6, 0, k)
x = x.to(torch.float16)
conv = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, g, "fp8", scale)
prologue.e4m3_bits = lambda hip: True
bits = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, g, "fp8", scale)
mag = bits[0].view(torch.uint8) & 0x7F
same = all(a.view(torch.uint8).equal(b.view(torch.uint8)) for a, b in zip(conv, bits))
sub = int(((mag > 0) & (mag < 8)).sum())
# The per-token quantizer of the MXFP4 W4A8 path in the same form, against the plugin's rule.
xq = x.float()
q, s = mx_gemm.fp8_quant(xq)
qr, sr = ref.quantize_acts(xq.double(), "fp8", "token", k)
kq = q.to(torch.float64)
bad = kq != qr
ok = s.double().equal(sr[:, 0]) and int((bad & (qr.abs() >= 2**-6)).sum()) == 0
ok = ok and bool(((kq - qr).abs()[bad] <= 2**-9).all())
qmag = q.view(torch.uint8) & 0x7F
print(int(same), sub, int(ok), int(((qmag > 0) & (qmag < 8)).sum()))
"""


@pytest.mark.parametrize(
    "case", [(256, [96], 128, 3, "group"), (384, [64, 32, 32], 128, 70, "token")],
    ids=lambda c: f"m{c[3]}-{c[4]}",
)  # fmt: skip
def test_interpreter_fp8_quantizers_from_bits(case: tuple) -> None:  # type: ignore[type-arg]
    same, sub, quant_ok, quant_sub = _interpret(_GRID_PROLOGUE_CHILD, case)
    assert same == 1 and quant_ok == 1, (same, quant_ok)
    assert quant_sub > 0 and (case[4] == "group" or sub > 0), (sub, quant_sub)


_COLS_CHILD = """
import sys, torch
from _triton_cases import hi_planes, merged_layer_bits, packed, rel, runs
from paro_kernels.triton import launch, prologue, repack
k, sizes, g, m, fmt = eval(sys.argv[1])
parts = merged_layer_bits(k, sizes, g, 4, seed=k + m)
prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu",
                    **hi_planes(parts))
x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
whole = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, g, fmt, "token")
assert prologue.prologue_cols(True, g) == 0
launch.is_hip = lambda: True  # gfx1201's launch: 32 rows a program, column slices, 8 warps
assert prologue.prologue_cols(True, g) == min(32, g) and prologue.prologue_block_m(m, True) == 32
sliced = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, g, fmt, "token")
same = (whole[0].view(torch.uint8) == sliced[0].view(torch.uint8)).double().mean().item()
print(same, rel(sliced[1], whole[1].double()), rel(sliced[2], whole[2].double()))
"""


# gfx1201's per-token prologue on column slices of the rotation (`prologue.prologue_cols`, 2026-12-05)
# against the whole-block form (the one the GPU tests hold to fp64): the same codes, scales and
# code sums but for the interpreter's fp32 sums in another order (a code at a rounding tie).
@pytest.mark.parametrize(
    "case", [(384, [64, 32, 32], 128, 70, "fp8"), (256, [128], 64, 33, "int8")],
    ids=lambda c: f"g{c[2]}-m{c[3]}-{c[4]}",
)  # fmt: skip
def test_interpreter_sliced_token_prologue_matches_whole(case: tuple) -> None:  # type: ignore[type-arg]
    same, scales, sums = _interpret(_COLS_CHILD, case)
    assert same >= 0.999 and scales <= 1e-6 and sums <= 1e-3, (same, scales, sums)


_MMA5_CHILD = """
import dataclasses, sys, torch
from _triton_cases import bias, hi_planes, merged_layer_bits, packed, rel, runs
from paro_kernels import reference as ref
from paro_kernels.triton import gemv_mma, repack
k, sizes, g, m = eval(sys.argv[1])
parts = merged_layer_bits(k, sizes, g, 5, seed=k + m)
prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu", bits=5,
                    **hi_planes(parts))
assert any(int(prep.qweight_hi[:, :sizes[0]].reshape(-1)[i]) for i in range(8))  # bits in use
x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
want = torch.cat([ref.paro_linear_ref(x, *p.args(), 5, g, p.bias, **p.hi()) for p in parts], 1)
out = []
for prologue in ("givens", "slice"):  # the records prologue takes at most 32 rows: past them
    how = prologue if m <= 32 else "slice"  # the blocks twice
    y = gemv_mma.gemv_mma_linear(prep, x, bias(parts), prologue=how)
    assert y.shape == (m, sum(sizes)) and y.dtype == torch.float16
    out.append(rel(y, want))
# the launcher's choice: small layers take the blocks past M = 8, else the records (here
# records of another rotation, so that the two prologues' outputs differ)
other = dataclasses.replace(prep, gv_coef=prep.gv_coef * 0.5)
ys = {p: gemv_mma.gemv_mma_linear(other, x, None, prologue=p)
      for p in ("slice", "", *(("givens",) if m <= 32 else ()))}
chosen = "slice" if m >= gemv_mma.MMA_BLOCKS_MIN_M else "givens"
assert torch.equal(ys[""], ys[chosen])
assert m > 32 or rel(ys["givens"], ys["slice"].double()) > 0.1
print(*out)
"""


# int5 (I8 PG ZPE) on the mma GEMV (H200 2026-12-04) through the interpreter, which runs the
# kernel's plain-op unpack (the same fifth-bit byte a word row; M = 40: two 32-row chunks, the
# second partial); the GPU test runs its PTX.
@pytest.mark.parametrize(
    "case",
    [
        (256, [96], 64, 1),
        (384, [64, 32, 32], 128, 5),
        (256, [64, 64], 128, 11),
        (256, [64, 64], 128, 40),
    ],
    ids=lambda c: f"g{c[2]}-m{c[3]}",
)
def test_interpreter_int5_mma_gemv_matches_fp64(case: tuple) -> None:  # type: ignore[type-arg]
    rels = _interpret(_MMA5_CHILD, case)  # records, blocks
    assert len(rels) == 2 and max(rels) <= 2e-3  # exact c - z, fp32 sums: the fp16 output floor


def test_quantize_acts_reference_rules() -> None:
    x = torch.tensor([[0.0] * 64 + [1.0, -2.5, 127.0 / 50, 3.0] + [0.0] * 60], dtype=torch.float64)
    q, s = ref.quantize_acts(x, "int8", "group", 64)
    assert s[0, 0] == 1.0 and float(s[0, 1]) == float(torch.tensor(3.0 / 127, dtype=torch.float32))
    assert q.abs().max() == 127 and q[0, 64] == round(1.0 / float(s[0, 1]))
    q8, s8 = ref.quantize_acts(x, "fp8", "token", 64)
    assert (s8 == s8[0, 0]).all() and q8.abs().max() == 448


# The real per-rank shapes (TP=2): decode, the split-K band and prefill; configs from the picker.
AOT_SHAPES = [(1, 7168, 5120), (64, 5120, 8704), (2048, 17408, 5120)]
MODES = [("fp8", 4, False, False), ("fp8", 4, True, True), ("int8", 4, False, False),
         ("int8", 5, False, True), ("fp8", 5, True, False)]  # fmt: skip


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize(("fmt", "bits", "token", "zpe"), MODES)
@pytest.mark.parametrize(("m", "n", "k"), AOT_SHAPES)
def test_aot_w4a8_gemm_isa(
    target: str, m: int, n: int, k: int, fmt: str, bits: int, token: bool, zpe: bool
) -> None:
    rep, c = aot.compile_w4a8_gemm_kernel(target, m, n, k, 128, fmt, bits, token and m > 16, zpe)
    assert rep.mma, f"no {aot.MMA_A8[(target, fmt)]} in {rep.name} for {target}"
    assert rep.spills == 0 and rep.scratch == 0 and rep.lds <= rep.lds_limit, rep
    assert target != "gfx1201" or rep.vgprs <= 256, rep
    if target == "gfx1201" and fmt == "fp8":
        # The weights' e4m3 built from bits (`_e4m3_exact`), not Triton's software conversion:
        # that took 1162 v_cmp + 1160 v_cndmask in the decode config (7291 instructions in
        # all; 3752 now), 304-608 in the others. What is left are the masks and the epilogue.
        asm = c.asm["amdgcn"]  # type: ignore[attr-defined]
        assert asm.count("v_cndmask") <= 64 and asm.count("v_cmp") <= 64, rep


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize("fmt", ["fp8", "int8"])
@pytest.mark.parametrize(("m", "token"), [(1, False), (2048, False), (1, True), (2048, True)])
def test_aot_rotate_quant_isa(
    target: str, fmt: str, m: int, token: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []
    monkeypatch.setattr(aot, "_compile", lambda *a: built.append(compile_(*a)) or built[-1])
    rep = aot.compile_rotate_quant(target, m, 128, fmt, token)
    assert rep.mma and rep.spills == 0 and rep.scratch == 0 and rep.lds <= rep.lds_limit, rep
    assert target != "gfx1201" or rep.vgprs <= 256, rep
    if target == "gfx1201":
        # The fp8 codes' bytes from bits (`_e4m3_from_grid`), not Triton's software conversion,
        # which took 161-326 v_cmp and as many v_cndmask (1921 -> 1434 instructions at M = 1
        # per group, 3253 -> 2324 at M = 2048); int8 has 3-6. What is left are the masks.
        asm = built[-1].asm["amdgcn"]
        assert asm.count("v_cndmask") <= 16 and asm.count("v_cmp") <= 16, rep
    if token and target == "gfx1201":
        # The per-token prologue on 32-column slices of the rotation (`prologue.prologue_cols`):
        # 184-190 VGPRs, so 8 waves per SIMD (1536 // V), where the whole-block form took 256 and
        # spilled 2 (12 B of scratch) until 2026-12-05.
        assert "COLS=32" in rep.config and 1536 // rep.vgprs >= 8, rep
