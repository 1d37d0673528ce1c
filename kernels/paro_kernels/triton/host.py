"""Host side of the Triton ParoQuant linear: load-time repack, launch configs, checked wrappers.

Shape contract of the W4A16 linear (asserted in `w4a16_linear`):

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
On NVIDIA `fast_host.a8_route` serves bands on other paths: the decode GEMV (with gv_idx /
gv_coef, the Givens layers inside it for small layers), and from M = 256 fp8 calls the 8-bit
vendor GEMM (`fast_host.w8_linear`, needing w8_amax [N] fp32 = max |W'| per output channel,
`Prepared.w8_amax`), int8 calls dequant + cuBLAS.
The prologue (`rotate_quant`) gives q [P, M, K] (torch.float8_e4m3fn or int8), scales [P, M, K/G]
fp32 (per token: the row's scale in every group) and code sums [P, M, K/G] fp32 (exact for int8).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Any

import torch

from .. import reference as ref
from .._contract import check_multiple, check_tensor, require
from ..formats import unpack_awq, unpack_bitplane

DECODE_MAX_M = 16
MID_MAX_M = 256  # up to here 64-row tiles with split-K fill the SMs (above: 128-row tiles)
# Decode GEMM picks (H200 sweep, kernels/BENCH.md). The Givens prologue serves M <= GIVENS_MAX_M:
# 0, because on the H200 (2026-11-29) it took 5.2-5.7 us against the blocks' 3.4-4.9 us at decode
# (8 dependent in-register gathers: latency, not bytes), which its saved memset does not repay.
DECODE_BLOCK_N = 128
DECODE_PROGRAMS_PER_SM = 8
DECODE_ROWSUM = True
GIVENS_MAX_M = 0
GROUP_SIZES = (64, 128)
ACT_DTYPES = (torch.bfloat16, torch.float16)
ACT_FORMATS = ("fp8", "int8")
ACT_SCALES = ("group", "token")
BITS = (4, 5)
CODE_DTYPES = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}


@dataclass(frozen=True)
class Config:
    """One launch configuration of the W4A16 GEMM."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    rowsum: bool = False  # the zero point as the row-sum correction (fewer ALU ops per weight)
    planes: bool = False  # G = 128 only: 8 K=16 dots per group on the packed words, no reshape


@dataclass(frozen=True)
class Prepared:
    """A layer repacked once at load for the Triton kernels (the contract's tensors)."""

    rot_hi: torch.Tensor
    rot_lo: torch.Tensor
    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    bounds: tuple[int, ...]
    group_size: int
    gv_idx: torch.Tensor | None = None
    gv_coef: torch.Tensor | None = None
    bits: int = 4
    qweight_hi: torch.Tensor | None = None  # bits=5: [K/32, N] int32 fifth-bit planes
    w8_amax: torch.Tensor | None = None  # [N] fp32 max |W'| per output channel (W4A8 prefill)


# --------------------------------------------------------------------------- load-time repack


