"""Host side of the tile GEMMs: W4A16 and W4A8 / W5A8 group GEMMs on the prologues' outputs, with
their launch configurations (`pick_config`, `pick_config_a8`).

Decode (M <= 16): one 16-row tile and split-K, because the weights alone are the traffic; mid
(M <= MID_MAX_M): 64-row tiles and split-K until the tiles cover the SMs; prefill: square-ish
tiles. gfx1201's 64 KB LDS caps the tile and the stages there.
"""

from __future__ import annotations

from math import gcd

import torch

from . import launch, prologue
from .gemm_kernels import w4a8_gemm_kernel, w4a16_gemm_kernel
from .weights import Prepared

# Decode GEMM picks (H200 sweep, docs/notebook/kernels-2026-11-29-to-12-06.md). The Givens prologue
# serves M <= GIVENS_MAX_M: 0, because on the H200 (2026-11-29) it took 5.2-5.7 us against the
# blocks' 3.4-4.9 us at decode (8 dependent in-register gathers: latency, not bytes), which its
# saved memset does not repay.
DECODE_BLOCK_N = 128


DECODE_PROGRAMS_PER_SM = 8


DECODE_ROWSUM = True


def pick_config(
    m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int = 132, hip: bool = False
) -> launch.Config:
    """Launch configuration for an [M, K] x [K, N] GEMM with partition boundaries `bounds`.

    Decode (M <= 16): one 16-row tile and split-K (`_decode_config`), because the weights alone
    are the traffic. Above: square-ish tiles; gfx1201's 64 KB LDS caps the tile and the stages.
    """
    align = 0
    for b in bounds:
        align = gcd(align, b)
    if m <= launch.DECODE_MAX_M and not hip:
        return _decode_config(n, k, g, align, sms)
    bn_max = 64 if m <= launch.DECODE_MAX_M else 128
    block_n = launch.fit_block_n(bn_max, align)
    if m <= launch.DECODE_MAX_M:
        tiles = -(-n // block_n)
        split = max(1, min(k // g, -(-2 * sms // tiles)))
        return launch.Config(16, block_n, split, 4, 2)
    if hip:
        # gfx1201 (AOT report): a 64x128 fp32 tile spills at G=128 even with 8 waves.
        return launch.Config(64, min(block_n, 64), 1, 8, 2)
    if m <= launch.MID_MAX_M:
        tiles = -(-m // 64) * -(-n // block_n)
        split = max(1, min(k // g // 4, -(-sms // tiles)))
        return launch.Config(64, block_n, split, 4, 3)
    return launch.Config(128, block_n, 1, 8, 3)


def _decode_config(n: int, k: int, g: int, align: int, sms: int) -> launch.Config:
    """Decode (M <= 16) on NVIDIA: the weights are the traffic and the unpack the ALU work.

    H200 sweep (docs/notebook/kernels-2026-11-29-to-12-06.md): 128-wide tiles, the zero point as the
    row-sum correction and split-K until about 8 programs per SM are in flight (enough loads in
    flight to cover DRAM latency); splits of fewer than 2 groups lose to the atomics.
    """
    block_n = launch.fit_block_n(DECODE_BLOCK_N, align or DECODE_BLOCK_N)
    tiles = -(-n // block_n)
    ngroups = k // g
    split = max(1, min(ngroups // 2, -(-DECODE_PROGRAMS_PER_SM * sms // tiles)))
    per = -(-ngroups // split)
    return launch.Config(
        16, block_n, -(-ngroups // per), 4, 4, rowsum=DECODE_ROWSUM, planes=g == 128
    )


def w4a16_gemm(
    xr: torch.Tensor,
    rs: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: launch.Config | None = None,
    zp_rowsum: bool = False,
    workspace: torch.Tensor | None = None,
) -> torch.Tensor:
    """The group GEMM on prologue outputs: xr [P, M, K] fp16, rs [P, M, K/G] -> y [M, N].

    `workspace`: an [M, N] fp32 buffer already zeroed (by the Givens prologue) for split-K.
    """

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    _, m, k = xr.shape
    n = qweight.shape[1]
    cfg = config or pick_config(m, n, k, group_size, bounds, launch.sm_count(xr.device))
    b = (*bounds, n, n)[:2]
    ticket = cfg.split_k > 1 and workspace is None
    if ticket:
        tiles = launch.triton_cdiv(m, cfg.block_m) * launch.triton_cdiv(n, cfg.block_n)
        out = launch.scratch("gemv_ws", m * n, torch.float32, xr.device)
        cnt = launch.scratch("gemv_cnt", tiles, torch.int32, xr.device)
        fin = torch.empty(m, n, dtype=out_dtype, device=xr.device)
        grid = (tiles, cfg.split_k)
    else:
        out, grid = launch.gemm_out_grid(m, n, cfg, out_dtype, xr.device, workspace)
        fin = cnt = out
    w4a16_gemm_kernel[grid](
        xr, rs, qweight, scales, zeros, bias if bias is not None else scales, out, fin, cnt,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None and (cfg.split_k == 1 or ticket), G=group_size,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLIT_K=cfg.split_k, GROUP_M=cfg.group_m,
        ZP_ROWSUM=zp_rowsum or cfg.rowsum, PLANES=cfg.planes and group_size == 128,
        TICKET=ticket, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if ticket:
        return fin
    if cfg.split_k > 1:
        if bias is not None:
            out += bias.to(torch.float32)
        return out.to(out_dtype)
    return out


def pick_config_a8(
    m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int = 132, hip: bool = False,
    bits: int = 4,
) -> launch.Config:  # fmt: skip
    """Launch configuration of the W4A8 GEMM (1-byte activations: twice the K per byte of A).

    Decode (M <= 16): the W4A16 decode rule (128-wide tiles, split-K to ~8 programs per SM).
    gfx1201: 64 x 64 tiles, 8 waves (its 64 KB LDS and 256 VGPRs; see the AOT report); int5's
    bit-plane unpack spills there at 64 columns, so 32.
    """
    align = 0
    for b in bounds:
        align = gcd(align, b)
    if hip:
        block_n = launch.fit_block_n(32 if bits == 5 else 64, align)
        if m <= launch.DECODE_MAX_M:
            tiles = -(-n // block_n)
            split = max(1, min(k // g // 2, -(-2 * sms // tiles)))
            per = -(-(k // g) // split)
            return launch.Config(16, block_n, -(-(k // g) // per), 4, 2)
        return launch.Config(64, block_n, 1, 8, 2)
    if m <= launch.DECODE_MAX_M:
        c = _decode_config(n, k, g, align, sms)
        return launch.Config(16, c.block_n, c.split_k, 4, 4)
    block_n = launch.fit_block_n(128, align)
    if m <= launch.MID_MAX_M:
        # 64-row tiles and split-K until the tiles cover the SMs: at M = 128 the 128-row tile
        # gave 40 programs on down_proj (H200 2026-11-29: 213 us, 0.14x cuBLAS).
        tiles = -(-m // 64) * -(-n // block_n)
        split = max(1, min(k // g // 4, -(-sms // tiles)))
        per = -(-(k // g) // split)
        return launch.Config(64, block_n, -(-(k // g) // per), 4, 3)
    # Prefill: 64 x 128, 4 warps, 4 stages was the fastest of six tiles in the H200 sweep
    # (2026-11-29, qkv M = 2048, GEMM alone: fp8 576 us vs 821 at 128 x 128 / 8 warps, int8 662
    # vs 793; 128 x 256 and 256 x 128 were slower still): the per-group fold serializes each
    # group's product, so more tiles in flight beat bigger tiles.
    return launch.Config(64, block_n, 1, 4, 4)


def a16(code_dtype: torch.dtype, cfg: launch.Config, hip: bool) -> bool:
    """fp8 activations upcast to fp16 for the dot: NVIDIA below 64-row tiles (kernel doc)."""
    return code_dtype == torch.float8_e4m3fn and not hip and cfg.block_m < 64


def w4a8_gemm(
    q: torch.Tensor,
    asc: torch.Tensor,
    rs: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: launch.Config | None = None,
    token: bool = False,
    zp_epilogue: bool = False,
) -> torch.Tensor:
    """The W4A8 (W5A8 with `w.qweight_hi`) group GEMM on `rotate_quant` outputs -> y [M, N]."""

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    qweight_hi = w.qweight_hi
    _, m, k = q.shape
    n = qweight.shape[1]
    bits = 5 if qweight_hi is not None else 4
    hip = torch.version.hip is not None
    cfg = config or pick_config_a8(
        m, n, k, group_size, bounds, launch.sm_count(q.device), hip, bits
    )
    b = (*bounds, n, n)[:2]
    out, grid = launch.gemm_out_grid(m, n, cfg, out_dtype, q.device)
    w4a8_gemm_kernel[grid](
        q, asc, rs, qweight, qweight_hi if qweight_hi is not None else qweight, scales, zeros,
        bias if bias is not None else scales, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None and cfg.split_k == 1, G=group_size,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLIT_K=cfg.split_k, GROUP_M=cfg.group_m,
        INT8=q.dtype == torch.int8, BITS=bits, TOKEN=token, ZPE=zp_epilogue,
        A16=a16(q.dtype, cfg, hip), E4M3_BITS=prologue.e4m3_bits(hip),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if cfg.split_k > 1:
        if bias is not None:
            out += bias.to(torch.float32)
        return out.to(out_dtype)
    return out
