"""Host side of the MXFP4 FMA decode GEMV (`mx_gemv_kernels.mx_gemv_kernel`): config and launch.

Shape contract of `mx_gemv` (asserted by `mx_gemm.check_gemm`, the GEMM's):

    a        [P, M, K]       bf16 / fp16, M <= 4; rows stride_am, unit along K
    w        MxWeight        the GEMM's repacked weight (qw [N, Kp/2] u8, sc [Kp/32, N] u8)
    bounds   P - 1 ints      first output column of planes 1..
    bias     [N] or None
    -> y     [M, N]          out dtype

W4A8 MXFP4 layers take the decode GEMVs too: the same weight bytes with the activations left
unquantized (more accurate than the format's fp8 activations), as the int4 W4A8 layers take the
int4 GEMVs there (`route.a8_route`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .._contract import require
from . import launch
from .mx_gemm import check_gemm
from .mx_gemv_kernels import mx_gemv_kernel
from .mx_repack import MxWeight, _align, _block_n

# H200 (docs/notebook/kernels-2026-11-29-to-12-06.md, run 1; sweep over qkv and gate_up at M = 1, 2,
# 4, 24 configs, the 3d7c87d kernel beside each): the least summed time is 128 columns, 4 warps, 16
# programs per SM, unroll 1, no prefetch (within 9% of each shape's best; the prefetch lost 0-9% at
# every M, so it is off). gate_up at M = 1 / 2 / 4: 29.4 / 37.8 / 52.4 us against the 3d7c87d
# kernel's best 34.4 / 68.5 / 135.8 and the A16 GEMM's 91.5 at M = 4 (H200 2026-12-02) : the GEMV
# now serves M <= 4, the GEMM from M = 5 (A16_MAX_M keeps its 16-bit activations to M = 4 where
# the GEMV is off: GEMV = False, or gfx1201).
GEMV = True


GEMV_MAX_M = 4


A16_MAX_M = 4


GEMV_CONFIG = (128, 4, 16, 1, False)


GEMV_MIN_PAIRS = 2  # block pairs per split at least


GEMV_HIP = False  # gfx1201 keeps the MXFP4 GEMM until the GEMV is measured there


@dataclass(frozen=True)
class GemvConfig:
    """One launch configuration of the MXFP4 GEMV."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    unroll: int  # block pairs an iteration (`mx_gemv_kernel`'s U)
    prefetch: bool = False  # the next iteration's words loaded before this one's math (PF)


def sweep_configs() -> list[dict[str, Any]]:
    """The config grid of the H200 sweep (bench_mx_decode)."""
    return [dict(block_n=bn, num_warps=w, programs_per_sm=pps, unroll=u, prefetch=pf)
            for bn in (128, 256) for w in (4, 8) for pps in (8, 16) for u in (1, 2)
            for pf in (False, True) if not (u == 2 and pf)]  # fmt: skip


def test_configs() -> list[dict[str, Any]]:
    """Every tile width, warp count and unroll of the sweep at least once (the GPU test's)."""
    return [dict(block_n=64, num_warps=4, programs_per_sm=16, unroll=1),
            dict(block_n=128, num_warps=8, programs_per_sm=8, unroll=4),
            dict(block_n=256, num_warps=4, programs_per_sm=4, unroll=2),
            dict(block_n=256, num_warps=8, programs_per_sm=16, unroll=1, prefetch=True),
            dict(block_n=128, num_warps=4, programs_per_sm=8, unroll=2, prefetch=True)]  # fmt: skip


def gemv_ok(m: int, hip: bool) -> bool:
    """Whether the decode GEMV serves an M-row call on this platform."""
    return GEMV and m <= GEMV_MAX_M and (GEMV_HIP or not hip)


def gemv_config(m: int, n: int, k: int, bounds: tuple[int, ...], sms: int, block_n: int = 0,
                num_warps: int = 0, programs_per_sm: int = 0, unroll: int = 0,
                hip: bool = False, prefetch: bool | None = None) -> GemvConfig:  # fmt: skip
    """Tile and split: BLOCK_N rows a program (dividing every plane boundary), split-K over block
    pairs (a multiple of the unroll each) until about `programs_per_sm` programs per SM.

    gfx1201 (AOT, Triton 3.9, 4 waves): unroll 1 (2 spills from M = 2 and 4 at M = 1), 128 rows
    to M = 2 (89 / 148 VGPRs) and 64 at M = 4."""
    require(1 <= m <= 4, "x rows", "1..4 for the MXFP4 GEMV", m)
    if hip:
        block_n = block_n or (128 if m <= 2 else 64)
        unroll = unroll or 1
    block_m = 1 if m == 1 else (2 if m == 2 else 4)
    t_bn, t_warps, t_pps, t_u, t_pf = GEMV_CONFIG
    bn = _block_n(block_n or t_bn, _align(bounds))
    u = unroll or t_u
    tiles = -(-n // bn)
    pairs = -(-k // 64)
    pps = programs_per_sm or t_pps
    split = max(1, min(pairs // GEMV_MIN_PAIRS, -(-pps * sms // tiles)))
    per = -(-pairs // split)
    per = -(-per // u) * u
    pf = t_pf if prefetch is None else prefetch
    return GemvConfig(block_m, bn, -(-pairs // per), num_warps or t_warps, u, pf and not hip)


def mx_gemv(
    a: torch.Tensor,
    w: MxWeight,
    bounds: tuple[int, ...],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
    asm: bool | None = None,
) -> torch.Tensor:
    """y [M, N] = A_p W^T (+ bias) per plane p for M <= 4 rows; contract in the module doc.
    `asm` (default: NVIDIA, compiled) picks the PTX unpack over the plain-op one."""

    check_gemm(a, None, w, bounds, bias)
    require(a.dtype in (torch.bfloat16, torch.float16), "a dtype", "bf16 or fp16 (A16)", a.dtype)
    _, m, k = a.shape
    n = w.n
    hip = launch.is_hip()
    cfg = config or gemv_config(m, n, k, bounds, launch.sm_count(a.device), hip=hip)
    require(m <= cfg.block_m, "x rows", f"<= {cfg.block_m} for this config", m)
    out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    tiles = -(-n // cfg.block_n)
    ws = cnt = out  # unused without split-K
    if cfg.split_k > 1:  # the int4 GEMVs' buffers: zero on entry, left zero by the last split
        ws = launch.scratch("gemv_ws", m * n, torch.float32, a.device)
        cnt = launch.scratch("gemv_cnt", tiles, torch.int32, a.device)
    b = (*bounds, n, n)[:2]
    if asm is None:
        asm = not hip and not launch.interpreted()
    # the asm activation loads read 8 bytes at columns 4 w: rows must start 8-byte aligned
    asm = asm and a.data_ptr() % 8 == 0 and a.stride(1) % 4 == 0 and a.stride(2) == 1
    mx_gemv_kernel[(tiles, cfg.split_k)](
        a, w.qw.view(torch.int32), w.sc, bias if bias is not None else w.sc, ws, cnt, out,
        m, n, k, a.stride(1), b[0], b[1],
        HAS_BIAS=bias is not None, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k, ASM=asm, U=cfg.unroll, BF16=a.dtype == torch.bfloat16,
        PF=cfg.prefetch, EVEN_K=k % 64 == 0, num_warps=cfg.num_warps, num_stages=1,
    )  # fmt: skip
    return out
