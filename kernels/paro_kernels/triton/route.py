"""The int4 / int5 router: the one M-band dispatch table of the ParoQuant linear and its checked
entry points `w4a16_linear` / `w4a8_linear` (and `linear` / `linear_a8` on a `repack.Prepared`).

Shape contract of the W4A16 linear (asserted in `check_linear`):

    x        [M, K]           bf16 or fp16, unit stride along K      (M >= 1)
    rot_hi   [P, K/G, G, G]   x.dtype   hi part of diag(cs_g) R_g^T per rotation run (P in 1..3)
    rot_lo   [P, K/G, G, G]   x.dtype   rot - hi
    qweight  [K/8, N]         int32     codes packed along K (nibble s of word r = row 8r + s)
    scales   [K/G, N]         fp16
    zeros    [K/G, N]         uint8     zero codes 0..15
    bounds   P - 1 ints       first output column of runs 1.. (strictly increasing, < N)
    bias     [N] or None      any float dtype
    gv_idx   [P, krot, K]     int32     optional: each channel's group-local partner per layer
    gv_coef  [P, 2krot+1, K]  fp32      optional: channel scales, cos per layer, signed sin
    -> y     [M, N]           x.dtype
With gv_idx/gv_coef given, M <= GIVENS_MAX_M rotates by the Givens layers instead of the blocks.
    G in (64, 128); K % G == 0; N % 8 == 0; all tensors on one device.

Shape contract of the W4A8 / W5A8 linear (asserted in `w4a8_linear`), the above plus:

    qweight_hi [K/32, N]      int32     bits=5 only: fifth bits packed along K (bit s of word r =
                                        row 32r + s); zeros then hold 0..31
    act_format "fp8" | "int8" activations as e4m3 (amax/448) or int8 (amax/127, RNE, +-127)
    act_scale  "group" | "token"       one scale per (row, group) or per row (over all of K)
    zp_epilogue bool                   zero point after the loop (one fp32 dot) instead of in it
    -> y     [M, N]           x.dtype
On NVIDIA `a8_route` serves bands on other paths: the decode GEMVs (with gv_idx / gv_coef, the
Givens layers inside them for small layers), and from W8_MIN_M rows fp8 calls the 8-bit vendor
GEMM (`dequant.w8_linear`, needing w8_amax [N] fp32 = max |W'| per output channel,
`Prepared.w8_amax`), int8 calls dequant + cuBLAS.

Each threshold below cites the run that set it (date, GPU, numbers, result file).
"""

from __future__ import annotations

import torch

from .._contract import check_multiple, check_tensor, require
from . import dequant, gemm, gemv_dot, gemv_fma, gemv_mma, launch, prologue
from .weights import Prepared

# Dispatch bands, from the H200 runs of 2026-12-01 (docs/notebook/kernels-2026-11-29-to-12-06.md).
# H200 2026-12-01: the GEMV (`gemv2`: block prologue + FMA GEMV) serves M <=
# GEMV_MAX_M. Run 2 (as served, M = 1): qkv 19.9 / o_proj 10.5 / gate_up 27.9 / down 19.4 / in_proj
# 18.6 us against the tile kernels' 25.4 / 15.5 / 42.8 / 28.5 / 28.2 in the same run. M = 2 as
# served was cut by the budget: the GEMV alone took 16.5 / 10.1 / 31.8 / 19.8 / 17.7 us there (+ a
# 4.6-9.0 us prologue) against the 16-row tile kernels' M = 1 times (interpolated: o_proj may lose
# by ~3 us). At M = 4 the GEMV's best (run 1: the matrix-unit path 24.0 / - / 51.6 / 28.0 us +
# prologue) loses to the tile kernels (qkv 27.5 as served), and at M = 16 it ties them (run 2:
# within 0-5%), so M >= 3 stays on the tile kernels. The dequant path wins at M = 2048 on every 27B
# shape (qkv 381 us against the tile kernels' 595, gate_up 731 / 1324) and loses at M = 256 (qkv 162
# / 111): its ~70-120 us weight pass is fixed per call. 1024 is the interpolated crossover (not
# measured). H200 2026-12-01: the weight pass + casts went from ~170 to ~60 us on qkv (see
# DEQUANT_TRANS), and the crossover moved: run 5 (H200 2026-12-01, as served by path) dequant +
# cuBLAS beats the tile kernels at M = 256 on every 27B shape (qkv 90.4 vs 111.5 us, o_proj 42.9 /
# 70.1, gate_up 190.6 / 257.7, down 107.4 / 185.3, in_proj 97.2 / 112.1; at 512 and 1024 by
# 1.5-2.3x). Below 256 not measured (H200 2026-12-01 had the tile kernels ahead at M = 64).
# H200 2026-12-02: the band starts at 256, run 5's measurement above (test_triton_gpu.py's M = 300
# cases now hold the bf16-W' floor, `_triton_cases.BF16_W_FLOOR`).
GEMV_MAX_M = 2  # at most GEMV2_MAX_M, the FMA GEMV's rows


