"""Host side of the decode GEMVs on the FMA units: the FMA GEMV (fp32 FMAs, M <= 2, optionally
with the Givens layers inside) and the HFMA2 GEMV (packed fp16 multiply-adds, M <= 2, NVIDIA).

Shape contract: that of `route.w4a16_linear` (the tensors of a `repack.Prepared` layer):
x [M <= 2, K] -> prologue (blocks, slices or records) -> y [M, N] in x.dtype, split-K summed in
the kernel (the shared `launch` workspace and tickets, left zeroed).
"""

from __future__ import annotations

from math import gcd

import torch

from .._contract import require
from . import launch
from .gemv_fma_kernels import H2_SHIFT, H2_SHIFT5, gemv2_w4a16_kernel, gemv_h2_kernel
from .prologue import prologue_slice, rotate_givens_paired, rotate_scale, rotate_slices
from .weights import Prepared


def gemv_w4a16(
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    fused: bool | None = None,
    pdl: bool | None = None,
    h2: bool | None = None,
) -> torch.Tensor:
    """The decode GEMV linear at M <= GEMV2_MAX_M on the weights `w`: the FMA GEMV
    (`gemv2_w4a16`, `config` a `gemv2_config`) after the block prologue, or with the Givens
    layers inside (`gemv2_rot`), or the HFMA2 GEMV (`h2_ok`). `fused` / `pdl` / `h2` override
    `gemv2_rot` / GEMV_PDL / `h2_ok` (the bench's forced paths).
    """
    rot_hi, rot_lo, gv_idx, gv_coef = w.rot_hi, w.rot_lo, w.gv_idx, w.gv_coef
    bounds = w.bounds
    m, k = x.shape
    n = w.qweight.shape[1]
    g = w.group_size
    require(m <= GEMV2_MAX_M, "x rows", f"<= {GEMV2_MAX_M} for the decode GEMVs", m)
    cfg2 = config or gemv2_config(m, n, k, g, bounds, launch.sm_count(x.device),
                                  hip=launch.is_hip())  # fmt: skip
    if fused is None:
        fused = gemv2_rot(launch.is_hip(), n, k) and m <= GEMV2_ROT_MAX_M
        fused = fused and not (H2_OVER_ROT and h2_ok(launch.is_hip(), m, g))
    pdl = launch.GEMV_PDL if pdl is None else pdl
    if fused and gv_idx is not None and gv_coef is not None:
        return gemv2_w4a16_rot(x, w, bias, cfg2)
    if h2 is None:
        h2 = config is None and not pdl and h2_ok(launch.is_hip(), m, g)
    if h2:
        return gemv_h2_linear(w, x, bias)
    use_pdl = launch.pdl_ok(launch.is_hip()) and pdl
    if prologue_slice(launch.is_hip()):
        xr, rs = rotate_slices(x, rot_hi, rot_lo, g, pdl=use_pdl)
    else:
        use_pdl = False
        xr, rs = rotate_scale(x, rot_hi, rot_lo, g, nibble_scaled=True)
    return gemv2_w4a16(xr, rs, w, x.dtype, bias, cfg2, pdl=use_pdl)


