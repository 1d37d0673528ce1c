"""Host side of the matrix-unit decode GEMV with the weights as the register operand
(`gemv_dot_kernels.gemv3_w4a16_kernel`, `tl.dot`, NVIDIA).

Shape contract: that of `route.w4a16_linear` (the tensors of a `repack.Prepared` layer), G = 128:

    x [M <= 16, K] -> prologue xr [P, M, K] fp16 (sliced blocks, the block kernel, or the
    Givens records) -> y [M, N] in x.dtype, split-K summed in the kernel (the shared
    `launch` workspace and tickets, left zeroed)
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import torch

from .._contract import require
from . import launch
from .gemv_dot_kernels import gemv3_w4a16_kernel
from .prologue import GEMV3_PROLOGUE, prologue16
from .weights import Prepared

# Configs from the `gemv_dot` sweeps (H200 2026-12-02,
# docs/notebook/kernels-2026-11-29-to-12-06.md; `bench_decode`). Run 2, stage 1 (the
# GEMV alone, 48 configs, qkv and gate_up at M = 1 and 16): 128 columns, 4 warps, 8 programs per SM,
# 1 group per iteration, 3 stages best or within 3% of the best (qkv M = 16 22.2-23.1 us; 256
# columns / 8 warps 1.6-1.8x slower: 180+ registers); run 3 (as served, both with PDL): that config
# on every shape at M = 16 but o_proj, where 64 columns, 4 per SM, 2 groups an iteration, 2 stages
# took 16.0 us against 18.7 (also at M = 2-8: 14.9-15.7 against 15.2-17.9), and lost 1.3-1.7x on the
# large shapes: so it serves layers of at most GEMV3_SMALL_WEIGHTS (o_proj 15.7 M; qkv 36.7 M takes
# the large config). Prologue (run 2, as served at M = 16): sliced 28.4-30.7 us on qkv against the
# block kernel's 31.1 and the Givens-records kernel's 30.6; alone the records kernel took 6.3-12.1
# us against the sliced one's 4.0-7.9 on every shape, so the sliced fp16 prologue serves.
GEMV3_BLOCK_N = 128


GEMV3_WARPS = 4


GEMV3_PROGRAMS_PER_SM = 8


GEMV3_GPI = 1


GEMV3_STAGES = 3


GEMV3_SMALL_WEIGHTS = 20 << 20


GEMV3_SMALL = dict(block_n=64, num_warps=4, programs_per_sm=4, gpi=2, num_stages=2)


# int5 above GEMV3_SMALL_WEIGHTS (H200 2026-12-03,
# docs/notebook/kernels-2026-11-29-to-12-06.md, run 2, same run, M = 1 / 4 / 16): 64 columns, 4
# warps, 8 programs per SM, 1 group an iteration, 3 stages took qkv 33.2 / 34.6 / 36.3 us against
# the int4 config's 36.3 / 37.2 / 38.2, gate_up 62.7 / 66.5 / 70.9 against 75.1 / 76.8 / 80.7, down
# 34.9 / 36.9 / 39.4 against 44.4 / 45.1 / 47.0, in_proj 31.9 / 34.9 / 36.5 against 44.1 / 45.5 /
# 47.3 (run 1, 8 configs: the best on each at M = 1 and 16). Of the 7 configs around it in run 2, 32
# columns / 2 warps / 16 per SM won at M = 1 (gate_up 48.8) but lost at M = 16 (75.8): one config
# for the band.
GEMV3_INT5 = dict(block_n=64, num_warps=4, programs_per_sm=8, gpi=1, num_stages=3)


@dataclass(frozen=True)
class Gemv3Config:
    """One launch configuration of the `gemv_dot` GEMV."""

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
    launch.fit_block_n(
        16, align or 16
    )  # refuses boundaries off the 16-column grid, as the tiles do
    bn = block_n or GEMV3_BLOCK_N
    while bn > 16 and ((align and align % bn) or bn > 2 * n):
        bn //= 2
    tiles = -(-n // bn)
    ngroups = k // g
    split = max(1, min(ngroups, -(-(programs_per_sm or GEMV3_PROGRAMS_PER_SM) * sms // tiles)))
    per = -(-ngroups // split)
    return Gemv3Config(bn, -(-ngroups // per), num_warps or GEMV3_WARPS, gpi or GEMV3_GPI,
                       num_stages or GEMV3_STAGES)  # fmt: skip


def gemv3_w4a16(
    xr: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: Gemv3Config | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """The GEMV on the prologue output xr [P, M <= 16, K] fp16 -> y [M, N] out_dtype; with
    `w.qweight_hi` ([K/32, N] int32 fifth-bit planes) int5 weights, `w.zeros` their 5-bit
    zeros."""
    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    qweight_hi = w.qweight_hi

    _, m, k = xr.shape
    n = qweight.shape[1]
    require(xr.dtype == torch.float16, "xr dtype", torch.float16, xr.dtype)
    cfg = config or gemv3_config(m, n, k, group_size, bounds, launch.sm_count(xr.device),
                                 bits=5 if qweight_hi is not None else 4)  # fmt: skip
    gcfg = launch.GemvConfig(16, cfg.block_n, cfg.split_k, cfg.num_warps)
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, gcfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    asm = not launch.is_hip() and not launch.interpreted()
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
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    prologue: str = "",
    config: Gemv3Config | None = None,
    pdl: bool | None = None,
) -> torch.Tensor:
    """The decode linear: prologue (`prologue16`) + GEMV, y [M, N] in x.dtype; PDL (default
    `launch.GEMV_PDL`) with the sliced prologue only; `w.qweight_hi`: int5 weights."""
    kind = prologue or GEMV3_PROLOGUE
    use = (launch.GEMV_PDL if pdl is None else pdl) and kind == "slice"
    use = use and launch.pdl_ok(launch.is_hip())
    xr = prologue16(x, w.rot_hi, w.rot_lo, w.group_size, w.gv_idx, w.gv_coef, kind, use)
    return gemv3_w4a16(xr, w, x.dtype, bias, config, use)