DEQUANT_MIN_M = 256


# H200 2026-12-04: int4 decode at MMA_GEMV_MIN_M <= M <= MMA_GEMV_MAX_M on the mma.sync GEMV
# (`gemv_mma.gemv_mma_linear`: the records prologue at pair shift 0, fp32 accumulation on the
# matrix unit). H200 2026-12-04 (docs/notebook/kernels-2026-11-29-to-12-06.md, runs 3 and 4, the
# path served before forced against the mma op as served, same run, us):
# - M = 2 (the HFMA2 op) qkv 18.78 / 14.63, gate_up 31.32 / 25.34, down 21.02 / 16.94, in_proj
#   20.02 / 15.66, o_proj 11.18 / 10.94; M = 4 (the FMA GEMV) 32.71 / 14.68, 55.78 / 24.18,
#   33.40 / 16.86, 33.48 / 16.13, 14.50 / 10.80; M = 8 (the tile kernels) 29.72 / 15.67,
#   50.77 / 27.11, 31.96 / 18.07, 31.04 / 17.84, 16.93 / 12.76;
# - M = 9 / 16 (two activation tiles; the matrix-unit GEMV served before): qkv 28.93 / 23.09
#   and 30.24 / 24.92, gate_up 52.40 / 35.44 and 59.42 / 38.50, down 35.97 / 25.79 and 36.90 /
#   26.65, in_proj 35.32 / 24.10 and 36.02 / 26.40; o_proj 15.47 / 16.46 and 16.58 / 18.06 (the
#   H200 2026-12-04 kept that GEMV past M = 8 on layers of at most
#   `gemv_dot.GEMV3_SMALL_WEIGHTS`; the 2026-12-04 one-wave split and blocks prologue
#   took them: `gemv_mma.MMA_BLOCKS_MIN_M`);
# - M = 1: it lost on 4 of 5 shapes (gate_up 22.97 against the HFMA2 op's 21.99, o_proj 10.16 /
#   8.80; run 2): M = 1 keeps the HFMA2 op.
# H100 2026-12-05: to M = 32 on four activation tiles (`gemv_mma.mma_tiles`), then on the sliced
# blocks prologue (the records in 4-row programs since 2026-12-06: `gemv_mma.mma_blocks`). H100
# (docs/notebook/kernels-2026-11-29-to-12-06.md,
# benchmarks/results/bench-2026-12-05-h100-int4-mma4.json, same run, us,
# the tile kernels as served before / four tiles on the blocks prologue, M = 24): qkv 44.6 /
# 31.2, gate_up 104.8 / 53.6, down 54.4 / 31.5, o_proj 27.7 / 17.2, in_proj 44.8 / 32.5; M = 32
# 44.7 / 34.1, 105.2 / 57.5, 53.7 / 35.2, 25.6 / 19.7, 43.0 / 33.9.
MMA_GEMV = True


MMA_GEMV_MIN_M = 2


# H100 2026-12-06: past 32 rows (to `gemv_mma.MMA_CHUNK_MAX_M` = MMA_GEMV_MAX_M) int4 takes the
# mma GEMV's 32-row chunks (one launch, the sliced blocks prologue in 16-row programs) on every
# layer. H100 (benchmarks/results/bench-2026-12-06-h100-int4-chunks-all.json, `decode --h2 mma
# --ms 40,48,64`, same run, us, the tile kernels / the chunks, M = 40 / 48 / 64): qkv 46.7 /
# 42.8, 45.9 / 44.1, 47.1 / 48.6; o_proj 27.6 / 21.2, 26.2 / 21.8, 27.0 / 22.7; down 55.2 /
# 43.1, 54.8 / 44.7, 55.1 / 47.6; in_proj 44.3 / 38.6, 44.0 / 40.0, 44.9 / 43.6: 11 of 12
# cells, qkv at 64 3% behind (gate_up took the chunks already: 72.2 / 73.0 / 76.7). Before the
# 16-row prologue programs (`prologue.PROLOGUE_ROWS`) they served gate_up-size layers only
# (bench-2026-12-06-h100-int4-chunks.json: qkv 46.8 / 58.3 at 64).
MMA_GEMV_MAX_M = 64