# gemv2 (the FMA GEMV, `gemv_fma_kernels.gemv2_w4a16_kernel`): FMA GEMV of up to
# GEMV2_MAX_M rows; its tile and split rule (`gemv2_config`) also sizes the HFMA2 and mma GEMVs.
# Sweeps (H200 2026-12-01, GEMV alone; docs/notebook/kernels-2026-11-29-to-12-06.md): 4 warps x 4
# columns per thread (512 columns) won (run 1: 2 warps / 256 columns 20.7 vs 15.7 us on qkv M = 1; 8
# warps 16.9); more programs won (8 per SM: qkv 13.1 vs 15.7; ncu at 4 per SM: 0.45 waves, 10.5%
# achieved occupancy); the pipelining depth did not matter. Run 2 (8 per SM): 8 word rows per chunk
# at M = 1 (qkv 12.6, gate_up 22.7, down 15.1 us; kw 4 within +-4%), 4 at M = 2 (qkv 16.5 vs 17.8 at
# kw 8, gate_up 31.8 vs 39.2, down 19.8 vs 22.1).
# 2026-12-05: the FMA GEMV's 4-row form (M = 3..4) and its 16-row matrix-unit form are
# gone: no dispatch picked them (NVIDIA serves M = 2..16 on the mma GEMV, gfx1201 M >= 3 on the
# tile kernels: the 2026-12-01 run 1 had the GEMV's best at M = 4 behind them), and the
# 4-row form cost 11.7 s a build in Triton's coalescing
# (2026-12-05, docs/notebook/kernels-2026-11-29-to-12-06.md).
GEMV2_MAX_M = 2


GEMV2_WARPS = 4


GEMV2_BLOCK_N = 512


GEMV2_KW = {1: 8, 2: 4}


GEMV2_PROGRAMS_PER_SM = 8


GEMV2_STAGES = 2