def pack_k(codes: torch.Tensor) -> torch.Tensor:
    """Codes [K, N] 0..15 -> [K/8, N] int32 packed along K (nibble s of word r = row 8r + s)."""
    check_tensor(codes, "codes", ndim=2)
    check_multiple(codes.shape[0], 8, "codes.shape[0] (K)")
    k, n = codes.shape
    c = codes.to(torch.int64).view(k // 8, 8, n)
    shifts = (torch.arange(8, dtype=torch.int64, device=codes.device) * 4).view(1, 8, 1)
    words = (c << shifts).sum(1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_k_bits(bits: torch.Tensor) -> torch.Tensor:
    """Fifth bits [K, N] 0/1 -> [K/32, N] int32 packed along K (bit s of word r = row 32r + s)."""
    check_tensor(bits, "bits", ndim=2)
    check_multiple(bits.shape[0], 32, "bits.shape[0] (K)")
    k, n = bits.shape
    b = bits.to(torch.int64).view(k // 32, 32, n)
    shifts = torch.arange(32, dtype=torch.int64, device=bits.device).view(1, 32, 1)
    words = (b << shifts).sum(1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def repack_int5_hi(
    qweight_hi: torch.Tensor, qzeros_hi: torch.Tensor, k: int, n: int, group_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checkpoint planes qweight_hi [K, N/32] / qzeros_hi [K/G, N/32] -> (K-packed [K/32, N]
    planes, zero fifth bits [K/G, N] as uint8 << 4): the GEMM reads 32 rows' bits per word."""
    check_multiple(n, 32, "N (output features) for bits=5")
    check_tensor(qweight_hi, "qweight_hi", dtype=torch.int32, shape=[k, n // 32])
    check_tensor(qzeros_hi, "qzeros_hi", dtype=torch.int32, shape=[k // group_size, n // 32])
    wb = unpack_bitplane(qweight_hi, "qweight_hi")
    zb = unpack_bitplane(qzeros_hi, "qzeros_hi")
    return pack_k_bits(wb).contiguous(), (zb << 4).to(torch.uint8)


def repack_awq(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AWQ qweight [K, N/8] / qzeros [K/G, N/8] / scales [K/G, N] -> the kernel's three tensors."""
    codes = unpack_awq(qweight, "qweight")
    k, n = codes.shape
    check_multiple(k, group_size, f"K for group_size={group_size}")
    check_tensor(qzeros, "qzeros", dtype=torch.int32, shape=[k // group_size, n // 8])
    check_tensor(scales, "scales", shape=[k // group_size, n])
    zeros = unpack_awq(qzeros, "qzeros").to(torch.uint8).contiguous()
    return pack_k(codes).contiguous(), scales.to(torch.float16).contiguous(), zeros


def rotation_blocks(
    pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """diag(cs_g) R_g^T per group, [K/G, G, G] fp64 (rows of the identity, rotated).

    Contract: pairs [krot, K] int16, theta [krot, K/2], channel_scales [1, K]; K % G == 0.
    """
    k, g = pairs.shape[1], group_size
    # Rotation is group-local: rotating e_i placed in every group yields row i of every R_g^T.
    eye = torch.eye(g, dtype=torch.float64).repeat(1, k // g)
    rt = ref.rotate(eye, pairs.cpu(), theta.cpu(), g).view(g, k // g, g).permute(1, 0, 2)
    return rt * channel_scales.cpu().to(torch.float64).view(k // g, g, 1)


def split_hi_lo(rot: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """rot (fp64) = hi + lo in `dtype`, each exact: two dots reproduce rot to ~16 bits."""
    hi = rot.to(dtype)
    return hi.contiguous(), (rot - hi.to(torch.float64)).to(dtype).contiguous()


def givens_tables(
    runs: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]], group_size: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(gv_idx [P, krot, K] int32, gv_coef [P, 2krot+1, K] fp32) for the Givens prologue.

    None when the runs differ in krot (they cannot stack); the blocks then serve every M.
    """
    if len({int(r[2].shape[0]) for r in runs}) != 1:
        return None
    idxs, coefs = [], []
    for _, _, pairs, theta, cs in runs:
        krot, k = pairs.shape
        ref.check_rotation(pairs.cpu(), theta.cpu(), k, group_size)
        a, b = ref.pair_indices(pairs.cpu(), group_size)
        t = theta.cpu().to(torch.float64)
        idx = torch.empty(krot, k, dtype=torch.int64)
        idx.scatter_(1, a, b % group_size)
        idx.scatter_(1, b, a % group_size)
        cos = torch.empty(krot, k, dtype=torch.float64)
        sin = torch.empty_like(cos)
        cos.scatter_(1, a, torch.cos(t))
        cos.scatter_(1, b, torch.cos(t))
        sin.scatter_(1, a, torch.sin(t))
        sin.scatter_(1, b, -torch.sin(t))
        idxs.append(idx.to(torch.int32))
        coefs.append(torch.cat([cs.cpu().to(torch.float64).view(1, k), cos, sin]).float())
    return torch.stack(idxs).contiguous(), torch.stack(coefs).contiguous()


def prepare(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    runs: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]],
    group_size: int,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    bits: int = 4,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> Prepared:
    """Repack a checkpoint layer once; runs = (n0, n1, pairs, theta, cs) per rotation run.

    bits=5 takes the checkpoint's fifth-bit planes (qweight_hi [K, N/32], qzeros_hi [K/G, N/32])
    and keeps 5 bits per weight: the low nibbles in the int4 layout plus a K-packed bit plane.
    """
    require(group_size in GROUP_SIZES, "group_size", GROUP_SIZES, group_size)
    require(dtype in ACT_DTYPES, "dtype", ACT_DTYPES, dtype)
    require(bits in BITS, "bits", BITS, bits)
    require(1 <= len(runs) <= 3, "rotation runs", "1..3 distinct rotations", len(runs))
    dev = qweight.device if device is None else torch.device(device)
    qw, sc, zp = repack_awq(qweight.cpu(), qzeros.cpu(), scales.cpu(), group_size)
    qh = None
    if bits == 5:
        require(qweight_hi is not None and qzeros_hi is not None, "qweight_hi/qzeros_hi",
                "both set for bits=5", "missing")  # fmt: skip
        assert qweight_hi is not None and qzeros_hi is not None
        k, n = qw.shape[0] * 8, qw.shape[1]
        qh, zhi = repack_int5_hi(qweight_hi.cpu(), qzeros_hi.cpu(), k, n, group_size)
        zp = zp | zhi
    else:
        require(qweight_hi is None and qzeros_hi is None, "qweight_hi/qzeros_hi",
                "None for bits=4", "set")  # fmt: skip
    rots = torch.stack([rotation_blocks(p, t, cs, group_size) for _, _, p, t, cs in runs])
    hi, lo = split_hi_lo(rots, dtype)
    gv = givens_tables(runs, group_size)
    from . import fast_host

    bounds = tuple(n0 for n0, _, _, _, _ in runs[1:])
    hi, lo, qw, sc, zp = hi.to(dev), lo.to(dev), qw.to(dev), sc.to(dev), zp.to(dev)
    qh = None if qh is None else qh.to(dev)
    return Prepared(
        hi,
        lo,
        qw,
        sc,
        zp,
        bounds,
        group_size,
        None if gv is None else gv[0].to(dev),
        None if gv is None else gv[1].to(dev),
        bits,
        qh,
        fast_host.w8_amax(qw, qh, sc, zp, hi, lo, bounds, group_size),
    )


# --------------------------------------------------------------------------- configs


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (CUs) of device; the H200's 132 where there is no GPU (AOT)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def pick_config(
    m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int = 132, hip: bool = False
) -> Config:
    """Launch configuration for an [M, K] x [K, N] GEMM with partition boundaries `bounds`.

    Decode (M <= 16): one 16-row tile and split-K (`_decode_config`), because the weights alone
    are the traffic. Above: square-ish tiles; gfx1201's 64 KB LDS caps the tile and the stages.
    """
    align = 0
    for b in bounds:
        align = gcd(align, b)
    if m <= DECODE_MAX_M and not hip:
        return _decode_config(n, k, g, align, sms)
    bn_max = 64 if m <= DECODE_MAX_M else 128
    block_n = _block_n(bn_max, align)
    if m <= DECODE_MAX_M:
        tiles = -(-n // block_n)
        split = max(1, min(k // g, -(-2 * sms // tiles)))
        return Config(16, block_n, split, 4, 2)
    if hip:
        # gfx1201 (AOT report): a 64x128 fp32 tile spills at G=128 even with 8 waves.
        return Config(64, min(block_n, 64), 1, 8, 2)
    if m <= MID_MAX_M:
        tiles = -(-m // 64) * -(-n // block_n)
        split = max(1, min(k // g // 4, -(-sms // tiles)))
        return Config(64, block_n, split, 4, 3)
    return Config(128, block_n, 1, 8, 3)


def _block_n(bn_max: int, align: int) -> int:
    """Widest tile <= bn_max dividing every partition boundary (blocks never straddle one)."""
    block_n = next((b for b in (256, 128, 64, 32, 16) if b <= bn_max and align % b == 0), 0)
    require(block_n > 0, "partition boundaries", "multiples of 16", align)
    return block_n


def _decode_config(n: int, k: int, g: int, align: int, sms: int) -> Config:
    """Decode (M <= 16) on NVIDIA: the weights are the traffic and the unpack the ALU work.

    H200 sweep (kernels/BENCH.md): 128-wide tiles, the zero point as the row-sum correction and
    split-K until about 8 programs per SM are in flight (enough loads in flight to cover DRAM
    latency); splits of fewer than 2 groups lose to the atomics.
    """
    block_n = _block_n(DECODE_BLOCK_N, align or DECODE_BLOCK_N)
    tiles = -(-n // block_n)
    ngroups = k // g
    split = max(1, min(ngroups // 2, -(-DECODE_PROGRAMS_PER_SM * sms // tiles)))
    per = -(-ngroups // split)
    return Config(16, block_n, -(-ngroups // per), 4, 4, rowsum=DECODE_ROWSUM, planes=g == 128)


# --------------------------------------------------------------------------- launches


PROLOGUE_WIDE_M = 256


def prologue_block_m(m: int, token: bool = False, hip: bool | None = None) -> int:
    """Rows per prologue program (see `prologue_warps`).

    Every program reads its groups' G x G blocks (hi + lo: 64 KB at G = 128) from L2, so the
    rows per program set the block traffic: at 32 rows, M = 2048 on qkv read ~0.5 GB of blocks
    (H200 2026-11-29: 124-162 us, 9-17% of HBM). On NVIDIA, 128 rows from M >= 256 (8 warps, no
    spills in the sm_90 build). gfx1201: 32, because 64 spills there (AOT report); per token 32
    as well, on `prologue_cols`' column slices (the whole-block form spilled at 16 rows).
    """
    hip = _is_hip() if hip is None else hip
    if m <= DECODE_MAX_M:
        return 16
    if token:
        return 32 if hip or m >= 2048 else 16
    return 128 if not hip and m >= PROLOGUE_WIDE_M else 32


# gfx1201's per-token prologue walks each group's rotation PROLOGUE_TOKEN_COLS output columns at a
# time (`rotate_quant_kernel`'s COLS). AOT report, Triton 3.9, bf16, G = 128 (2026-12-05): the
# whole [G, G] block pair at 16 rows x 4 waves took 256 VGPRs and spilled 2 (12 B of scratch; 8
# waves spilled 9); 32 columns at 32 rows x 8 waves take 184 VGPRs, no spills (8 waves per SIMD),
# at 16 rows 190. 64 columns spilled at 4 waves and took 237 VGPRs at 8; 32 rows x 16 columns
# 178. The slices' loop is a runtime one: unrolled, the compiler hoisted every slice's loads
# and spilled 100-360 VGPRs. Not timed on the box. NVIDIA keeps the whole block (0).
PROLOGUE_TOKEN_COLS = 32


def prologue_cols(token: bool, group_size: int, hip: bool | None = None) -> int:
    """Output columns of the rotation a per-token prologue program takes at a time; 0 = all G."""
    hip = _is_hip() if hip is None else hip
    return min(PROLOGUE_TOKEN_COLS, group_size) if token and hip else 0


def prologue_warps(block_m: int, cols: int = 0) -> int:
    """8 warps for the 128-row tile (its fp32 accumulator) and for the column-sliced per-token
    form (`prologue_cols`), else 4."""
    return 8 if block_m >= 128 or cols else 4


def _is_hip() -> bool:
    return torch.version.hip is not None


def _interpreted() -> bool:
    """Kernels run under the Triton interpreter (TRITON_INTERPRET=1): no inline assembly."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def rotate_scale(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    group_size: int,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    nibble_scaled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused rotate + channel-scale prologue: x [M, K] -> (xr [P, M, K] fp16, rs [P, M, K/G]).

    With the Givens tables it applies the pair rotations (and zeroes `workspace` on the way);
    otherwise the folded blocks (and `workspace` must be None). `nibble_scaled` (blocks only):
    xr fp32 with each channel times its nibble's 2^-e (the issue-14 GEMV's input).
    """
    from .kernels import givens_rotate_kernel, rotate_scale_kernel

    m, k = x.shape
    p, g = rot_hi.shape[0], group_size
    xr = torch.empty(p, m, k, dtype=torch.float32 if nibble_scaled else torch.float16,
                     device=x.device)  # fmt: skip
    rs = torch.empty(p, m, k // g, dtype=torch.float32, device=x.device)
    block_m = prologue_block_m(m)
    grid = (triton_cdiv(m, block_m), k // g, p)
    if gv_idx is not None and gv_coef is not None:
        require(not nibble_scaled, "nibble_scaled", "False with the Givens tables", True)
        nprog = grid[0] * grid[1] * grid[2]
        numel = 0 if workspace is None else workspace.numel()
        zb = 0 if numel == 0 else max(16, 1 << (triton_cdiv(numel, nprog) - 1).bit_length())
        givens_rotate_kernel[grid](
            x, gv_idx, gv_coef, xr, rs, workspace if workspace is not None else rs,
            m, k, x.stride(0), numel,
            KROT=gv_idx.shape[1], G=g, BLOCK_M=block_m, ZERO_BLOCK=zb, num_warps=4,
        )  # fmt: skip
        return xr, rs
    require(workspace is None, "workspace", "None without the Givens tables", "a tensor")
    rotate_scale_kernel[grid](
        x, rot_hi, rot_lo, xr, rs, m, k, x.stride(0), G=g, BLOCK_M=block_m,
        NIBBLE_SCALED=nibble_scaled, num_warps=prologue_warps(block_m),
    )  # fmt: skip
    return xr, rs


def triton_cdiv(a: int, b: int) -> int:
    """Ceiling division for grid sizes."""
    return -(-a // b)


def gemm_out_grid(
    m: int,
    n: int,
    cfg: Any,
    out_dtype: torch.dtype,
    device: torch.device,
    workspace: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[int, int]]:
    """The GEMMs' output and grid (cfg: any launch config with block_m, block_n, split_k).

    With split-K the splits add fp32 atomically into a zeroed workspace (cast afterwards; the
    caller's, e.g. zeroed by the Givens prologue, or a fresh one), else each tile stores out_dtype
    once; one program per tile per split (the kernels' `gemm_tile` maps it).
    """
    if cfg.split_k > 1:
        out = workspace
        if out is None:
            out = torch.zeros(m, n, dtype=torch.float32, device=device)
    else:
        out = torch.empty(m, n, dtype=out_dtype, device=device)
    return out, (triton_cdiv(m, cfg.block_m) * triton_cdiv(n, cfg.block_n), cfg.split_k)


def w4a16_gemm(
    xr: torch.Tensor,
    rs: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: Config | None = None,
    zp_rowsum: bool = False,
    workspace: torch.Tensor | None = None,
) -> torch.Tensor:
    """The group GEMM on prologue outputs: xr [P, M, K] fp16, rs [P, M, K/G] -> y [M, N].

    `workspace`: an [M, N] fp32 buffer already zeroed (by the Givens prologue) for split-K.
    """
    from .kernels import w4a16_gemm_kernel

    _, m, k = xr.shape
    n = qweight.shape[1]
    cfg = config or pick_config(m, n, k, group_size, bounds, sm_count(xr.device))
    b = (*bounds, n, n)[:2]
    ticket = cfg.split_k > 1 and workspace is None
    if ticket:
        from . import fast_host

        tiles = triton_cdiv(m, cfg.block_m) * triton_cdiv(n, cfg.block_n)
        out = fast_host._scratch("gemv_ws", m * n, torch.float32, xr.device)
        cnt = fast_host._scratch("gemv_cnt", tiles, torch.int32, xr.device)
        fin = torch.empty(m, n, dtype=out_dtype, device=xr.device)
        grid = (tiles, cfg.split_k)
    else:
        out, grid = gemm_out_grid(m, n, cfg, out_dtype, xr.device, workspace)
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


def check_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
) -> None:
    """Assert the module docstring's shape/dtype contract."""
    g = group_size
    require(g in GROUP_SIZES, "group_size", GROUP_SIZES, g)
    check_tensor(x, "x", dtype=ACT_DTYPES, ndim=2)
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
    """y = ((x * cs_p) R_p^T) dequant(Q)^T (+ bias) per column run p; contract in module doc.

    `path` ("gemv" | "gemv-h2" | "gemv-mma" | "gemv3" | "mma" | "dequant")
    overrides the M-band dispatch of `fast_host.band` and `fast_host.mma_gemv_ok`
    ("gemv-h2": the HFMA2 GEMV with its prologue, "gemv-mma": the twelfth pass's mma.sync
    GEMV).
    """
    from . import fast_host

    check_linear(
        x, rot_hi, rot_lo, qweight, scales, zeros, bounds, group_size, bias, gv_idx, gv_coef
    )
    m, k = x.shape
    n = qweight.shape[1]
    route = path or fast_host.band(m, group_size)
    if path is None and fast_host.mma_gemv_ok(_is_hip(), m, group_size, bounds):
        route = "gemv-mma"
    if route == "gemv3" and group_size != 128:
        route = "mma"  # the matrix-unit GEMV needs G = 128
    if route == "gemv":
        args = (rot_hi, rot_lo, qweight, scales, zeros, gv_idx, gv_coef)
        return fast_host.gemv_w4a16(args, x, bounds, group_size, bias)
    if route == "gemv-h2":
        from . import decode_host

        return decode_host.gemv_h2_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                          group_size, bias, gv=(gv_idx, gv_coef))  # fmt: skip
    if route == "gemv3":
        from . import decode_host

        return decode_host.gemv3_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                        group_size, bias, gv_idx, gv_coef)  # fmt: skip
    if route == "gemv-mma":
        from . import decode_host

        return decode_host.gemv_mma_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                           group_size, bias, gv=(gv_idx, gv_coef))  # fmt: skip
    if route == "dequant":
        w = fast_host.dequant_rotate(
            qweight, None, scales, zeros, rot_hi, rot_lo, bounds, group_size, dtype=x.dtype
        )
        return fast_host.dequant_linear(x, w, bias)
    cfg = pick_config(m, n, k, group_size, bounds, sm_count(x.device))
    if m > givens_max_m:
        gv_idx = gv_coef = None
    ws = None
    if gv_idx is not None and cfg.split_k > 1:
        ws = torch.empty(m, n, dtype=torch.float32, device=x.device)  # zeroed by the prologue
    xr, rs = rotate_scale(x, rot_hi, rot_lo, group_size, gv_idx, gv_coef, ws)
    return w4a16_gemm(
        xr, rs, qweight, scales, zeros, bounds, group_size, x.dtype, bias, cfg, workspace=ws
    )


def linear(prep: Prepared, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`w4a16_linear` on a `Prepared` layer (int4 only: W5A16 has no kernel)."""
    require(prep.bits == 4, "prep.bits", "4 for bf16/fp16 activations (W4A16)", prep.bits)
    return w4a16_linear(
        x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales, prep.zeros, prep.bounds,
        prep.group_size, bias, prep.gv_idx, prep.gv_coef,
    )  # fmt: skip


# --------------------------------------------------------------------------- W4A8 / W5A8


def pick_config_a8(
    m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int = 132, hip: bool = False,
    bits: int = 4,
) -> Config:  # fmt: skip
    """Launch configuration of the W4A8 GEMM (1-byte activations: twice the K per byte of A).

    Decode (M <= 16): the W4A16 decode rule (128-wide tiles, split-K to ~8 programs per SM).
    gfx1201: 64 x 64 tiles, 8 waves (its 64 KB LDS and 256 VGPRs; see the AOT report); int5's
    bit-plane unpack spills there at 64 columns, so 32.
    """
    align = 0
    for b in bounds:
        align = gcd(align, b)
    if hip:
        block_n = _block_n(32 if bits == 5 else 64, align)
        if m <= DECODE_MAX_M:
            tiles = -(-n // block_n)
            split = max(1, min(k // g // 2, -(-2 * sms // tiles)))
            per = -(-(k // g) // split)
            return Config(16, block_n, -(-(k // g) // per), 4, 2)
        return Config(64, block_n, 1, 8, 2)
    if m <= DECODE_MAX_M:
        c = _decode_config(n, k, g, align, sms)
        return Config(16, c.block_n, c.split_k, 4, 4)
    block_n = _block_n(128, align)
    if m <= MID_MAX_M:
        # 64-row tiles and split-K until the tiles cover the SMs: at M = 128 the 128-row tile
        # gave 40 programs on down_proj (H200 2026-11-29: 213 us, 0.14x cuBLAS).
        tiles = -(-m // 64) * -(-n // block_n)
        split = max(1, min(k // g // 4, -(-sms // tiles)))
        per = -(-(k // g) // split)
        return Config(64, block_n, -(-(k // g) // per), 4, 3)
    # Prefill: 64 x 128, 4 warps, 4 stages was the fastest of six tiles in the H200 sweep
    # (2026-11-29, qkv M = 2048, GEMM alone: fp8 576 us vs 821 at 128 x 128 / 8 warps, int8 662
    # vs 793; 128 x 256 and 256 x 128 were slower still): the per-group fold serializes each
    # group's product, so more tiles in flight beat bigger tiles.
    return Config(64, block_n, 1, 4, 4)


def rotate_quant(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    group_size: int,
    act_format: str,
    act_scale: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused rotate + channel-scale + quantize, one launch: x [M, K] -> (q, scales, code sums).

    q [P, M, K] e4m3/int8, scales and code sums [P, M, K/G] fp32 (contract in the module doc).
    """
    from .kernels import rotate_quant_kernel

    require(act_format in ACT_FORMATS, "act_format", ACT_FORMATS, act_format)
    require(act_scale in ACT_SCALES, "act_scale", ACT_SCALES, act_scale)
    m, k = x.shape
    p, g = rot_hi.shape[0], group_size
    q = torch.empty(p, m, k, dtype=CODE_DTYPES[act_format], device=x.device)
    asc = torch.empty(p, m, k // g, dtype=torch.float32, device=x.device)
    rs = torch.empty_like(asc)
    token = act_scale == "token"
    block_m = prologue_block_m(m, token)
    cols = prologue_cols(token, g)
    grid = (triton_cdiv(m, block_m), 1 if token else k // g, p)
    rotate_quant_kernel[grid](
        x, rot_hi, rot_lo, q, asc, rs, m, k, x.stride(0),
        G=g, BLOCK_M=block_m, INT8=act_format == "int8", TOKEN=token, COLS=cols,
        E4M3_BITS=act_format == "fp8" and e4m3_bits(_is_hip()),
        num_warps=prologue_warps(block_m, cols),
    )  # fmt: skip
    return q, asc, rs


# The fp8 kernels build their e4m3 bytes with integer ops where Triton converts to e4m3 in
# software (gfx1201: ~33 instructions a value); NVIDIA keeps the hardware cvt (one PTX cvt per
# two values). The W4A8 GEMM's weights (`_e4m3_exact`, twentieth pass: 7291 -> 3752
# instructions in the 27B qkv decode build) and the activation quantizers' rounded codes
# (`_e4m3_from_grid`: `rotate_quant_kernel`, `fp8_token_quant_kernel`, twenty-first pass).
# The AMDGCN of the loops, not a timing: the box has not run either form.
E4M3_BITS_HIP = True


def e4m3_bits(hip: bool) -> bool:
    """Whether the fp8 kernels build their e4m3 bytes from bits (gfx1201) or convert."""
    return hip and E4M3_BITS_HIP


def a16(code_dtype: torch.dtype, cfg: Config, hip: bool) -> bool:
    """fp8 activations upcast to fp16 for the dot: NVIDIA below 64-row tiles (kernel doc)."""
    return code_dtype == torch.float8_e4m3fn and not hip and cfg.block_m < 64


def w4a8_gemm(
    q: torch.Tensor,
    asc: torch.Tensor,
    rs: torch.Tensor,
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: Config | None = None,
    token: bool = False,
    zp_epilogue: bool = False,
) -> torch.Tensor:
    """The W4A8 (W5A8 with qweight_hi) group GEMM on `rotate_quant` outputs -> y [M, N]."""
    from .kernels import w4a8_gemm_kernel

    _, m, k = q.shape
    n = qweight.shape[1]
    bits = 5 if qweight_hi is not None else 4
    hip = torch.version.hip is not None
    cfg = config or pick_config_a8(m, n, k, group_size, bounds, sm_count(q.device), hip, bits)
    b = (*bounds, n, n)[:2]
    out, grid = gemm_out_grid(m, n, cfg, out_dtype, q.device)
    w4a8_gemm_kernel[grid](
        q, asc, rs, qweight, qweight_hi if qweight_hi is not None else qweight, scales, zeros,
        bias if bias is not None else scales, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None and cfg.split_k == 1, G=group_size,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLIT_K=cfg.split_k, GROUP_M=cfg.group_m,
        INT8=q.dtype == torch.int8, BITS=bits, TOKEN=token, ZPE=zp_epilogue,
        A16=a16(q.dtype, cfg, hip), E4M3_BITS=e4m3_bits(hip),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if cfg.split_k > 1:
        if bias is not None:
            out += bias.to(torch.float32)
        return out.to(out_dtype)
    return out


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
    """y = act_quant((x * cs_p) R_p^T) dequant(Q)^T (+ bias) per run; contract in module doc.

    Two launches (+ a memset and cast under split-K): the fused prologue and the group GEMM;
    on NVIDIA the bands of `fast_host.a8_route` take the 16-bit-activation paths instead (the
    same weight tensors: no activation quantization there).
    """
    check_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds, group_size, bias, gv_idx,
                 gv_coef)  # fmt: skip
    require(act_format in ACT_FORMATS, "act_format", ACT_FORMATS, act_format)
    require(act_scale in ACT_SCALES, "act_scale", ACT_SCALES, act_scale)
    k, n = x.shape[1], qweight.shape[1]
    if qweight_hi is not None:
        check_multiple(k, 32, "K (x.shape[1]) for bits=5")
        check_tensor(qweight_hi, "qweight_hi", dtype=torch.int32, shape=[k // 32, n])
        require(qweight_hi.device == x.device and qweight_hi.is_contiguous(), "qweight_hi",
                "contiguous on x's device", qweight_hi.device)  # fmt: skip
    from . import fast_host

    route = fast_host.a8_route(x.shape[0], group_size, qweight_hi is not None, _is_hip(),
                               act_format, bounds)  # fmt: skip
    if route == "gemv-mma":
        from . import decode_host

        return decode_host.gemv_mma_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                           group_size, bias, gv=(gv_idx, gv_coef),
                                           qweight_hi=qweight_hi)  # fmt: skip
    if route == "gemv":
        args = (rot_hi, rot_lo, qweight, scales, zeros, gv_idx, gv_coef)
        return fast_host.gemv_w4a16(args, x, bounds, group_size, bias)
    if route == "gemv-h2":
        from . import decode_host

        return decode_host.gemv_h2_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                          group_size, bias, qweight_hi=qweight_hi,
                                          gv=(gv_idx, gv_coef))  # fmt: skip
    if route == "gemv3":
        from . import decode_host

        return decode_host.gemv3_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,
                                        group_size, bias, gv_idx, gv_coef,
                                        qweight_hi=qweight_hi)  # fmt: skip
    if route == "w8" and w8_amax is not None and fast_host.w8_ok(n, k, fast_host.W8_KIND):
        return fast_host.w8_linear(x, qweight, qweight_hi, scales, zeros, rot_hi, rot_lo, bounds,
                                   group_size, w8_amax, bias)  # fmt: skip
    if route in ("dequant", "w8"):
        w = fast_host.dequant_rotate(qweight, qweight_hi, scales, zeros, rot_hi, rot_lo, bounds,
                                     group_size, dtype=x.dtype)  # fmt: skip
        return fast_host.dequant_linear(x, w, bias)
    q, asc, rs = rotate_quant(x, rot_hi, rot_lo, group_size, act_format, act_scale)
    return w4a8_gemm(
        q, asc, rs, qweight, qweight_hi, scales, zeros, bounds, group_size, x.dtype, bias,
        token=act_scale == "token", zp_epilogue=zp_epilogue,
    )  # fmt: skip


def linear_a8(
    prep: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    act_format: str = "fp8",
    act_scale: str = "group",
    zp_epilogue: bool = False,
) -> torch.Tensor:
    """`w4a8_linear` on a `Prepared` layer (int4 or int5)."""
    return w4a8_linear(
        x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.qweight_hi, prep.scales, prep.zeros,
        prep.bounds, prep.group_size, act_format, act_scale, zp_epilogue, bias, prep.gv_idx,
        prep.gv_coef, prep.w8_amax,
    )  # fmt: skip