# H200 2026-12-04: int5 (I8 PG ZPE) on the same GEMV (`gemv_mma(qweight_hi=)`: the fifth bits
# OR-ed into each pair before the zero's subtraction) from MMA_GEMV5_MIN_M rows.
MMA_GEMV5 = True


MMA_GEMV5_MIN_M = 1


# H100 2026-12-06: to M = 64 (four tiles to 32, the 32-row chunks past it) against the A8
# kernels that served M = 17..64 before (benchmarks/results/bench-2026-12-06-h100-int5-mma.json,
# `decode --h2 mma5`, same run, us, as served before / the mma GEMV, M = 24 / 32 / 64): qkv
# 58.9 / 35.9, 60.3 / 39.5, 63.6 / 63.9; o_proj 37.6 / 24.0, 37.0 / 25.6, 38.0 / 29.1; gate_up
# 143.5 / 65.1, 143.5 / 69.2, 149.6 / 104.4; down 76.4 / 38.5, 76.9 / 41.4, 79.3 / 66.3; in_proj
# 59.8 / 38.1, 59.9 / 40.1, 62.7 / 61.2 (ties at 64 on qkv and in_proj, 1.2-1.4x elsewhere).
MMA_GEMV5_MAX_M = 64


def mma_gemv_ok(hip: bool, m: int, g: int, bounds: tuple[int, ...] = (),
                bits: int = 4) -> bool:  # fmt: skip
    """The mma GEMV serves an M-row decode call of a `bits` (4 or 5) layer: NVIDIA, compiled
    code, MMA_GEMV_MIN_M <= M <= MMA_GEMV_MAX_M (int5: MMA_GEMV5_*), G a multiple of 32,
    partition bounds on the 32-column grid (`gemv_mma.mma_ok`)."""
    interp = launch.interpreted()
    lo = MMA_GEMV5_MIN_M if bits == 5 else MMA_GEMV_MIN_M
    hi = MMA_GEMV5_MAX_M if bits == 5 else MMA_GEMV_MAX_M
    on = MMA_GEMV5 if bits == 5 else MMA_GEMV
    return (on and not hip and not interp and lo <= m <= hi and g % 32 == 0
            and gemv_mma.mma_ok(bounds))  # fmt: skip


# H200 2026-12-02: the matrix-unit GEMV with the weights as the register operand
# (`gemv_dot.gemv3_linear`, sliced fp16 prologue) serves GEMV3_MIN_M <= M <= 16 at G = 128 on
# NVIDIA. H200 2026-12-02 run 4 (as served, same run): M = 16 qkv 29.7 us vs the tile
# kernels' 36.7, o_proj 15.8 / 19.4, gate_up 54.0 / 65.2, down 36.5 / 39.4, in_proj 36.1 / 37.5.
# Run 3 (same run per cell): at M = 8 it lost on 3 of 5 shapes (gate_up 51.1 / 49.3, down 35.5 /
# 31.5, in_proj 34.8 / 30.3), at M = 4 on 4 of 5, and at M = 1-2 to the FMA GEMV by 1.4-1.9x
# (qkv M = 1 27.1 vs 17.6).
# The tile kernels take a 16-row tile from M = 9 (their M = 8 config is an 8-row one), so
# M = 9..15 is the M = 16 case (interpolated, not measured). gfx1201 keeps the tile kernels.
GEMV3_MIN_M = 9


GEMV3 = True


def band(m: int, group_size: int = 128, hip: bool | None = None) -> str:
    """Which path serves M rows: "gemv", "gemv3" (the matrix-unit decode GEMV), "mma" (host's
    tile kernels) or "dequant"."""
    if m <= GEMV_MAX_M:
        return "gemv"
    if m >= DEQUANT_MIN_M:
        return "dequant"
    hip = launch.is_hip() if hip is None else hip
    if GEMV3 and not hip and group_size == 128 and GEMV3_MIN_M <= m <= 16:
        return "gemv3"
    return "mma"


