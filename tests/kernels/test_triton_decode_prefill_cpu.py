"""CPU checks of the int4 / int5 decode and prefill kernels: the interpreter at small shapes
(every path the dispatch can be forced to), and gfx1201 ahead-of-time builds of the kernels the launcher picks.

gfx1201 budget: RDNA4 gives a SIMD 1536 VGPRs per lane in wave32, so a kernel of V VGPRs keeps
min(16, 1536 // V) waves per SIMD; the asserted ceilings keep the occupancy these kernels were
sized for (the dequant program's 8 waves at >= 6 waves per SIMD, the GEMVs' 4 at >= 6).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton  # fails the module in CI when triton is missing: that is the point
from paro_kernels.triton import aot, gemv_dot, gemv_fma, gemv_mma, launch, prologue, route

_CHILD = """
import torch
from dataclasses import replace
from _triton_cases import bias, merged_layer, packed, reference, rel, runs
from paro_kernels.triton import gemv_dot, gemv_fma, prologue, repack, route
out = []
for k, sizes, g, m, path in [(256, [96], 128, 1, "gemv"),
                             (384, [64, 32, 32], 64, 2, "gemv"),
                             (384, [64, 32, 32], 128, 1, "gemv-prologue"),
                             (256, [64, 32], 128, 2, "gemv-prologue"),
                             (256, [64, 32], 64, 3, "mma"),
                             (384, [64, 32, 32], 128, 9, "gemv3"),
                             (384, [64, 32, 32], 128, 5, "dequant"),
                             (640, [512, 256, 128], 128, 1, "gemv-h2"),
                             (384, [80, 48], 128, 2, "gemv-h2"),
                             (384, [64, 32, 32], 128, 5, "gemv-mma"),
                             (256, [96], 64, 8, "gemv-mma"),
                             (256, [64, 64], 128, 11, "gemv-mma"),
                             (256, [64, 32], 64, 27, "gemv-mma")]:
    parts = merged_layer(k, sizes, g, seed=k + m, bias=m % 2 == 1)
    prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu")
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    bb = bias(parts)
    for _ in range(2):  # the second call finds the split-K workspace and tickets zeroed
        if path in ("gemv", "gemv-prologue"):  # the FMA GEMV, 4 SMs' split
            cfg = gemv_fma.gemv2_config(m, sum(sizes), k, g, prep.bounds, 4)
            # with the tables: the Givens-inside GEMV at M = 1 (H200 2026-12-02), the sliced
            # prologue at M = 2; "gemv-prologue" without them
            w = replace(prep, gv_idx=None, gv_coef=None) if path == "gemv-prologue" else prep
            y = gemv_fma.gemv_w4a16(w, x, bb, config=cfg)
        else:
            y = route.w4a16_linear(x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales,
                                  prep.zeros, prep.bounds, g, bb, path=path)
        assert y.shape == (m, sum(sizes)) and y.dtype == torch.float16
        out.append(rel(y, reference(x, parts, g)))
        if path == "gemv" and m == 2:  # the FMA GEMV's rows end at GEMV2_MAX_M, said so
            try:
                route.w4a16_linear(torch.cat([x, x]), prep.rot_hi, prep.rot_lo, prep.qweight,
                                  prep.scales, prep.zeros, prep.bounds, g, bb, path="gemv")
                raise AssertionError("the GEMV took 4 rows")
            except ValueError as e:
                assert "x rows: expected <= 2" in str(e), e
        if path == "dequant":  # W' stored [N, K] (served on NVIDIA) and [K, N]: the same values
            from paro_kernels.triton import dequant
            w_nk = dequant.dequant_weights(prep, torch.float16, nk=True).clone()
            assert w_nk.stride() == (1, k), w_nk.stride()
            w_kn = dequant.dequant_rotate(prep, dtype=torch.float16, trans=True)
            assert w_kn.stride() == (sum(sizes), 1) and torch.equal(w_nk, w_kn)
        if path == "gemv3":  # the records kernel unpaired (H200 2026-12-04) as its prologue
            from paro_kernels.triton import gemv_dot, gemv_fma, prologue, repack, route
            xg = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g, paired=False)
            xs = prologue.rotate_slices(x, prep.rot_hi, prep.rot_lo, g, f16=True)[0]
            assert rel(xg, xs) <= 2e-3, rel(xg, xs)
            y = gemv_dot.gemv3_linear(prep, x, bb, prologue="givens")
            out.append(rel(y, reference(x, parts, g)))
        if path == "gemv-mma" and m > 8:  # the records prologue in row blocks (2026-12-06,
            # a ragged last block at 4 rows): the same xr as one program for all rows
            assert prep.gv_idx is not None and prep.gv_coef is not None
            xa = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g, 0, rows=0)
            for r in (4, 8):
                xb = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g, 0, rows=r)
                assert torch.equal(xa, xb), (m, r)
            # and the sliced blocks prologue in 16-row blocks (a ragged last one): the same xr
            # as one program for all rows
            xs = prologue.rotate_slices(x, prep.rot_hi, prep.rot_lo, g, paired=True, pair_shift=0,
                                        rows=0)
            xt = prologue.rotate_slices(x, prep.rot_hi, prep.rot_lo, g, paired=True, pair_shift=0,
                                        rows=16)
            assert torch.equal(xs[0], xt[0]), m
        if path == "gemv-h2":  # the records prologue (H200 2026-12-04), forced: the same xr as
            # the blocks' up to fp16 rounding, and the op against fp64
            from paro_kernels.triton import gemv_dot, gemv_fma, prologue, repack, route
            assert prep.gv_idx is not None and prep.gv_coef is not None
            xg = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g)
            xs = prologue.rotate_slices(x, prep.rot_hi, prep.rot_lo, g, paired=True)[0]
            assert xg.shape == xs.shape and xg.dtype == xs.dtype
            assert rel(xg, xs) <= 2e-3, rel(xg, xs)
            y = gemv_fma.gemv_h2_linear(prep, x, bb, prologue="givens")
            out.append(rel(y, reference(x, parts, g)))