def gemv2_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
                 num_warps: int = 0, block_n: int = 0, kw: int = 0,
                 programs_per_sm: int = 0, num_stages: int = 0,
                 hip: bool = False) -> launch.GemvConfig:  # fmt: skip
    """Tile and split of the FMA GEMV (the section note in gemv_fma_kernels):
    BLOCK_N / (32 num_warps) adjacent columns per thread (16-byte loads), narrower where a
    partition boundary needs it; split-K until about `programs_per_sm` programs per SM. The
    HFMA2 and mma GEMVs size theirs here too (their M past GEMV2_MAX_M: block_m unused)."""
    nw = num_warps or GEMV2_WARPS
    align = 0
    for b in bounds:
        align = gcd(align, b)
    launch.fit_block_n(
        16, align or 16
    )  # refuses boundaries off the 16-column grid, as the tiles do
    bn = block_n or GEMV2_BLOCK_N
    while bn > 16 and ((align and align % bn) or bn > 2 * n):
        bn //= 2
    kw_ = min(kw or GEMV2_KW.get(m, 2), g // 8)
    tiles = -(-n // bn)
    ngroups = k // g
    pps = programs_per_sm or GEMV2_PROGRAMS_PER_SM
    split = max(1, min(ngroups, -(-pps * sms // tiles)))
    per = -(-ngroups // split)
    block_m = 1 if m == 1 else GEMV2_MAX_M
    return launch.GemvConfig(block_m, bn, -(-ngroups // per), nw, num_stages or GEMV2_STAGES, kw_)


# H200 2026-12-02: the Givens layers inside the FMA GEMV (`gemv2_w4a16_kernel(ROT=True)`): no
# prologue launch; each program rotates its own 128-channel groups from the records (partner,
# cos, signed sin per channel and layer: 12 KB a group at krot 8 against the 32 KB of int4 words
# a 512-column program reads per group), while its first chunk of words is in flight.
# Sweep (H200 2026-12-02, runs 2-3, the op alone, same run; sliced prologue + GEMV
# as served before vs the fused kernel at the shipped kw, 8 programs per SM): with the records
# loaded before the gathers (run 3) o_proj M = 1 9.37 vs 10.86 us, M = 2 11.38 vs 12.16 (kw 4);
# qkv M = 1 18.56 vs 18.30, M = 2 23.69 vs 22.48; gate_up M = 1 36.69 vs 29.38, M = 2 45.29
# vs 36.82. Run 2 (records loaded per layer): down M = 1 24.1 vs 20.2, in_proj 23.5 vs 18.5.
# The rotation is a fixed cost per (column tile, group), ~25% of the GEMV's time at every
# shape, against the prologue's fixed ~3-5 us: it wins only where the GEMV itself is short.
# So the fused kernel serves layers of at most GEMV2_ROT_MAX_WEIGHTS weights (o_proj, 15.7 M;
# qkv's 36.7 M ties and stays on the prologue). 8-warp / 1024-column tiles lost everywhere but
# o_proj M = 1 (9.21 us).
GEMV2_ROT = True


GEMV2_ROT_PRE = True  # every layer's records loaded before the first gather


GEMV2_ROT_MAX_WEIGHTS = 20 << 20


# H200 2026-12-04 (docs/notebook/kernels-2026-11-29-to-12-06.md run 1, same run): at M = 2 the HFMA2
# GEMV took o_proj 10.2 us against the fused kernel's 12.0; at M = 1 10.0 against 9.7 (a tie), so
# the fused kernel keeps M = 1 only.
GEMV2_ROT_MAX_M = 1


# H200 2026-12-04: where the HFMA2 GEMV serves (`h2_ok`), it takes the fused kernel's M = 1 layers
# too. o_proj M = 1, same run each (H200 2026-12-04, us, HFMA2 op against the fused kernel as
# served): run 3 8.92 / 9.97, run 4 8.71 / 9.12, run 6 8.65 / 9.01, run 7 (one-wave grid)
# 8.83 / 10.11. The fused kernel keeps the layers the HFMA2 GEMV cannot take (G = 64).
H2_OVER_ROT = True


# H200 2026-12-04: the HFMA2 GEMV (`gemv_fma_kernels.gemv_h2_kernel`) serves the decode band (M <=
# 2, NVIDIA) where the FMA GEMV served with the sliced prologue. H200 2026-12-04
# (docs/notebook/kernels-2026-11-29-to-12-06.md, run 1, as served by path in the same
# run, M = 1): qkv 17.0 us against 17.5, gate_up 24.4 / 30.8, down 17.9 / 20.7, in_proj 16.3 / 17.5;
# M = 2: 22.8 / 23.4, 34.2 / 38.1, 21.9 / 23.1, 21.6 / 22.2 (`gemv_fma.H2_CONFIG`); run 3, as
# served: M = 1 1.04-1.29x the FMA op, M = 2 1.03-1.12x. gfx1201 keeps the FMA GEMV (no packed-fp16
# PTX).
GEMV_H2 = True


H2_MAX_M = 2  # its 1- and 2-row PTX


def h2_ok(hip: bool, m: int, g: int) -> bool:
    """The HFMA2 GEMV serves an M-row decode call: NVIDIA, compiled code, M <= H2_MAX_M,
    G % 128 == 0 (its 16-row chunk)."""
    interp = launch.interpreted()
    return GEMV_H2 and not hip and not interp and m <= H2_MAX_M and g % 128 == 0


def gemv2_rot(hip: bool, n: int = 0, k: int = 0) -> bool:
    """The Givens layers inside the FMA GEMV for an N x K layer (NVIDIA, up to
    GEMV2_ROT_MAX_WEIGHTS weights); gfx1201 keeps the block prologue its AOT budget was
    measured on."""
    return GEMV2_ROT and not hip and n * k <= GEMV2_ROT_MAX_WEIGHTS


def gemv2_w4a16_rot(
    x: torch.Tensor,
    w: Prepared,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    pre: bool | None = None,
) -> torch.Tensor:
    """The FMA GEMV with the rotation inside (`w`'s Givens records, required): x [M <= 2, K]
    -> y [M, N] in x.dtype, one launch."""

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    gv_idx, gv_coef = w.gv_idx, w.gv_coef
    require(gv_idx is not None and gv_coef is not None, "gv_idx/gv_coef", "set", None)
    assert gv_idx is not None and gv_coef is not None
    m, k = x.shape
    n = qweight.shape[1]
    g = group_size
    cfg = config or gemv2_config(m, n, k, g, bounds, launch.sm_count(x.device), hip=launch.is_hip())
    require(m <= min(cfg.block_m, GEMV2_MAX_M), "x rows", f"<= {cfg.block_m} (FMA GEMV)", m)
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, cfg, x.dtype, x.device)
    xs = launch.scratch("gemv_xs", tiles * cfg.split_k * cfg.block_m * g, torch.float32, x.device)
    b = (*bounds, n, n)[:2]
    gemv2_w4a16_kernel[(tiles, cfg.split_k)](
        x, xs, qweight, scales, zeros, bias if bias is not None else scales, ws, cnt, out,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=g, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        KW=cfg.kw, SPLIT_K=cfg.split_k, RS=1, ROT=True,
        KROT=gv_idx.shape[1], gi_ptr=gv_idx, gc_ptr=gv_coef, xs_ptr=xs, stride_xm=x.stride(0),
        PRE=GEMV2_ROT_PRE if pre is None else pre,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


def gemv2_w4a16(
    xr: torch.Tensor,
    rs: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """The FMA GEMV on the prologue outputs xr [P, M <= 2, K] (fp32 nibble-scaled:
    `prologue.rotate_scale(nibble_scaled=True)` or `rotate_slices`), rs [P, M, K/G * RS] fp32 ->
    y [M, N] out_dtype."""

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    _, m, k = xr.shape
    n = qweight.shape[1]
    cfg = config or gemv2_config(m, n, k, group_size, bounds, launch.sm_count(xr.device),
                                 hip=launch.is_hip())  # fmt: skip
    require(m <= min(cfg.block_m, GEMV2_MAX_M), "x rows", f"<= {cfg.block_m} for the GEMV", m)
    require(xr.dtype == torch.float32, "xr dtype", "torch.float32 (nibble-scaled)", xr.dtype)
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, cfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    parts_rs = rs.shape[-1] // (k // group_size)  # the sliced prologue's partial sums per group
    gemv2_w4a16_kernel[(tiles, cfg.split_k)](
        xr, rs, qweight, scales, zeros, bias if bias is not None else scales, ws, cnt, out,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=group_size, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        KW=cfg.kw, SPLIT_K=cfg.split_k, RS=parts_rs, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return out


# H200 2026-12-04: the HFMA2 GEMV (`gemv_fma_kernels.gemv_h2_kernel`, NVIDIA, M <= 2) on the sliced
# prologue's paired fp16 output; its tile and split through `gemv_fma.gemv2_config`.
# Config (H200 2026-12-04, docs/notebook/kernels-2026-11-29-to-12-06.md, run 1: 9 configs, the op on
# every 27B shape at M = 1, 2): 512 columns, 4 warps (16-byte word loads), all 16 word rows of a
# group in one chunk, ~8 programs per SM: second by summed normalized time at both M (1.3% / 0.6%
# behind each M's best, which differed), within 1 us of the best cell but gate_up M = 2 (34.2 /
# 32.4).
H2_CONFIG = dict(block_n=512, num_warps=4, kw=16, programs_per_sm=8)


# H200 2026-12-04, by (weight bits, M) over H2_CONFIG. At 158 registers (int4 M = 1; Triton 3.6) the
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


def h2_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
              bits: int = 4) -> launch.GemvConfig:  # fmt: skip
    """The HFMA2 GEMV's shipped tile and split (H2_CONFIG, H2_BY_BITS_M) for an N x K layer of
    `bits`-bit weights at M rows."""
    c = {**H2_CONFIG, **H2_BY_BITS_M.get((bits, m), {})}
    return gemv2_config(m, n, k, g, bounds, sms, num_warps=c["num_warps"],
                                  block_n=c["block_n"], kw=c["kw"],
                                  programs_per_sm=c["programs_per_sm"])  # fmt: skip


def gemv_h2(
    xr: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    maxnreg: int = 0,
    pdl: bool = False,
) -> torch.Tensor:
    """The HFMA2 GEMV on the paired prologue output xr [P, M <= 2, K] fp16
    (`prologue.rotate_slices(paired=True)`, / 2^h2_shift) -> y [M, N] out_dtype; `maxnreg`
    caps its registers a thread (the bench's occupancy variants); with `w.qweight_hi` ([K/32, N]
    int32 fifth-bit planes) int5 weights, `w.zeros` their 5-bit zeros."""

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    qweight_hi = w.qweight_hi
    _, m, k = xr.shape
    n = qweight.shape[1]
    g = group_size
    require(m <= H2_MAX_M, "x rows", f"<= {H2_MAX_M} for the HFMA2 GEMV", m)
    require(xr.dtype == torch.float16 and k % 2 == 0, "xr", "fp16 pairs", (xr.dtype, k))
    cfg = config or h2_config(m, n, k, g, bounds, launch.sm_count(xr.device),
                              5 if qweight_hi is not None else 4)  # fmt: skip
    require(g % (8 * cfg.kw) == 0, "kw", f"dividing group_size / 8 = {g // 8}", cfg.kw)
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, cfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    asm = not launch.is_hip() and not launch.interpreted()
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


# H200 2026-12-04: the paired prologue the HFMA2 op runs where the layer has Givens records:
# "slice" (`prologue.rotate_slices`, the folded blocks) or "givens" (the records kernel,
# `prologue.rotate_givens_paired`). H200 run 2 (docs/notebook/kernels-2026-11-29-to-12-06.md, same
# run, us, records at 4 warps / blocks): int4 M = 1 qkv 13.48 / 16.11, o_proj 9.67 / 9.51, gate_up
# 21.42 / 22.51, down 15.14 / 15.79, in_proj 13.70 / 14.99; M = 2 18.26 / 21.18, 9.86 / 10.13, 30.74
# / 31.74, 20.48 / 21.17, 19.22 / 21.07; int5 M = 1 and 2: the blocks' time over the records'
# 0.99-1.09 on every shape; the prologue alone 2.6-3.7 us against 3.6-4.3 at M = 1 (1, 2, 4
# warps within 0.5 us in the op). Run 3 agrees (int4 M = 1 qkv 13.76 / 15.39, gate_up 21.62 /
# 22.38).
# Layers without the records (and gfx1201, which has no HFMA2 op) keep the blocks.
H2_PROLOGUE = "givens"


def gemv_h2_linear(
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    slice_: int = 0,
    prologue_warps: int = 0,
    maxnreg: int = 0,
    pdl: bool = False,
    one: bool = False,
    prologue: str = "",
) -> torch.Tensor:
    """The decode linear on the HFMA2 GEMV: the paired prologue + `gemv_h2`, y [M, N] in
    x.dtype. `prologue` (default H2_PROLOGUE): "slice", the sliced blocks kernel (`slice_`
    channels a program, `prologue_warps`; 0: the shipped ones), or "givens", the records
    kernel on `w.gv_idx` / `w.gv_coef` (`prologue_warps` its warps; the blocks without the
    records); `pdl` / `one` / `maxnreg`: the bench's variants (`prologue.rotate_slices`);
    `w.qweight_hi`: int5 weights."""
    rot_hi, rot_lo, group_size = w.rot_hi, w.rot_lo, w.group_size

    kind = prologue or H2_PROLOGUE
    require(kind in ("slice", "givens"), "prologue", ("slice", "givens"), kind)
    pdl = pdl and launch.pdl_ok(launch.is_hip())
    shift = H2_SHIFT5 if w.qweight_hi is not None else H2_SHIFT
    gv_idx, gv_coef = w.gv_idx, w.gv_coef
    if kind == "givens" and gv_idx is not None and gv_coef is not None and not (one or slice_):
        xr = rotate_givens_paired(x, gv_idx, gv_coef, group_size, shift,
                                            prologue_warps, pdl)  # fmt: skip
    else:
        xr, _ = rotate_slices(x, rot_hi, rot_lo, group_size, slice_,
                                        prologue_warps, pdl=pdl, paired=True, one=one,
                                        pair_shift=shift)  # fmt: skip
    return gemv_h2(xr, w, x.dtype, bias, config, maxnreg, pdl)
