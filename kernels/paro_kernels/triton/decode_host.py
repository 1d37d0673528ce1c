"""Host side of the fifth-pass decode GEMV (`decode_kernels.gemv3_w4a16_kernel`, NVIDIA).

Shape contract: that of `host.w4a16_linear` (the tensors of a `Prepared` layer), G = 128:

    x [M <= 16, K] -> prologue xr [P, M, K] fp16 (sliced blocks, the block kernel, or the
    Givens records) -> y [M, N] in x.dtype, split-K summed in the kernel (the shared
    `fast_host` workspace and tickets, left zeroed)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import gcd

import torch

from .._contract import require
from . import fast_host, host

# Configs from the fifth-pass sweeps (H200 2026-12-02, BENCH.md pass 5; `bench_decode`).
# Run 2, stage 1 (the GEMV alone, 48 configs, qkv and gate_up at M = 1 and 16): 128 columns,
# 4 warps, 8 programs per SM, 1 group per iteration, 3 stages best or within 3% of the best
# (qkv M = 16 22.2-23.1 us; 256 columns / 8 warps 1.6-1.8x slower: 180+ registers); run 3 (as
# served, both with PDL): that config on every shape at M = 16 but o_proj, where 64 columns, 4
# per SM, 2 groups an iteration, 2 stages took 16.0 us against 18.7 (also at M = 2-8: 14.9-15.7
# against 15.2-17.9), and lost 1.3-1.7x on the large shapes: so it serves layers of at most
# GEMV3_SMALL_WEIGHTS (o_proj 15.7 M; qkv 36.7 M takes the large config).
# Prologue (run 2, as served at M = 16): sliced 28.4-30.7 us on qkv against the block kernel's
# 31.1 and the Givens-records kernel's 30.6; alone the records kernel took 6.3-12.1 us against
# the sliced one's 4.0-7.9 on every shape, so the sliced fp16 prologue serves.
GEMV3_BLOCK_N = 128
GEMV3_WARPS = 4
GEMV3_PROGRAMS_PER_SM = 8
GEMV3_GPI = 1
GEMV3_STAGES = 3
GEMV3_SMALL_WEIGHTS = 20 << 20
GEMV3_SMALL = dict(block_n=64, num_warps=4, programs_per_sm=4, gpi=2, num_stages=2)
# int5 above GEMV3_SMALL_WEIGHTS (eighth pass, H200, BENCH.md run 2, same run, M = 1 / 4 / 16):
# 64 columns, 4 warps, 8 programs per SM, 1 group an iteration, 3 stages took qkv 33.2 / 34.6 /
# 36.3 us against the int4 config's 36.3 / 37.2 / 38.2, gate_up 62.7 / 66.5 / 70.9 against 75.1 /
# 76.8 / 80.7, down 34.9 / 36.9 / 39.4 against 44.4 / 45.1 / 47.0, in_proj 31.9 / 34.9 / 36.5
# against 44.1 / 45.5 / 47.3 (run 1, 8 configs: the best on each at M = 1 and 16). Of the 7
# configs around it in run 2, 32 columns / 2 warps / 16 per SM won at M = 1 (gate_up 48.8) but
# lost at M = 16 (75.8): one config for the band.
GEMV3_INT5 = dict(block_n=64, num_warps=4, programs_per_sm=8, gpi=1, num_stages=3)
# "givens" runs the eleventh pass's records kernel since that pass (not yet measured at M = 3-16;
# pass 5's numbers above are the old per-layer-round-trip kernel's).
GEMV3_PROLOGUE = "slice"  # "slice" (fast_host.rotate_slices) | "block" | "givens"
PROLOGUES = ("slice", "block", "givens")


@dataclass(frozen=True)
class Gemv3Config:
    """One launch configuration of the fifth-pass GEMV."""

    block_n: int
    split_k: int
    num_warps: int
    gpi: int
    num_stages: int


def gemv3_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
                 block_n: int = 0, num_warps: int = 0, programs_per_sm: int = 0, gpi: int = 0,
                 num_stages: int = 0, bits: int = 4) -> Gemv3Config:  # fmt: skip
    """Column tile (narrower where a partition boundary needs it) and split-K until about
    `programs_per_sm` programs per SM; with nothing given, the shipped config for the layer's
    size and weight `bits` (GEMV3_SMALL; int5: GEMV3_INT5; else the GEMV3_* defaults)."""
    require(m <= 16, "x rows", "<= 16 for the decode GEMV", m)
    require(g == 128, "group_size", "128 for the decode GEMV", g)
    if not (block_n or num_warps or programs_per_sm or gpi or num_stages):
        small = n * k <= GEMV3_SMALL_WEIGHTS
        shipped = GEMV3_SMALL if small else GEMV3_INT5 if bits == 5 else {}
        block_n, num_warps, programs_per_sm, gpi, num_stages = (
            shipped.get(key, 0)
            for key in ("block_n", "num_warps", "programs_per_sm", "gpi", "num_stages")
        )
    align = 0
    for b in bounds:
        align = gcd(align, b)
    host._block_n(16, align or 16)  # refuses boundaries off the 16-column grid, as the tiles do
    bn = block_n or GEMV3_BLOCK_N
    while bn > 16 and ((align and align % bn) or bn > 2 * n):
        bn //= 2
    tiles = -(-n // bn)
    ngroups = k // g
    split = max(1, min(ngroups, -(-(programs_per_sm or GEMV3_PROGRAMS_PER_SM) * sms // tiles)))
    per = -(-ngroups // split)
    return Gemv3Config(bn, -(-ngroups // per), num_warps or GEMV3_WARPS, gpi or GEMV3_GPI,
                       num_stages or GEMV3_STAGES)  # fmt: skip


def prologue16(x: torch.Tensor, rot_hi: torch.Tensor, rot_lo: torch.Tensor, g: int,
               gv_idx: torch.Tensor | None, gv_coef: torch.Tensor | None,
               kind: str = "", pdl: bool = False) -> torch.Tensor:  # fmt: skip
    """x [M <= 16, K] -> xr [P, M, K] fp16, the rotated, channel-scaled activations (`pdl`:
    the sliced kernel lets a dependent launch start at once)."""
    kind = kind or GEMV3_PROLOGUE
    require(kind in PROLOGUES, "prologue", PROLOGUES, kind)
    if kind == "givens" and gv_idx is not None and gv_coef is not None:
        # eleventh pass: the records kernel that loads every layer before its first gather
        # (`fast_host.rotate_givens_paired`), not `host.rotate_scale`'s one round trip a layer
        return fast_host.rotate_givens_paired(x, gv_idx, gv_coef, g, paired=False)
    if kind == "block":
        return host.rotate_scale(x, rot_hi, rot_lo, g)[0]
    return fast_host.rotate_slices(x, rot_hi, rot_lo, g, f16=True, pdl=pdl)[0]


def gemv3_w4a16(
    xr: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: Gemv3Config | None = None,
    pdl: bool = False,
    qweight_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """The GEMV on the prologue output xr [P, M <= 16, K] fp16 -> y [M, N] out_dtype; with
    `qweight_hi` ([K/32, N] int32 fifth-bit planes) int5 weights, `zeros` their 5-bit zeros."""
    from .decode_kernels import gemv3_w4a16_kernel

    _, m, k = xr.shape
    n = qweight.shape[1]
    require(xr.dtype == torch.float16, "xr dtype", torch.float16, xr.dtype)
    cfg = config or gemv3_config(m, n, k, group_size, bounds, host.sm_count(xr.device),
                                 bits=5 if qweight_hi is not None else 4)  # fmt: skip
    gcfg = fast_host.GemvConfig(16, cfg.block_n, cfg.split_k, cfg.num_warps)
    out, ws, cnt, tiles = fast_host._gemv_buffers(m, n, gcfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    asm = not host._is_hip() and not host._interpreted()
    gemv3_w4a16_kernel[(tiles, cfg.split_k)](
        xr, qweight, scales, zeros, bias if bias is not None else scales, ws, cnt, out,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=group_size, BLOCK_M=16, BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k, GPI=cfg.gpi, ASM=asm, PDL=pdl, HI=qweight_hi is not None,
        qh_ptr=qweight_hi, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return out


def gemv3_linear(
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
    prologue: str = "",
    config: Gemv3Config | None = None,
    pdl: bool | None = None,
    qweight_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """The decode linear: prologue (`prologue16`) + GEMV, y [M, N] in x.dtype; PDL (default
    `fast_host.GEMV_PDL`) with the sliced prologue only; `qweight_hi`: int5 weights."""
    kind = prologue or GEMV3_PROLOGUE
    use = (fast_host.GEMV_PDL if pdl is None else pdl) and kind == "slice"
    use = use and fast_host.pdl_ok(host._is_hip())
    xr = prologue16(x, rot_hi, rot_lo, group_size, gv_idx, gv_coef, kind, use)
    return gemv3_w4a16(xr, qweight, scales, zeros, bounds, group_size, x.dtype, bias, config,
                       use, qweight_hi)  # fmt: skip


# Ninth pass: the HFMA2 GEMV (`decode_kernels.gemv_h2_kernel`, NVIDIA, M <= 2) on the sliced
# prologue's paired fp16 output; its tile and split through `fast_host.gemv2_config`.
# Config (H200 2026-12-04, BENCH.md ninth pass, run 1: 9 configs, the op on every 27B shape
# at M = 1, 2): 512 columns, 4 warps (16-byte word loads), all 16 word rows of a group in one
# chunk, ~8 programs per SM: second by summed normalized time at both M (1.3% / 0.6% behind
# each M's best, which differed), within 1 us of the best cell but gate_up M = 2 (34.2 / 32.4).
H2_CONFIG = dict(block_n=512, num_warps=4, kw=16, programs_per_sm=8)
# Tenth pass, by (weight bits, M) over H2_CONFIG. At 158 registers (int4 M = 1; Triton 3.6) the
# GEMV holds 3 programs an SM and the ~8-per-SM grid ran 1.72 waves (ncu, gate_up); a grid of
# one wave won at M = 1 on every 27B shape (run 6, same run, us: qkv 15.54 against 16.85,
# o_proj 8.53 / 8.65, gate_up 22.29 / 23.18, down 15.50 / 16.42, in_proj 14.78 / 16.07) and lost
# at M = 2 (240 registers, 2 an SM: 1.7-3.9 us slower on 4 shapes, o_proj 0.2 us faster).
# int5 (255 registers at 512 columns) at M = 1 on 256 columns (128 registers, 4 spilled): qkv
# 25.78 against 27.52, o_proj 11.43 / 11.90, gate_up 38.04 / 45.18, down 26.31 / 28.78, in_proj
# 26.93 / 28.66; at M = 2 it lost on qkv and gate_up (31.66 / 29.90, 54.73 / 49.88), so M = 2
# keeps H2_CONFIG.
H2_BY_BITS_M: dict[tuple[int, int], dict[str, int]] = {
    (4, 1): dict(programs_per_sm=3),
    (5, 1): dict(block_n=256),
}
# Not shipped, one run only (run 7, same run, int5 M = 1 on 256 columns, 8 programs an SM against
# 4): qkv 25.89 / 23.19 us, o_proj 12.48 / 12.50, down 27.60 / 24.68, in_proj 26.40 / 24.11, but
# gate_up (89 M weights) 38.33 / 46.79; a second run was lost to a failed machine start.


def h2_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
              bits: int = 4) -> fast_host.GemvConfig:  # fmt: skip
    """The HFMA2 GEMV's shipped tile and split (H2_CONFIG, H2_BY_BITS_M) for an N x K layer of
    `bits`-bit weights at M rows."""
    c = {**H2_CONFIG, **H2_BY_BITS_M.get((bits, m), {})}
    return fast_host.gemv2_config(m, n, k, g, bounds, sms, num_warps=c["num_warps"],
                                  block_n=c["block_n"], kw=c["kw"],
                                  programs_per_sm=c["programs_per_sm"])  # fmt: skip


def gemv_h2(
    xr: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: fast_host.GemvConfig | None = None,
    maxnreg: int = 0,
    pdl: bool = False,
    qweight_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """The HFMA2 GEMV on the paired prologue output xr [P, M <= 2, K] fp16
    (`fast_host.rotate_slices(paired=True)`, / 2^h2_shift) -> y [M, N] out_dtype; `maxnreg`
    caps its registers a thread (the bench's occupancy variants); with `qweight_hi` ([K/32, N]
    int32 fifth-bit planes) int5 weights, `zeros` their 5-bit zeros."""
    from .decode_kernels import gemv_h2_kernel

    _, m, k = xr.shape
    n = qweight.shape[1]
    g = group_size
    require(m <= fast_host.H2_MAX_M, "x rows", f"<= {fast_host.H2_MAX_M} for the HFMA2 GEMV", m)
    require(xr.dtype == torch.float16 and k % 2 == 0, "xr", "fp16 pairs", (xr.dtype, k))
    cfg = config or h2_config(m, n, k, g, bounds, host.sm_count(xr.device),
                              5 if qweight_hi is not None else 4)  # fmt: skip
    require(g % (8 * cfg.kw) == 0, "kw", f"dividing group_size / 8 = {g // 8}", cfg.kw)
    out, ws, cnt, tiles = fast_host._gemv_buffers(m, n, cfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    asm = not host._is_hip() and not host._interpreted()
    gemv_h2_kernel[(tiles, cfg.split_k)](
        xr.view(torch.int32), qweight, scales, zeros, bias if bias is not None else scales,
        ws, cnt, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=g, BLOCK_M=1 if m == 1 else 2,
        BLOCK_N=cfg.block_n, KW=cfg.kw, SPLIT_K=cfg.split_k, ASM=asm, PDL=pdl,
        HI=qweight_hi is not None, qh_ptr=qweight_hi,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"maxnreg": maxnreg} if maxnreg else {}), **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return out


# Eleventh pass: the paired prologue the HFMA2 op runs where the layer has Givens records:
# "slice" (`fast_host.rotate_slices`, the folded blocks) or "givens" (the records kernel,
# `fast_host.rotate_givens_paired`). H200 run 2 (BENCH.md eleventh pass, same run, us, records
# at 4 warps / blocks): int4 M = 1 qkv 13.48 / 16.11, o_proj 9.67 / 9.51, gate_up 21.42 /
# 22.51, down 15.14 / 15.79, in_proj 13.70 / 14.99; M = 2 18.26 / 21.18, 9.86 / 10.13, 30.74 /
# 31.74, 20.48 / 21.17, 19.22 / 21.07; int5 M = 1 and 2: the blocks' time over the records'
# 0.99-1.09 on every shape; the prologue alone 2.6-3.7 us against 3.6-4.3 at M = 1 (1, 2, 4
# warps within 0.5 us in the op). Run 3 agrees (int4 M = 1 qkv 13.76 / 15.39, gate_up 21.62 /
# 22.38).
# Layers without the records (and gfx1201, which has no HFMA2 op) keep the blocks.
H2_PROLOGUE = "givens"


def gemv_h2_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None = None,
    config: fast_host.GemvConfig | None = None,
    slice_: int = 0,
    prologue_warps: int = 0,
    maxnreg: int = 0,
    pdl: bool = False,
    one: bool = False,
    qweight_hi: torch.Tensor | None = None,
    gv: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    prologue: str = "",
) -> torch.Tensor:
    """The decode linear on the HFMA2 GEMV: the paired prologue + `gemv_h2`, y [M, N] in
    x.dtype. `prologue` (default H2_PROLOGUE): "slice", the sliced blocks kernel (`slice_`
    channels a program, `prologue_warps`; 0: the shipped ones), or "givens", the records
    kernel on `gv` = (gv_idx, gv_coef) (`prologue_warps` its warps; the blocks without the
    records); `pdl` / `one` / `maxnreg`: the bench's variants (`fast_host.rotate_slices`);
    `qweight_hi`: int5 weights."""
    from .decode_kernels import H2_SHIFT, H2_SHIFT5

    kind = prologue or H2_PROLOGUE
    require(kind in ("slice", "givens"), "prologue", ("slice", "givens"), kind)
    pdl = pdl and fast_host.pdl_ok(host._is_hip())
    shift = H2_SHIFT5 if qweight_hi is not None else H2_SHIFT
    gv_idx, gv_coef = gv
    if kind == "givens" and gv_idx is not None and gv_coef is not None and not (one or slice_):
        xr = fast_host.rotate_givens_paired(x, gv_idx, gv_coef, group_size, shift,
                                            prologue_warps, pdl)  # fmt: skip
    else:
        xr, _ = fast_host.rotate_slices(x, rot_hi, rot_lo, group_size, slice_,
                                        prologue_warps, pdl=pdl, paired=True, one=one,
                                        pair_shift=shift)  # fmt: skip
    return gemv_h2(xr, qweight, scales, zeros, bounds, group_size, x.dtype, bias, config,
                   maxnreg, pdl, qweight_hi)  # fmt: skip


# Twelfth pass: the mma.sync GEMV (`decode_kernels.gemv_mma_kernel`, NVIDIA, M <= 16; int4, and
# int5 from the thirteenth pass) on the paired prologue's output at pair shift 0 (fp32
# accumulation: no range scaling). One column quad a gid (4 lanes): block_n = 32 num_warps
# columns (num_warps follows block_n). Config (H200 2026-12-04, BENCH.md twelfth pass, run 2,
# the op on every 27B shape at M = 1, 2, 4, 8, same run): 128 columns (4 warps), ~8 programs
# an SM (56 registers: 9 fit) best or within 4% on 15 of 20 cells; 64 columns / 2 warps / 16 an
# SM within 1 us everywhere (o_proj M = 1 9.59 us against 10.16, in_proj M = 2 16.03 / 15.09);
# 12 an SM 1.0-4.3 us slower on gate_up / down. The split: below (thirteenth pass).
MMA_MAX_M = 16  # the twelfth pass's rows, 8 a tile: 2 tiles past M = 8 (4 past 16: MMA_TILE_MAX_M)
MMA_CONFIG = dict(block_n=128)
# Thirteenth pass: the split from the grid's one wave, not a programs-per-SM target: the
# largest split-K whose programs all fit the SMs' resident slots at once (SMs x MMA_FIT:
# programs of 4 warps an SM that the registers allow, by (activation tiles, bits); sm_90,
# Triton 3.6 and 3.9: 56 / 71 / 96 / 97 registers, 64 for int5 at M = 1;
# `test_aot_gemv_mma_sm90` holds the table to the compiled counts). A grid past the slots ran a
# partial second wave: H200 2026-12-04 (BENCH.md thirteenth pass, run 1, same run, us): int5
# gate_up M = 1..8 at 816 programs (one wave of 7 an SM) 29.0-31.8 against 1088 (1.18 waves)
# 33.0-35.7; int4 past M = 8 (5 fit) at 5 an SM: qkv 20.5 / 22.4 against 23.5 / 25.5 (1.19
# waves), in_proj 21.0 / 22.5 against 24.9 / 27.2, o_proj 14.6 / 16.1 against 16.8 / 19.3,
# but gate_up 45.0 / 47.0 (680 programs: 20 in a second wave, 8 groups each) against 35.9 /
# 37.4 (1088).
MMA_FIT = {(1, 4): 9, (1, 5): 7, (2, 4): 5, (2, 5): 4, (4, 4): 3, (4, 5): 3}
# (four tiles, twenty-fourth pass: 168 / 166 registers uncapped, sm_90 Triton 3.9; 128 costs 16 /
# 120 bytes of stack for a fourth program an SM: the bench's MMA_GRID[4] times both.)
# Fifteenth pass: a register cap (ptxas maxnreg) by (activation tiles, bits), with the programs
# an SM it buys for the split (absent: uncapped, MMA_FIT), as the MXFP4 mma GEMV's cap
# (`mx_decode_host.MMA_BANDS`). H200 2026-12-04 (BENCH.md fifteenth pass, run 1, same run, us,
# as shipped -> capped): int5 two tiles at 80 registers, 6 an SM (Triton 3.6: 80 + 88 bytes of
# stack, from 100): gate_up M = 16 45.9 -> 41.4, qkv / down / in_proj within 1% (25.2 / 27.3 /
# 26.2). Not capped: int4 two tiles (80 / 72 / 64: equal or up to 1.29x slower), int4 and int5
# one tile (int5 at 64 / 56: within 3% at 64, 1.1x slower at 56).
MMA_CAP: dict[tuple[int, int], tuple[int, int]] = {(2, 5): (80, 6)}
# The prologue past M = 8 on layers of at most MMA_BLOCKS_MAX_WEIGHTS weights (o_proj): the
# sliced blocks, not the records (the records kernel runs its rows one after another, 6.4-8.8
# us alone at M = 9-16). H200 2026-12-04 (BENCH.md thirteenth pass, run 2, same run, one-wave
# split, us): o_proj M = 9 / 16 12.19 / 13.39 against the records' 14.03 / 15.72 and the
# matrix-unit GEMV's 15.44 / 15.94 (served there before); on the large layers within 1.5 us
# either way (qkv M = 9 21.63 / 20.20, gate_up M = 16 35.76 / 37.77), so they keep the records.
MMA_BLOCKS_MIN_M = 9
MMA_BLOCKS_MAX_WEIGHTS = GEMV3_SMALL_WEIGHTS
# Twenty-fourth pass: from 17 rows (four tiles) the blocks on every layer. H100 (BENCH.md
# twenty-fourth pass, same run, us, the four tiles on the records / on the blocks, M = 24):
# qkv 32.4 / 31.2, gate_up 57.5 / 53.6, down 33.6 / 31.5, o_proj 23.2 / 17.2, in_proj 33.3 /
# 32.5 (M = 32 alike; the records kernel alone 12-15 us at 24 rows).
MMA_BLOCKS_ALL_MIN_M = 17


def mma_blocks(m: int, weights: int) -> bool:
    """Whether the mma GEMV's paired prologue at M rows of a layer of `weights` weights is the
    sliced blocks (else the Givens records, where the layer has them)."""
    small = weights <= MMA_BLOCKS_MAX_WEIGHTS
    return m >= MMA_BLOCKS_ALL_MIN_M or (m >= MMA_BLOCKS_MIN_M and small)


# Twenty-fourth pass: four tiles (M = 17..MMA_TILE_MAX_M: a program's words unpacked once for
# 32 rows) built; the dispatch serves them only where measured (fast_host.MMA_GEMV_MAX_M).
MMA_TILE_MAX_M = 32


def mma_tiles(m: int) -> int:
    """The mma GEMV's 8-row activation tiles at M rows: 1, 2 or 4."""
    return 1 if m <= 8 else 2 if m <= 16 else 4