print(max(out))
"""


def _interpret(src: str) -> str:
    """Run `src` in a child under the Triton interpreter; its stdout (the child must succeed)."""
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parents[1] / "kernels")])
    out = subprocess.run(
        [sys.executable, "-c", src], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_interpreter_every_path_matches_fp64_reference() -> None:
    # fp16 activations: the interpreter runs dots in numpy, which has no bf16.
    out = _interpret(_CHILD)
    assert float(out.strip().splitlines()[-1]) <= 1e-3  # fp16 output floor ~6e-4


_CHILD_INT5 = """
from dataclasses import replace
import torch
from paro_kernels import reference as ref
from _triton_cases import hi_planes, merged_layer_bits, packed, rel, runs
from paro_kernels.triton import gemv_fma, repack, route
out = []
for k, sizes, m in [(384, [64, 32, 32], 1), (256, [96, 32], 2), (384, [64, 32, 32], 3),
                    (256, [96], 9), (512, [128, 64], 16)]:
    assert route.a8_route(m, 128, True, False, "int8") == "gemv3", m
    assert route.a8_route(m, 128, True, True, "int8") is None, m  # gfx1201: the A8 kernels
    assert route.a8_route(m, 64, True, False, "int8") != "gemv3", m  # G = 128 only
    parts = merged_layer_bits(k, sizes, 128, 5, seed=k + m)
    prep = repack.prepare(*packed(parts), runs(parts), 128, dtype=torch.float16, device="cpu",
                        bits=5, **hi_planes(parts))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    b = torch.cat([p.bias for p in parts])
    want = torch.cat([ref.paro_linear_ref(x, *p.args(), 5, 128, p.bias, **p.hi()) for p in parts],
                     1)
    for _ in range(2):  # the second call finds the split-K workspace and tickets zeroed
        ys = [route.linear_a8(prep, x, b, "int8", "group", True)]
        if m <= 2:  # the HFMA2 GEMV's int5 variant (fifth bits, xr / 128), forced, with either
            # paired prologue (blocks, records)
            blocks = replace(prep, gv_idx=None, gv_coef=None)
            ys.append(gemv_fma.gemv_h2_linear(blocks, x, b))
            ys.append(gemv_fma.gemv_h2_linear(prep, x, b, prologue="givens"))
        for y in ys:
            assert y.shape == (m, sum(sizes)) and y.dtype == torch.float16
            out.append(rel(y, want))