# W4A8 / W5A8 on NVIDIA (the same Prepared weights: int4 codes, fp16 scales, u8 zeros, blocks):
# where the 16-bit-activation paths are faster they serve the layer unquantized-activation (more
# accurate than A8, the same weight bytes). H200 2026-12-01, as served: W4A8 int8 at M = 1 took
# qkv 35.7 us against the W4A16 GEMV's 19.9 (docs/notebook/kernels-2026-11-29-to-12-06.md, H200
# 2026-12-01), and in prefill 0.26-0.29x cuBLAS against dequant + cuBLAS's 0.53-0.73x (H200
# 2026-12-01). H200 2026-12-01, run 3 (same run): the A8 kernels at M = 1 34.9 / 22.5 / 59.7 / 38.0
# / 37.1 us (qkv / o_proj / gate_up / down / in_proj) against the routed op's 18.0 / 9.8 / 29.4 /
# 19.7 / 21.2; at M = 2048 the routed op 0.75-0.77x cuBLAS. gfx1201 keeps A8 (its fp8/int8 WMMA runs
# at twice bf16; not measured here).
A8_ROUTE = True


# H200 2026-12-02: M = 9..16 (int4 weights) on the 2026-12-02 matrix-unit GEMV too; H200 2026-12-02,
# run 4 (H200, as served, same run): the A8 kernels took 1.01-1.43x the W4A16 op's time at M = 16
# (fp8 37.5 / 22.6 / 67.8 / 41.4 / 41.0 us against 29.7 / 15.8 / 54.0 / 36.5 / 36.1).
A8_GEMV3 = True


# H200 2026-12-03: int5 (W5A8, I8 PG ZPE) at M <= 16 on the same matrix-unit GEMV, its fifth bits
# OR-ed into the fp16 pairs (`gemv_dot_kernels._UNPACK5_ASM`), 16-bit activations. H200
# docs/notebook/kernels-2026-11-29-to-12-06.md H200 2026-12-03, run 1 (same run, as served against
# the A8 kernels that served before, M = 1 / 4 / 16): qkv 37.1 / 36.8 / 39.3 us against 43.9 / 44.9
# / 43.7, o_proj 15.5 / 19.8 / 20.6 against 27.0 / 27.5 / 26.1, down 42.6 / 44.0 / 45.6 against 49.1
# / 48.6 / 46.6, in_proj 43.5 / 43.9 / 46.3 against 48.8 / 48.5 / 47.7; gate_up (89 M weights) 74.3
# / 76.7 / 79.8 against 75.9 / 75.8 / 75.7. H200 2026-12-03: on int5's own GEMV config
# (`gemv_dot.GEMV3_INT5`) gate_up took 62.7 / 66.5 / 70.9 us against the A8 kernels' 75.9 / 76.8 /
# 76.0 (run 2, same run), so every int5 layer takes the GEMV in the decode band.
INT5_GEMV3 = True


# H200 2026-12-04: int5 at M <= 2 on the HFMA2 GEMV (`gemv_fma_kernels.gemv_h2_kernel(HI=True)`: the
# fifth bits OR-ed into the fp16 pairs, xr / 128; 28 instructions a word against int4's 17).
# H200 2026-12-04, run 1 (same run, as served on the
# matrix-unit GEMV against the HFMA2 GEMV, M = 1 / 2, us): qkv 33.3 / 33.7 against 27.9 / 30.0,
# o_proj 14.5 / 19.6 against 12.3 / 13.2, gate_up 61.2 / 63.7 against 44.8 / 49.6, down
# 34.8 / 35.4 against 29.9 / 31.2, in_proj 31.3 / 32.7 against 29.1 / 31.6 (1.03-1.48x; error
# 1.0-1.2e-3 relative, the bf16 output rounding).
INT5_H2 = True