def one_wave_split(tiles: int, ngroups: int, slots: int) -> int:
    """The split-K of `tiles` column tiles over `ngroups` groups: the most splits whose programs
    fit `slots` at once (1 where the tiles alone do not), trimmed to the splits that get
    groups."""
    split = max(1, min(ngroups, slots // tiles))
    per = -(-ngroups // split)
    return -(-ngroups // per)


def mma_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
               bits: int = 4, **kw: int) -> fast_host.GemvConfig:  # fmt: skip
    """The mma GEMV's tile and split for an N x K layer at M (MMA_CONFIG, overridden by kw:
    block_n, and programs_per_sm for the twelfth pass's split toward that many programs an SM;
    without it `one_wave_split` at `mma_fit` programs an SM of `bits`, or kw fit)."""
    c = {**MMA_CONFIG, **kw}
    require(c["block_n"] in (32, 64, 128, 256, 512), "block_n", "32 x (1, 2, 4, 8 or 16)",
            c["block_n"])  # fmt: skip
    require(mma_ok(bounds), "partition bounds", "multiples of 32 (an mma's 32 columns)", bounds)
    cfg = fast_host.gemv2_config(m, n, k, g, bounds, sms, num_warps=c["block_n"] // 32,
                                 block_n=c["block_n"],
                                 programs_per_sm=c.get("programs_per_sm", 8))  # fmt: skip
    # a column a thread (narrower tiles at partition bounds: fewer warps)
    cfg = replace(cfg, num_warps=cfg.block_n // 32)
    if "programs_per_sm" in c:
        return cfg
    fit = c.get("fit") or mma_fit(m, bits)
    fit = fit * 128 // cfg.block_n  # registers a program scale with T
    return replace(cfg, split_k=one_wave_split(-(-n // cfg.block_n), k // g, sms * fit))


def mma_fit(m: int, bits: int = 4) -> int:
    """Programs of 4 warps an SM that the mma GEMV's registers allow at M rows (capped where
    MMA_CAP caps them)."""
    cap = MMA_CAP.get((mma_tiles(m), bits))
    return cap[1] if cap else MMA_FIT[(mma_tiles(m), bits)]


def mma_maxnreg(m: int, bits: int = 4) -> int:
    """The mma GEMV's register cap at M rows (0: none)."""
    cap = MMA_CAP.get((mma_tiles(m), bits))
    return cap[0] if cap else 0


def mma_ok(bounds: tuple[int, ...]) -> bool:
    """Whether the mma GEMV takes a layer with these partition bounds: every mma's 32 columns
    (8 column quads) read one partition's activations."""
    return all(b % 32 == 0 for b in bounds)


def gemv_mma(
    xr: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: fast_host.GemvConfig | None = None,
    qweight_hi: torch.Tensor | None = None,
    maxnreg: int | None = None,
) -> torch.Tensor:
    """The mma GEMV on the paired prologue output xr [P, M <= 32, K] fp16 (pair shift 0)
    -> y [M, N] out_dtype; `qweight_hi` [K/32, N]: int5 (I8 PG ZPE) weights' fifth bits;
    `maxnreg`: a register cap (0: none; default `mma_maxnreg`)."""
    from .decode_kernels import gemv_mma_kernel

    _, m, k = xr.shape
    n = qweight.shape[1]
    g = group_size
    require(m <= MMA_TILE_MAX_M, "x rows", f"<= {MMA_TILE_MAX_M} for the mma GEMV", m)
    require(g % 32 == 0 and k % g == 0, "group_size", "a multiple of 32 dividing K", (g, k))
    require(xr.dtype == torch.float16, "xr", "fp16 pairs", xr.dtype)
    bits = 4 if qweight_hi is None else 5
    cfg = config or mma_config(m, n, k, g, bounds, host.sm_count(xr.device), bits)
    t = cfg.block_n
    require(t == 32 * cfg.num_warps, "config", "block_n = 32 num_warps (a column a thread)",
            cfg)  # fmt: skip
    if qweight_hi is not None:
        require(tuple(qweight_hi.shape) == (k // 32, n) and qweight_hi.dtype == torch.int32,
                "qweight_hi", f"int32 [{k // 32}, {n}] (K / 32 fifth-bit words a column)",
                (tuple(qweight_hi.shape), qweight_hi.dtype))  # fmt: skip
    out, ws, cnt, tiles = fast_host._gemv_buffers(m, n, cfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    asm = not host._is_hip() and not host._interpreted()
    cap = mma_maxnreg(m, bits) if maxnreg is None else maxnreg
    gemv_mma_kernel[(tiles, cfg.split_k)](
        xr.view(torch.int32), qweight, scales, zeros, bias if bias is not None else scales,
        ws, cnt, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=g, T=t, SPLIT_K=cfg.split_k, ASM=asm, NT=mma_tiles(m),
        HI=qweight_hi is not None, qh_ptr=qweight_hi,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"maxnreg": cap} if cap and asm else {}),
    )  # fmt: skip
    return out


def gemv_mma_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None = None,
    config: fast_host.GemvConfig | None = None,
    gv: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None),
    qweight_hi: torch.Tensor | None = None,
    prologue: str = "",
    maxnreg: int | None = None,
) -> torch.Tensor:
    """The decode linear on the mma GEMV: the paired prologue at pair shift 0 + `gemv_mma`,
    y [M, N] in x.dtype; `qweight_hi`: int5. `prologue`: "givens", the records kernel on `gv`
    (the blocks where `gv` has no records), or "slice", the sliced blocks; default the records,
    but the blocks where `mma_blocks` says.
    `maxnreg`: `gemv_mma`'s."""
    require(prologue in ("", "givens", "slice"), "prologue", ("givens", "slice"), prologue)
    gv_idx, gv_coef = gv
    m, k = x.shape
    kind = prologue or ("slice" if mma_blocks(m, qweight.shape[1] * k) else "givens")
    if gv_idx is not None and gv_coef is not None and kind == "givens":
        xr = fast_host.rotate_givens_paired(x, gv_idx, gv_coef, group_size, 0)
    else:
        xr, _ = fast_host.rotate_slices(x, rot_hi, rot_lo, group_size, paired=True,
                                        pair_shift=0)  # fmt: skip
    return gemv_mma(xr, qweight, scales, zeros, bounds, group_size, x.dtype, bias, config,
                    qweight_hi, maxnreg)  # fmt: skip