print(max(out))
"""


def test_interpreter_int5_decode_matches_fp64_reference() -> None:
    # int5 (W5A8) decode rows on the matrix-unit GEMV's plain-op twin of the int5 unpack (the
    # fifth bits of each word row from byte r % 4 of the K-packed plane), 16-bit activations:
    # against the fp64 W5A16 reference at the fp16 output floor, 1-3 partitions, M = 1-16; at
    # M <= 2 also the HFMA2 GEMV's int5 variant (H200 2026-12-04) with either paired prologue.
    out = _interpret(_CHILD_INT5)
    assert float(out.strip().splitlines()[-1]) <= 1e-3


_CHILD_W8 = """
import torch
from _triton_cases import W8_TOL, hi_planes, merged_layer_bits, packed, reference_a8, rel, runs
from paro_kernels.triton import dequant, repack
out = []
for k, sizes, g, m, bits in [(256, [96], 128, 33, 4), (384, [64, 32, 32], 64, 20, 5)]:
    parts = merged_layer_bits(k, sizes, g, bits, seed=k)
    prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.float16, device="cpu",
                        bits=bits, **hi_planes(parts))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    b = torch.cat([p.bias for p in parts])
    for kind in ("int8", "fp8"):
        y = dequant.w8_linear(prep, x, b, kind)
        e = rel(y, reference_a8(x, parts, g, bits, kind, "group"))
        # the interpreter's fp32 -> e4m3 cast is not RNE (randn * 50: 8.2e-2 relative against
        # torch's 2.7e-2), hence twice the H200 bound for fp8 here
        assert e <= W8_TOL[kind] * (2 if kind == "fp8" else 1), (k, bits, kind, e)
        out.append(e)