def a8_route(m: int, group_size: int, int5: bool, hip: bool, act_format: str = "fp8",
             bounds: tuple[int, ...] = ()) -> str | None:  # fmt: skip
    """The path ("gemv" | "gemv-h2" | "gemv-mma" | "gemv3" | "dequant" | "w8": the 8-bit vendor
    GEMM, `w8_linear`) that serves a W4A8 / W5A8 call of M rows (partition `bounds`), or None
    (the A8 kernels)."""
    if hip or not A8_ROUTE:
        return None
    if mma_gemv_ok(hip, m, group_size, bounds, 5 if int5 else 4):
        return "gemv-mma"
    if int5 and INT5_H2 and gemv_fma.h2_ok(hip, m, group_size):
        return "gemv-h2"
    if int5 and INT5_GEMV3 and GEMV3 and group_size == 128 and m <= 16:
        return "gemv3"
    route = band(m, group_size)
    if route == "gemv" and not int5:
        return "gemv"
    if route == "gemv3" and not int5 and A8_GEMV3:
        return "gemv3"
    if m >= W8_MIN_M and act_format in W8_FORMATS:
        return "w8"
    return "dequant" if route == "dequant" else None


# --------------------------------------------------------------------------- W4A8 prefill, 8-bit
# H200 2026-12-02: W4A8 / W5A8 at M >= W8_MIN_M on NVIDIA on the vendor 8-bit GEMM. The weight pass
# writes W' (rotated, dequantized) as 8-bit codes with one scale per output channel, max |W'| over
# K (a load-time constant: `w8_amax`, `Prepared.w8_amax`), stored [N, K] (the GEMM's column-major
# operand); the activations are quantized per token by one row pass (`quant_rows_kernel`); then
# fp8: `torch._scaled_mm` rowwise (both scales and the bias in its epilogue), int8:
# `torch._int_mm` (int32 out) and one epilogue pass.
# H200 2026-12-02, run 1 (M = 2048, same run): fp8 171.4 / 398.5 / 211.7 us (qkv /
# gate_up / down) = 1.18-1.21x cuBLAS bf16 (203.8 / 483.2 / 249.2), int8 299.1 / 695.0 / 364.0
# (0.68-0.70x: slower than the bf16 dequant path's 264.6 / 605.7 / 292.3), so fp8 ships. Error
# (fp64, K = 128 case): the fp8 route 3.7e-2 vs the W4A16 reference and 4.4e-2 vs the W4A8 fp8
# format's own (its act-quant noise alone: 2.6e-2); the int8 route 1.0e-2 (format noise 7.0e-3).
# So the format's fp8 checkpoints take the fp8 route (about its own noise level, 1.2x faster
# than cuBLAS); int8 ones stay on the bf16 dequant path (more accurate than their format, and
# faster than the int8 route).
# H100 2026-12-05, measured below 256 (the int4 half,
# benchmarks/results/bench-2026-12-05-h100-int4-mid.json, every route forced, same
# run, us,
# the route / the A8 tile kernels (W4A8 fp8) that served): at M = 192 the route wins on four of
# the five 27B shapes and ties o_proj (qkv 79.4 / 113.5, gate_up 177.5 / 189.4, down 100.5 /
# 102.8, in_proj 89.2 / 108.2, o_proj 42.8 / 42.1); at M = 96..128 the two split the shapes (the
# tile kernels: qkv 70.1-71.6 / 73.4-73.8, in_proj 65.7-71.7 / 83.2-83.8, o_proj 39.9 / 40.8 at
# 96; the route: gate_up 160.8-160.9 / 172.2-181.7, down 94.2 / 98.5-104.1); the route's time is
# flat in M there while the tile kernels' third 64-row tile (M > 128) costs them 1.6x (qkv 71.6
# at 128, 113.5 at 192). So the route serves from the row after 128.
W8_MIN_M = 129


W8_FORMATS = ("fp8",)  # the act formats whose calls take the 8-bit route


GIVENS_MAX_M = 0


def bundle(
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    qweight_hi: torch.Tensor | None = None,
    w8_amax: torch.Tensor | None = None,
) -> Prepared:
    """The custom op's flat weight tensors as one `Prepared` (bits 5 with `qweight_hi`)."""
    bits = 4 if qweight_hi is None else 5
    return Prepared(rot_hi, rot_lo, qweight, scales, zeros, bounds, group_size, gv_idx,
                    gv_coef, bits, qweight_hi, w8_amax)  # fmt: skip