print(max(out))
"""


def test_interpreter_w8_prefill_matches_fp64_reference() -> None:
    # The W4A8 prefill route's 8-bit weight pass and row quantizer (H200 2026-12-02), both kinds.
    _interpret(_CHILD_W8)


@pytest.mark.parametrize("bits", [4, 5])
def test_aot_dequant_gfx1201(bits: int) -> None:
    rep = aot.compile_dequant("gfx1201", 7168, 5120, 128, bits, (6144, 6656))
    _check(rep, max_vgprs=256)


@pytest.mark.parametrize(("m", "max_vgprs"), [(1, 160), (2, 224)])
def test_aot_gemv2_gfx1201(m: int, max_vgprs: int) -> None:
    # The FMA GEMV at the M the dispatch gives it (route.GEMV_MAX_M): FMA loop,
    # no spills; M = 1 keeps >= 9 waves per SIMD (149 VGPRs with Triton 3.9), M = 2 >= 6 (218).
    from paro_kernels.triton import aot

    assert m <= route.GEMV_MAX_M
    rep = aot.compile_gemv2("gfx1201", m, 7168, 5120, 128, (6144, 6656))
    _check(rep, max_vgprs=max_vgprs)


@pytest.mark.parametrize("m", [1, 2])
def test_aot_gemv_h2_sm90(m: int) -> None:
    # The HFMA2 GEMV at the config its launcher picks (NVIDIA only: the packed-fp16
    # PTX; gfx1201 keeps the FMA GEMV above). Its multiply-adds really are packed fp16 pairs:
    # per word 4 SUB.F16X2 and, per activation row, 1 MUL + 3 FMA.F16X2; no matrix instruction,
    # no spills.
    from paro_kernels.triton import aot

    assert gemv_fma.h2_ok(False, m, 128) and not gemv_fma.h2_ok(True, m, 128)
    for hi in (False, True):  # int4; int5: 5 more LOP3 a word (the spread, one OR a pair)
        rep, c = aot.compile_gemv_h2("sm90", m, 7168, 5120, 128, (6144, 6656), hi)
        ptx = c.asm["ptx"]  # type: ignore[attr-defined]
        assert rep.mma and rep.spills == 0, rep
        words = ptx.count("sub.f16x2") // 4
        assert ptx.count("fma.rn.f16x2") == 3 * m * words > 0
        assert ptx.count("lop3.b32") == (9 if hi else 4) * words
        assert f"kw={gemv_fma.H2_CONFIG['kw']}" in rep.config


def test_aot_gemv2_rot_sm90() -> None:
    # The FMA GEMV with the Givens layers inside, as NVIDIA serves it: M = 1 on a
    # layer the HFMA2 GEMV does not take (G = 64) within GEMV2_ROT_MAX_WEIGHTS (o_proj, 15.7 M
    # weights); gfx1201 keeps the block prologue. The launcher's config; an FMA loop (no matrix
    # instruction), no local memory or stack, at most 128 registers (Triton 3.9's ptxas: 128, 4
    # programs of 4 warps an SM). Until then no AOT check held this served form (on 2026-12-05
    # `asm_same.py` showed its machine code unchanged by that day's removals).
    from paro_kernels.triton import aot

    n, k = 5120, 3072
    assert gemv_fma.gemv2_rot(False, n, k) and not gemv_fma.gemv2_rot(True, n, k)
    assert not gemv_fma.h2_ok(False, 1, 64) and gemv_fma.GEMV2_ROT_MAX_M == 1
    rep, c = aot.compile_gemv2_rot("sm90", 1, n, k, 64)
    assert rep.mma and rep.spills == 0, rep  # mma: the loop stayed free of matrix instructions
    assert "block_m=1," in rep.config
    ptx = c.asm["ptx"]  # type: ignore[attr-defined]
    assert "mma" not in ptx and ptx.count("fma.rn.f32") >= 64
    usage = aot.cubin_usage(c)
    assert 0 < usage["REG"] <= 128 and usage.get("STACK", 0) == 0 and usage["LOCAL"] == 0, usage


def test_aot_givens_row_blocks_sm90() -> None:
    # The records prologue in row blocks (2026-12-06), sm_90, M = 32: a program's
    # cross-lane work (the gathers' shuffles) and its stores scale with its rows, so 8-row
    # programs do a quarter of a 32-row one's, on fewer registers (more programs an SM at
    # once); no spills at any rows; the rows rule (`givens_block_m`) clamps to M's power of two.
    import re

    from paro_kernels.triton import aot

    assert prologue.givens_block_m(5, 8) == 8 and prologue.givens_block_m(3, 16) == 4
    assert prologue.givens_block_m(32, 0) == 32 and prologue.givens_block_m(1, 0) == 1
    assert prologue.givens_block_m(24, prologue.GIVENS_ROWS) <= 32
    with pytest.raises(ValueError, match="rows"):
        prologue.givens_block_m(24, 6)
    got = {}
    for rows in (0, 8):
        rep, c = aot.compile_givens_paired("sm90", 32, rows=rows)
        usage = aot.cubin_usage(c)
        ptx = c.asm["ptx"]  # type: ignore[attr-defined]
        assert rep.spills == 0 and usage.get("STACK", 0) == 0 and not rep.mma, (rep, usage)
        assert f"BLOCK_M={rows or 32}" in rep.config
        got[rows] = (len(re.findall(r"shfl\.sync", ptx)), ptx.count("st.global"), usage["REG"])
    (sh32, st32, reg32), (sh8, st8, reg8) = got[0], got[8]
    assert sh8 > 0 and sh8 * 4 == sh32 and st8 * 4 == st32, got
    assert reg8 <= 64 < reg32, got  # 8 programs of 4 warps an SM at 8 rows, 4 at 32


@pytest.mark.parametrize("hi", [False, True], ids=["int4", "int5"])
@pytest.mark.parametrize("m", [1, 2, 8, 16, 24, 48])
def test_aot_gemv_mma_sm90(m: int, hi: bool) -> None:
    # The mma.sync GEMV at its launcher's config (NVIDIA only): per group 4 word rows
    # a thread, each 4 words (one 16-byte load) and its activation pairs (one 16-byte load), all
    # 8 loads issued before the group's 16 mmas (one memory round trip a group: the first cut
    # interleaved them); 4 LOP3 a word; the same kernel at every M <= 8 (no per-row work); past
    # M = 8 a second activation tile: its 4 more loads and 16 more mmas on the same unpack. No
    # layout conversion of data (the lanes hold what the mma fragments need; only masks), no
    # spills, and at most 64 registers at M <= 8 (9 programs of 4 warps an SM; the HFMA2 GEMV
    # took 158), 104 with two tiles. int5 (H200 2026-12-04): a 16-byte load of the 4 columns'
    # fifth-bit words a word row, in the same round trip; one PRMT (the thread's byte), one
    # multiply and 4 shift + LOP3 pairs a word (8 lop3 in all); <= 80 / 104 registers.
    # H100 2026-12-05: four tiles (M = 17..32), 8 more activation loads and 32 more mmas on
    # the same unpack (the LOP3 count does not grow), <= 176 registers (3 programs an SM).
    # Past 32 rows (M = 48): the four-tile kernel on 32-row chunks, the same instruction counts.

    from paro_kernels.triton import aot

    top = route.MMA_GEMV_MAX_M
    assert route.mma_gemv_ok(False, m, 128) == (route.MMA_GEMV_MIN_M <= m <= top)
    assert not route.mma_gemv_ok(True, m, 128)
    assert not route.mma_gemv_ok(False, m, 128, (6144, 6160))
    top5 = route.MMA_GEMV5_MAX_M  # int5: four tiles, then the 32-row chunks
    assert route.mma_gemv_ok(False, m, 128, (), 5) == (route.MMA_GEMV5_MIN_M <= m <= top5)
    # int4 past 32 rows: the 32-row chunks on every layer, to MMA_CHUNK_MAX_M
    assert top == gemv_mma.MMA_CHUNK_MAX_M
    assert route.mma_gemv_ok(False, m + 32, 128) == (m + 32 <= top)
    rep, c = aot.compile_gemv_mma("sm90", m, 7168, 5120, 128, (6144, 6656), hi=hi)
    ptx = c.asm["ptx"]  # type: ignore[attr-defined]
    assert rep.mma and rep.spills == 0, rep
    cap = gemv_mma.mma_maxnreg(m, 5 if hi else 4)
    assert f"block_n={gemv_mma.MMA_CONFIG['block_n']}" in rep.config
    tiles = gemv_mma.mma_tiles(m)
    loads = ptx[: ptx.rindex("ld.global.v4")]
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 16 * tiles
    assert ptx.count("ld.global.v4.b32") == 4 + 4 * tiles + 4 * hi and "mma.sync" not in loads
    assert ptx.count("lop3.b32") == (8 if hi else 4) * 16
    assert ptx.count("mul.lo.u32") >= 16 * hi
    ttgir = c.asm["ttgir"]  # type: ignore[attr-defined]
    assert all("xi1" in ln for ln in ttgir.splitlines() if "convert_layout" in ln)
    usage = aot.cubin_usage(c)
    regs = usage["REG"]
    assert 0 < regs <= (cap or {1: 80 if hi else 64, 2: 104, 4: 176}[tiles]), usage
    # stack only where the launcher caps the registers (H200 2026-12-04: int5 two tiles at 80)
    assert usage.get("STACK", 0) == 0 or cap, usage
    assert cap == (80 if hi and tiles == 2 else 0)
    # the launcher's one-wave split counts on `mma_fit` programs an SM: never more than fit
    fit = 65536 // (-(-regs // 8) * 8 * gemv_mma.MMA_CONFIG["block_n"])
    assert gemv_mma.mma_fit(m, 5 if hi else 4) <= fit, (regs, fit)


def test_mma_one_wave_split() -> None:
    # The mma GEMV's split (H200 2026-12-04): the most splits whose programs fit the resident
    # slots at once, trimmed to splits that get groups; 1 where the tiles alone overflow.

    ws = gemv_mma.one_wave_split
    assert ws(136, 40, 132 * 7) == 6  # int5 gate_up: 816 programs, not 8 (1088 > 924 slots)
    assert ws(56, 40, 132 * 9) == 20  # int4 qkv: 21 fit, 2 groups a split -> 20
    assert ws(40, 24, 132 * 9) == 24  # o_proj: one group a split
    assert ws(40, 68, 132 * 5) == 14  # down past M = 8: 16 fit, 5 groups a split -> 14
    assert ws(1000, 40, 132 * 5) == 1
    c = gemv_mma.mma_config(16, 17408, 5120, 128, (8704,), 132, 5)
    # 136 tiles x 6 int5 two-tile programs an SM (capped at 80 registers: `MMA_CAP`)
    assert c.split_k == 5 and c.block_n == 128
    assert gemv_mma.mma_config(16, 17408, 5120, 128, (8704,), 132, 4).split_k == 4  # 5 fit


def test_aot_ticket_gemm_gfx1201() -> None:
    # The decode tile kernel with the in-kernel split-K finish (what M <= 16 runs).
    rep = aot.compile_gemm("gfx1201", 1, 7168, 5120, 128)
    assert "split_k=1," not in rep.config
    assert rep.mma
    _check(rep, max_vgprs=256)


def _check(rep: aot.Report, max_vgprs: int) -> None:
    assert rep.mma, rep
    assert rep.spills == 0 and rep.scratch == 0, rep
    assert rep.lds <= rep.lds_limit, rep
    assert 0 < rep.vgprs <= max_vgprs and min(16, 1536 // rep.vgprs) >= 6, rep
    assert triton.__version__


def test_gemv3_shipped_configs_by_size_and_bits() -> None:
    # The decode GEMV's shipped configs (gemv_dot, H200 2026-12-03): o_proj (15.7 M weights) the
    # small one whatever the bits; qkv (36.7 M) int4's 128 columns, int5 its own 64.

    qkv, o_proj = (7168, 5120, (6144, 6656)), (5120, 3072, ())
    for bits in (4, 5):
        small = gemv_dot.gemv3_config(1, *o_proj[:2], 128, o_proj[2], 132, bits=bits)
        assert (small.block_n, small.gpi, small.num_stages) == (64, 2, 2), small
    int4 = gemv_dot.gemv3_config(1, *qkv[:2], 128, qkv[2], 132)
    int5 = gemv_dot.gemv3_config(1, *qkv[:2], 128, qkv[2], 132, bits=5)
    assert (int4.block_n, int4.gpi, int4.num_stages) == (gemv_dot.GEMV3_BLOCK_N, 1, 3), int4
    assert (int5.block_n, int5.gpi, int5.num_stages) == (64, 1, 3), int5
    # 8 programs per SM either way: twice the tiles at 64 columns, half the split
    assert int5.split_k * -(-qkv[0] // 64) >= 8 * 132 > (int5.split_k - 1) * -(-qkv[0] // 64)
    # a given config wins over the shipped one
    assert gemv_dot.gemv3_config(1, *qkv[:2], 128, qkv[2], 132, block_n=32, bits=5).block_n == 32


def test_scratch_that_a_graph_captured_outlives_its_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    # A CUDA graph replays into the addresses it captured: a shared scratch buffer handed out
    # during a capture stays alive when a later call grows it (or changes its dtype); one no
    # capture used is dropped. The capture state is the one part faked here (no CUDA on CPU).
    import torch

    monkeypatch.setattr(launch, "_WS", {})
    monkeypatch.setattr(launch, "_CAPTURED", set())
    monkeypatch.setattr(launch, "_RETIRED", [])
    cpu, f32 = torch.device("cpu"), torch.float32
    first = launch.scratch("w", 10, f32, cpu)
    grown = launch.scratch("w", 1 << 17, f32, cpu)
    assert grown is not first and launch._RETIRED == []  # no capture used `first`
    monkeypatch.setattr(launch, "capturing", lambda device: True)
    assert launch.scratch("w", 10, f32, cpu) is grown  # a capture uses it
    monkeypatch.setattr(launch, "capturing", lambda device: False)
    bigger = launch.scratch("w", 1 << 18, f32, cpu)
    assert bigger is not grown and len(launch._RETIRED) == 1
    assert launch._RETIRED[0] is grown
    recast = launch.scratch("w", 10, torch.float16, cpu)  # `bigger`: no capture used it
    assert recast.dtype == torch.float16 and len(launch._RETIRED) == 1
    assert not launch.capturing(cpu)  # the real check on a CPU device


def test_w8_prefill_route_follows_the_measurement() -> None:
    # The H100 measurement of 2026-12-05 (route.W8_MIN_M's note): W4A8 fp8 calls take
    # the 8-bit vendor GEMM from the row after 128 (where the A8 tile kernels take a third 64-row tile),
    # int8 ones the dequant path from DEQUANT_MIN_M, W5A8 the same; gfx1201 the A8 kernels.

    assert route.W8_MIN_M == 129 and route.DEQUANT_MIN_M == 256
    for int5 in (False, True):
        assert route.a8_route(128, 128, int5, False, "fp8") is None
        assert route.a8_route(129, 128, int5, False, "fp8") == "w8"
        assert route.a8_route(200, 128, int5, False, "int8") is None
        assert route.a8_route(256, 128, int5, False, "int8") == "dequant"
        assert route.a8_route(4096, 128, int5, True, "fp8") is None