def check_linear(w: Prepared, x: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Assert the module docstring's shape/dtype contract."""
    rot_hi, rot_lo, qweight, scales, zeros = w.rot_hi, w.rot_lo, w.qweight, w.scales, w.zeros
    bounds, gv_idx, gv_coef = w.bounds, w.gv_idx, w.gv_coef
    g = w.group_size
    require(g in launch.GROUP_SIZES, "group_size", launch.GROUP_SIZES, g)
    check_tensor(x, "x", dtype=launch.ACT_DTYPES, ndim=2)
    m, k = x.shape
    require(m >= 1 and x.stride(1) == 1, "x", "M >= 1 rows, unit stride along K", x.stride())
    check_multiple(k, g, f"K (x.shape[1]) for group_size={g}")
    check_tensor(rot_hi, "rot_hi", dtype=x.dtype, shape=[None, k // g, g, g])
    p = rot_hi.shape[0]
    require(1 <= p <= 3, "rot_hi.shape[0] (rotation runs)", "1..3", p)
    check_tensor(rot_lo, "rot_lo", dtype=x.dtype, shape=list(rot_hi.shape))
    check_tensor(qweight, "qweight", dtype=torch.int32, shape=[k // 8, None])
    n = qweight.shape[1]
    check_multiple(n, 8, "N (qweight.shape[1])")
    check_tensor(scales, "scales", dtype=torch.float16, shape=[k // g, n])
    check_tensor(zeros, "zeros", dtype=torch.uint8, shape=[k // g, n])
    require(len(bounds) == p - 1, "bounds", f"{p - 1} partition boundaries", list(bounds))
    require(
        all(a < b for a, b in zip((0, *bounds), (*bounds, n), strict=True)),
        "bounds",
        f"strictly increasing inside 0..{n}",
        list(bounds),
    )
    if bias is not None:
        check_tensor(bias, "bias", shape=[n])
    devs = {t.device for t in (x, rot_hi, rot_lo, qweight, scales, zeros)}
    require(len(devs) == 1, "devices", "one device for every tensor", devs)
    for t, name in ((rot_hi, "rot_hi"), (qweight, "qweight"), (scales, "scales")):
        require(t.is_contiguous(), f"{name}", "contiguous", "strided")
    require((gv_idx is None) == (gv_coef is None), "gv_idx/gv_coef", "both or neither", "one")
    if gv_idx is not None and gv_coef is not None:
        check_tensor(gv_idx, "gv_idx", dtype=torch.int32, shape=[p, None, k])
        krot = gv_idx.shape[1]
        check_tensor(gv_coef, "gv_coef", dtype=torch.float32, shape=[p, 2 * krot + 1, k])
        require(gv_idx.device == x.device and gv_coef.device == x.device, "gv devices",
                "x's device", (gv_idx.device, gv_coef.device))  # fmt: skip
        for t, name in ((gv_idx, "gv_idx"), (gv_coef, "gv_coef")):
            require(t.is_contiguous(), f"{name}", "contiguous", "strided")

    if w.qweight_hi is not None:
        check_multiple(k, 32, "K (x.shape[1]) for bits=5")
        check_tensor(w.qweight_hi, "qweight_hi", dtype=torch.int32, shape=[k // 32, n])
        require(w.qweight_hi.device == x.device and w.qweight_hi.is_contiguous(), "qweight_hi",
                "contiguous on x's device", w.qweight_hi.device)  # fmt: skip


def w4a16_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    givens_max_m: int = GIVENS_MAX_M,
    path: str | None = None,
) -> torch.Tensor:
    """`linear` on the custom op's flat tensors (`ops.w4a16_linear`); contract in module doc."""
    w = bundle(rot_hi, rot_lo, qweight, scales, zeros, bounds, group_size, gv_idx, gv_coef)
    return linear(w, x, bias, givens_max_m, path)


def linear(
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    givens_max_m: int = GIVENS_MAX_M,
    path: str | None = None,
) -> torch.Tensor:
    """y = ((x * cs_p) R_p^T) dequant(Q)^T (+ bias) per column run p of the int4 layer `w`.

    `path` ("gemv" | "gemv-h2" | "gemv-mma" | "gemv3" | "mma" | "dequant") overrides the
    M-band dispatch of `band` and `mma_gemv_ok` ("gemv-h2": the HFMA2 GEMV with its prologue,
    "gemv-mma": the mma.sync GEMV).
    """
    require(w.bits == 4, "prep.bits", "4 for bf16/fp16 activations (W4A16)", w.bits)
    check_linear(w, x, bias)
    m, k = x.shape
    n = w.qweight.shape[1]
    group_size, bounds = w.group_size, w.bounds
    route = path or band(m, group_size)
    if path is None and mma_gemv_ok(launch.is_hip(), m, group_size, bounds, 4):
        route = "gemv-mma"
    if route == "gemv3" and group_size != 128:
        route = "mma"  # the matrix-unit GEMV needs G = 128
    if route == "gemv":
        return gemv_fma.gemv_w4a16(w, x, bias)
    if route == "gemv-h2":
        return gemv_fma.gemv_h2_linear(w, x, bias)
    if route == "gemv3":
        return gemv_dot.gemv3_linear(w, x, bias)
    if route == "gemv-mma":
        return gemv_mma.gemv_mma_linear(w, x, bias)
    if route == "dequant":
        return dequant.dequant_linear(x, dequant.dequant_weights(w, x.dtype), bias)
    cfg = gemm.pick_config(m, n, k, group_size, bounds, launch.sm_count(x.device))
    gv_idx, gv_coef = (w.gv_idx, w.gv_coef) if m <= givens_max_m else (None, None)
    ws = None
    if gv_idx is not None and cfg.split_k > 1:
        ws = torch.empty(m, n, dtype=torch.float32, device=x.device)  # zeroed by the prologue
    xr, rs = prologue.rotate_scale(x, w.rot_hi, w.rot_lo, group_size, gv_idx, gv_coef, ws)
    return gemm.w4a16_gemm(xr, rs, w, x.dtype, bias, cfg, workspace=ws)


def w4a8_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    act_format: str,
    act_scale: str,
    zp_epilogue: bool,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    w8_amax: torch.Tensor | None = None,
) -> torch.Tensor:
    """`linear_a8` on the custom op's flat tensors (`ops.w4a8_linear`); contract in module doc."""
    w = bundle(rot_hi, rot_lo, qweight, scales, zeros, bounds, group_size, gv_idx, gv_coef,
               qweight_hi, w8_amax)  # fmt: skip
    return linear_a8(w, x, bias, act_format, act_scale, zp_epilogue)


def linear_a8(
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    act_format: str = "fp8",
    act_scale: str = "group",
    zp_epilogue: bool = False,
) -> torch.Tensor:
    """y = act_quant((x * cs_p) R_p^T) dequant(Q)^T (+ bias) per run of the int4 / int5 layer.

    Two launches (+ a memset and cast under split-K): the fused prologue and the group GEMM;
    on NVIDIA the bands of `a8_route` take the 16-bit-activation paths instead (the same weight
    tensors: no activation quantization there).
    """
    check_linear(w, x, bias)
    require(act_format in launch.ACT_FORMATS, "act_format", launch.ACT_FORMATS, act_format)
    require(act_scale in launch.ACT_SCALES, "act_scale", launch.ACT_SCALES, act_scale)
    k, n = x.shape[1], w.qweight.shape[1]
    int5 = w.qweight_hi is not None
    route = a8_route(x.shape[0], w.group_size, int5, launch.is_hip(), act_format, w.bounds)
    if route == "gemv-mma":
        return gemv_mma.gemv_mma_linear(w, x, bias)
    if route == "gemv":
        return gemv_fma.gemv_w4a16(w, x, bias)
    if route == "gemv-h2":
        return gemv_fma.gemv_h2_linear(w, x, bias)
    if route == "gemv3":
        return gemv_dot.gemv3_linear(w, x, bias)
    if route == "w8" and w.w8_amax is not None and dequant.w8_ok(n, k, dequant.W8_KIND):
        return dequant.w8_linear(w, x, bias)
    if route in ("dequant", "w8"):
        return dequant.dequant_linear(x, dequant.dequant_weights(w, x.dtype), bias)
    q, asc, rs = prologue.rotate_quant(x, w.rot_hi, w.rot_lo, w.group_size, act_format,
                                       act_scale)  # fmt: skip
    return gemm.w4a8_gemm(q, asc, rs, w, x.dtype, bias, token=act_scale == "token",
                          zp_epilogue=zp_epilogue)  # fmt: skip
