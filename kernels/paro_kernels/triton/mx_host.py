"""Host side of the Triton MXFP4 linear: load-time repack, launch configs, checked wrappers.

Shape contract of the MXFP4 GEMM (asserted in `check_gemm`):

    a        [P, M, K]       fp8 e4m3 (W4A8) or bf16 / fp16 (W4A16); rows stride_am, unit along K
    a_scale  [P, M]          fp32 per-token scales (W4A8 only)
    qw       [N, Kp/2]       u8    nibble planes = whole MX blocks (mx_kernels doc), Kp = ceil64(K)
    sc       [Kp/32, N]      u8    e8m0 (zero-padded past K/32)
    cmax     [N]             int32 largest e8m0 code of each column's nonzero blocks
    bounds   P - 1 ints      first output column of planes 1.. (multiples of 16, < N)
    bias     [N] or None     any float dtype
    -> y     [M, N]          out dtype
    K % 32 == 0; N >= 1; all tensors on one device.

The checkpoint form (Quark MXFP4 / the NVFP4 requant): weight [N, K/2] u8 (low nibble = even
column), weight_scale [N, K/32] u8 e8m0; `prepare` repacks it once.

Exactness (mx_kernels doc): the folded GEMM is exact when every nonzero block of a column lies
within 11 (fp8) / 13 (fp16) / 125 (bf16) binades of the column's largest; `prepare` measures the
layer's widest column span and the launcher falls back to the per-block GEMM (exact everywhere
except e8m0 code 0 = 2^-127, flushed) when the fold would flush anything. bf16 covers every
checkpoint in practice; the fp16 limit matters only for fp16 W4A16 (the PARO prologue's output).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import gcd
from typing import Literal

import torch

from .._contract import check_multiple, check_tensor, require
from ..formats import E8M0_NAN, unpack_fp4
from . import host
from .host import gemm_out_grid, sm_count

MX_BLOCK = 32
DECODE_MAX_M = 16
DECODE_PROGRAMS_PER_SM = 8
ActMode = Literal["fp8", "a16"]
ACT_MODES: tuple[str, ...] = ("fp8", "a16")
A16_DTYPES = (torch.bfloat16, torch.float16)
# The operand kinds of `mx_gemm_kernel` (OPK) and the widest block span each folds exactly.
OPK = {torch.float8_e4m3fn: 0, torch.float16: 1, torch.bfloat16: 2}
FOLD_SPAN = {0: 11, 1: 13, 2: 125}
FOLD_CMAX_MIN = {0: 7, 1: 1, 2: 1}  # the column scale 2^(cmax - 127 - off) stays a normal fp32
QUANT_BLOCK_K = 1024
# MXFP4-PARO W4A8 prologue: the two-launch rotate_scale + fp8_quant measured faster than the
# fused host.rotate_quant on the H200 (2026-11-29, with the GEMM: qkv M=1 53 vs 230 us, M=16 54
# vs 157, M=2048 1039 vs 1246): the fused one's per-token pass is latency-bound at decode.
PARO_FUSED_PROLOGUE = False
# fp8 dots promote their accumulator into fp32 every 32 products (one MX block): exact fp32
# accumulation like gfx1201's WMMA (the wgmma default accumulates fp8 at reduced precision).
FP8_PROMOTE = 32
L2_BYTES = 60 * 2**20  # H200 L2 (50 MB) with margin: weight copies exceed it 3x in the benches


@dataclass(frozen=True)
class Config:
    """One launch configuration of the MXFP4 GEMM."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8


@dataclass(frozen=True)
class MxWeight:
    """An MXFP4 weight repacked once for the kernel (the contract's qw / sc / cmax)."""

    qw: torch.Tensor
    sc: torch.Tensor
    cmax: torch.Tensor
    k: int
    span: int  # widest (cmax - e) over nonzero blocks of any column
    cmax_min: int  # smallest cmax over columns with a nonzero block (255 when none)

    @property
    def n(self) -> int:
        """Output features."""
        return int(self.qw.shape[0])

    def fold_ok(self, opk: int) -> bool:
        """Whether the folded GEMM is exact for operand kind `opk` on this weight."""
        return self.span <= FOLD_SPAN[opk] and self.cmax_min >= FOLD_CMAX_MIN[opk]


@dataclass(frozen=True)
class Prepared:
    """An MXFP4 layer for the Triton path: weight + (MXFP4-PARO) the rotation prologue's blocks."""

    weight: MxWeight
    bounds: tuple[int, ...]  # plane boundaries: empty without rotations
    rot_hi: torch.Tensor | None = None  # [P, K/G, G, G] fp16: diag(cs_g) R_g^T, hi part
    rot_lo: torch.Tensor | None = None
    group_size: int = 0
    # the Givens records (`host.givens_tables`) for the decode prologue of the mma GEMV
    gv_idx: torch.Tensor | None = None  # [P, krot, K] int32
    gv_coef: torch.Tensor | None = None  # [P, 2 krot + 1, K] fp32


# --------------------------------------------------------------------------- load-time repack


def repack(weight: torch.Tensor, weight_scale: torch.Tensor) -> MxWeight:
    """Checkpoint weight [N, K/2] u8 + weight_scale [N, K/32] u8 -> the kernel's MxWeight."""
    check_tensor(weight, "weight", dtype=torch.uint8, ndim=2)
    n, k = weight.shape[0], 2 * weight.shape[1]
    check_multiple(k, MX_BLOCK, "K (2 * weight.shape[1])")
    check_tensor(weight_scale, "weight_scale", dtype=torch.uint8, shape=[n, k // MX_BLOCK])
    nan = int((weight_scale == E8M0_NAN).sum())
    require(nan == 0, "weight_scale", "no e8m0 NaN code (255)", f"{nan} NaN scales")
    kp = -(-k // 64) * 64
    codes = torch.zeros(n, kp, dtype=torch.uint8, device=weight.device)
    codes[:, :k] = unpack_fp4(weight)
    pairs = codes.view(n, kp // 64, 2, MX_BLOCK)
    qw = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, kp // 2)
    sc = torch.zeros(kp // MX_BLOCK, n, dtype=torch.uint8, device=weight.device)
    sc[: k // MX_BLOCK] = weight_scale.t()
    nonzero = ((codes[:, :k] & 7) != 0).view(n, k // MX_BLOCK, MX_BLOCK).any(-1)
    e = weight_scale.to(torch.int32)
    cmax = torch.where(nonzero, e, -1).amax(1).clamp(min=0)
    lo = torch.where(nonzero, e, 255).amin(1)
    has = nonzero.any(1)
    span = int((cmax - lo)[has].max()) if bool(has.any()) else 0
    cmin = int(cmax[has].min()) if bool(has.any()) else 255
    return MxWeight(qw.contiguous(), sc.contiguous(), cmax.to(torch.int32), k, span, cmin)


def prepare(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    runs: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]] | None = None,
    group_size: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> Prepared:
    """Repack once at load; runs = (n0, n1, pairs, theta, cs) per MXFP4-PARO rotation run.

    Without runs (NVFP4 -> MXFP4) the merged partitions share one activation plane, so the
    whole merged layer is one GEMM launch with no boundary constraint. `dtype` is the model's
    activation dtype: the rotation blocks are split hi + lo in it (the prologues' contract).
    """
    require(dtype in A16_DTYPES, "dtype", A16_DTYPES, dtype)
    dev = weight.device if device is None else torch.device(device)
    w = repack(weight.to(dev), weight_scale.to(dev))  # plain torch: on the GPU at load
    if not runs:
        return Prepared(w, ())
    require(1 <= len(runs) <= 3, "rotation runs", "1..3 distinct rotations", len(runs))
    check_multiple(w.k, group_size, f"K for group_size={group_size}")
    rots = torch.stack([host.rotation_blocks(p, t, cs, group_size) for _, _, p, t, cs in runs])
    hi, lo = host.split_hi_lo(rots, dtype)
    bounds = tuple(n0 for n0, _, _, _, _ in runs[1:])
    _block_n(128, _align(bounds))  # refuse unaligned boundaries at load, not at the first call
    gv = host.givens_tables(runs, group_size)
    gi, gc = (None, None) if gv is None else (gv[0].to(dev), gv[1].to(dev))
    return Prepared(w, bounds, hi.to(dev), lo.to(dev), group_size, gi, gc)


# --------------------------------------------------------------------------- configs


def _align(bounds: tuple[int, ...]) -> int:
    a = 0
    for b in bounds:
        a = gcd(a, b)
    return a


def _block_n(bn_max: int, align: int) -> int:
    """Widest tile <= bn_max dividing every plane boundary (blocks never straddle one)."""
    if align == 0:
        return bn_max
    block_n = next((b for b in (256, 128, 64, 32, 16) if b <= bn_max and align % b == 0), 0)
    require(block_n > 0, "partition boundaries", "multiples of 16", align)
    return block_n


def pick_config(
    m: int, n: int, k: int, bounds: tuple[int, ...], opk: int, sms: int = 132, hip: bool = False
) -> Config:
    """Launch configuration for [M, K] x [K, N] (operand kind opk) with plane boundaries.

    Decode (M <= 16): a 16-row tile and split-K until ~8 programs per SM are in flight (the
    weights are the traffic, as in the int4 decode GEMM; the H200 sweep found 64- and 256-wide
    tiles no better). Above: 128-row tiles on NVIDIA;
    gfx1201's 64 KB LDS and 256 VGPRs cap the tile at 64 x 64 (AOT report).
    """
    align = _align(bounds)
    if m <= DECODE_MAX_M:
        block_n = _block_n(64 if hip else 128, align)
        tiles = -(-n // block_n)
        pairs = -(-k // 64)
        split = max(1, min(pairs // 2, -(-DECODE_PROGRAMS_PER_SM * sms // tiles)))
        per = -(-pairs // split)
        return Config(16, block_n, -(-pairs // per), 4, 2 if hip else 4)
    if hip:
        # gfx1201 (AOT report): 64 x 64 with 4 waves uses 238-256 VGPRs and the per-block
        # form spills; 8 waves hold 145-185.
        return Config(64, _block_n(64, align), 1, 8, 2)
    if m <= 64:
        block_n = _block_n(128, align)
        tiles = -(-m // 64) * -(-n // block_n)
        pairs = -(-k // 64)
        split = max(1, min(pairs // 4, -(-sms // tiles)))
        return Config(64, block_n, split, 4, 4)
    # H200 sweep (2026-11-29, W4A8 M=2048): 128 x 128 with 4 warps and 4 stages beat 8 warps /
    # 3 stages by 15-21% (qkv 784 vs 923 us, gate_up 1830 vs 2212, down 977 vs 1124).
    return Config(128, _block_n(128, align), 1, 4, 4)


# --------------------------------------------------------------------------- launches


def fp8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token e4m3: x [R, K] (unit stride along K) -> (q [R, K] fp8, s [R] fp32 = amax/448)."""
    from .mx_kernels import fp8_token_quant_kernel

    check_tensor(x, "x", dtype=(torch.bfloat16, torch.float16, torch.float32), ndim=2)
    require(x.stride(1) == 1, "x", "unit stride along K", x.stride())
    r, k = x.shape
    q = torch.empty(r, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(r, dtype=torch.float32, device=x.device)
    if r:
        bk = min(QUANT_BLOCK_K, max(128, 1 << (k - 1).bit_length()))
        bits = host.e4m3_bits(host._is_hip())
        fp8_token_quant_kernel[(r,)](x, q, s, k, x.stride(0), BLOCK_K=bk, E4M3_BITS=bits,
                                     num_warps=4)  # fmt: skip
    return q, s


def check_gemm(
    a: torch.Tensor, a_scale: torch.Tensor | None, w: MxWeight, bounds: tuple[int, ...],
    bias: torch.Tensor | None,
) -> None:  # fmt: skip
    """Assert the module docstring's shape/dtype contract."""
    check_tensor(a, "a", dtype=tuple(OPK), ndim=3)
    p, m, k = a.shape
    require(m >= 1 and a.stride(2) == 1, "a", "M >= 1 rows, unit stride along K", a.stride())
    require(a.stride(0) == m * a.stride(1), "a", "planes stacked along dim 0", a.stride())
    require(k == w.k, "a.shape[2] (K)", f"the weight's K = {w.k}", k)
    require(p == len(bounds) + 1, "a.shape[0] (planes)", f"{len(bounds) + 1}", p)
    fp8 = a.dtype == torch.float8_e4m3fn
    require((a_scale is not None) == fp8, "a_scale", "given exactly for fp8 activations",
            "present" if a_scale is not None else "missing")  # fmt: skip
    if a_scale is not None:
        check_tensor(a_scale, "a_scale", dtype=torch.float32, shape=[p, m])
        require(a_scale.is_contiguous(), "a_scale", "contiguous", a_scale.stride())
    n = w.n
    require(
        all(x < y for x, y in zip((0, *bounds), (*bounds, n), strict=True)),
        "bounds", f"strictly increasing inside 0..{n}", list(bounds),
    )  # fmt: skip
    if bias is not None:
        check_tensor(bias, "bias", shape=[n])
    devs = {t.device for t in (a, w.qw, w.sc, w.cmax)}
    require(len(devs) == 1, "devices", "one device for every tensor", devs)


def mx_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    w: MxWeight,
    bounds: tuple[int, ...],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: Config | None = None,
    fold: bool | None = None,
) -> torch.Tensor:
    """y [M, N] = A_p W^T (* a_scale) (+ bias) per plane p; contract in the module doc.

    fold=None takes the folded GEMM exactly when it is exact on this weight (`MxWeight.fold_ok`).
    """
    from .mx_kernels import mx_gemm_kernel

    check_gemm(a, a_scale, w, bounds, bias)
    _, m, k = a.shape
    n = w.n
    opk = OPK[a.dtype]
    fold = w.fold_ok(opk) if fold is None else fold
    hip = torch.version.hip is not None and a.device.type == "cuda"
    cfg = config or pick_config(m, n, k, bounds, opk, sm_count(a.device), hip)
    b = (*bounds, n, n)[:2]
    out, grid = gemm_out_grid(m, n, cfg, out_dtype, a.device)
    mx_gemm_kernel[grid](
        a, a_scale if a_scale is not None else w.cmax, w.qw, w.sc, w.cmax,
        bias if bias is not None else w.cmax, out,
        m, n, k, a.stride(1), b[0], b[1], cfg.split_k,
        OPK=opk, A_SCALED=a_scale is not None, FOLD=fold, HAS_BIAS=bias is not None,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ATOMIC=cfg.split_k > 1, GROUP_M=cfg.group_m,
        IMPRECISE=FP8_PROMOTE if opk == 0 else None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out.to(out_dtype) if cfg.split_k > 1 else out


# Fifteenth pass (issue 14, deliverable 2 for MXFP4): prefill on the layer dequantized to
# x.dtype (`mx_dequant`: the rotation folded in for MXFP4-PARO) and the vendor GEMM, from
# DEQUANT_MIN_M rows. Before it the MXFP4 GEMM served every prefill row: H200 (BENCH.md
# fifteenth pass, run 2, bench14, us) M = 2048 qkv 798 / gate_up 1844 / down 1003 against
# cuBLAS bf16's 201 / 477 / 229 (0.23-0.26x). Run 3 (same run per cell, the GEMM / the dequant
# path forced, MXFP4 and MXFP4-PARO): M = 2048 down 1026 / 281 and 1066 / 315, in_proj 913 /
# 267 and 959 / 300 (0.72-0.81x cuBLAS); M = 128 1.2-3.2x on every shape (qkv 176 / 76, gate_up
# 250 / 174, PARO gate_up 258 / 220); M = 64 the GEMM on 6 of 10 cells (PARO qkv 82 / 96, in_proj
# 74 / 82; gate_up 200 / 174 the other way). 65..127 is interpolated (the GEMM's M = 128 tiles).
DEQUANT = True
DEQUANT_MIN_M = 65
DEQUANT_BLOCK_N = 64  # columns a block: the rotated kernel's [64, 128] fp32 accumulator
DEQUANT_PLAIN_BLOCK_N = 128
# gfx1201 (AOT, Triton 3.9, 4 waves; not served there): the rotated kernel at 64 columns took
# 256 VGPRs and spilled (371), 32: 250, 16: 165 and none; the plain one at 128: 172.
DEQUANT_HIP_BLOCK_N = 16
DEQUANT_WARPS = 4
DEQUANT_PROGRAMS_PER_SM = 4
# Sixteenth pass: the rotated dequant with the block scales folded into the values (one dot
# chain a group, `mx_dequant_kernel` FOLD). Twenty-second pass (H100, kernels/device49.sh, the
# W8 note's JSONs): within 3% of the per-block form alone and on the path on every 27B shape
# but o_proj (5-6% faster), its W' 2.1-2.4e-5 off the per-block one's: off (no gain worth a
# numerics change).
DEQUANT_FOLD = False


def dequant_block_n(rot: bool, hip: bool) -> int:
    """Columns a block of `mx_dequant_kernel` (before narrowing to the plane boundaries)."""
    if not rot:
        return DEQUANT_PLAIN_BLOCK_N
    return DEQUANT_HIP_BLOCK_N if hip else DEQUANT_BLOCK_N


def dequant_ok(m: int, hip: bool) -> bool:
    """Whether an M-row call of an MXFP4 layer is served on `mx_dequant` + the vendor GEMM:
    NVIDIA, where it was measured (gfx1201 keeps the GEMM: its fp8 WMMA runs at twice bf16;
    the dequant kernel is built for it in CI)."""
    return DEQUANT and not hip and m >= DEQUANT_MIN_M


def _dequant_launch(prep: Prepared, out: torch.Tensor, s8: torch.Tensor | None, rot: bool,
                    fold: bool, block_n: int, programs_per_sm: int) -> None:  # fmt: skip
    """One `mx_dequant_kernel` launch into out [N, K] (s8: the e4m3 codes' column scales)."""
    from .mx_kernels import mx_dequant_kernel

    w = prep.weight
    n, k = w.n, w.k
    g = prep.group_size if rot else 64
    require(not rot or g in (64, 128), "group_size", "64 or 128 for the rotated dequant", g)
    require(tuple(out.shape) == (n, k) and out.is_contiguous(), "out",
            f"contiguous [{n}, {k}]", tuple(out.shape))  # fmt: skip
    bn = block_n or dequant_block_n(rot, host._is_hip())
    if rot:
        bn = _block_n(bn, _align(prep.bounds))
    bounds = prep.bounds if rot else ()
    b = (*bounds, n, n)[:2]
    # every program walks `per` column blocks of one partition (as the int4 dequant's)
    blocks = [-(-(hi - lo) // bn) for lo, hi in zip((0, *bounds), (*bounds, n), strict=True)]
    groups = -(-k // g)
    pps = programs_per_sm or DEQUANT_PROGRAMS_PER_SM
    per = max(1, -(-sum(blocks) * groups // (pps * sm_count(w.qw.device))))
    progs = [-(-nb // per) for nb in blocks]
    c = [sum(progs[:1]), sum(progs[:2])]
    dummy = w.cmax
    mx_dequant_kernel[(groups, sum(progs))](
        w.qw, w.sc, prep.rot_hi if rot else dummy, prep.rot_lo if rot else dummy, w.cmax, out,
        dummy if s8 is None else s8, n, k, b[0], b[1], per, c[0], c[1],
        G=g, BLOCK_N=bn, ROT=rot, FOLD=fold, OUT8=s8 is not None, num_warps=DEQUANT_WARPS,
        num_stages=2,
    )  # fmt: skip


def mx_dequant(prep: Prepared, dtype: torch.dtype, out: torch.Tensor | None = None,
               block_n: int = 0, programs_per_sm: int = 0,
               fold: bool | None = None) -> torch.Tensor:  # fmt: skip
    """W'^T [N, K] in `dtype` (bf16 / fp16; default in the int4 dequant path's shared scratch):
    the layer's e2m1 x e8m0 weights, with the rotation folded in (W'_g = B_g W_g) when the layer
    has one (MXFP4-PARO), so that x @ W' is the layer's output. fp16 saturates at its range.
    `fold` (rotated layers): the block scales folded into one dot chain a group (None:
    DEQUANT_FOLD where the weight's spans allow it exactly, `fold_ok(1)`)."""
    from . import fast_host

    require(dtype in A16_DTYPES, "dtype", A16_DTYPES, dtype)
    w = prep.weight
    rot = prep.rot_hi is not None and prep.rot_lo is not None
    if out is None:
        out = fast_host._scratch("dequant_w", w.n * w.k, dtype, w.qw.device)[: w.n * w.k]
        out = out.view(w.n, w.k)
    require(out.dtype == dtype, "out", f"dtype {dtype}", out.dtype)
    fold = rot and ((DEQUANT_FOLD and w.fold_ok(1)) if fold is None else fold)
    require(not fold or w.fold_ok(1), "fold", f"False unless every nonzero block lies within "
            f"{FOLD_SPAN[1]} binades of its column's largest (fp16)", f"span {w.span}")  # fmt: skip
    _dequant_launch(prep, out, None, rot, fold, block_n, programs_per_sm)
    return out


def dequant8(prep: Prepared, block_n: int = 0,
             programs_per_sm: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The layer unrotated for the 8-bit vendor GEMM: (codes [N, K] e4m3, scales [N] fp32),
    W^T = codes x scales per row: the MXFP4 GEMM's e4m3 fold, exact where `fold_ok(0)` (else
    refused). Both in shared scratch (the codes in int4's w8 route buffer), valid until the
    next call."""
    from . import fast_host

    w = prep.weight
    require(w.fold_ok(0), "weight", f"every nonzero block within {FOLD_SPAN[0]} binades of its "
            f"column's largest, largest codes >= {FOLD_CMAX_MIN[0]} (the e4m3 fold)",
            f"span {w.span}, smallest largest code {w.cmax_min}")  # fmt: skip
    dev, n, k = w.qw.device, w.n, w.k
    codes = fast_host._scratch("w8_fp8", n * k, torch.float8_e4m3fn, dev)[: n * k].view(n, k)
    scales = fast_host._scratch("w8_scale", n, torch.float32, dev)[:n]
    _dequant_launch(prep, codes, scales, False, False, block_n, programs_per_sm)
    return codes, scales


# Sixteenth pass (issue 14): W4A8 (fp8) prefill on the 8-bit vendor GEMM, as int4's w8 route
# (fast_host, W4A8 prefill): the activations as the MXFP4 GEMM's fp8 mode takes them (`activations`:
# each plane rotated for MXFP4-PARO, per-token e4m3), the weight unrotated as that GEMM's own
# e4m3 operand with a scale a column (`dequant8`: 1 byte a weight written, no rotation dots), then
# `torch._scaled_mm` rowwise per plane with fp32 accumulation. The same operands as the GEMM's fp8
# mode, so the box's W4A8 numerics (gfx1201's fp8 WMMA), where the dequant path serves 16-bit
# activations. cuBLASLt's rowwise epilogue writes bf16: bf16 layers only (forced on fp16, the
# output is cast).
# Twenty-second pass, measured (H100, `bash kernels/device49.sh 0 300` and `... 0 200 64,96,128`:
# kernels/bench-2026-12-05-h100-issue14-pass22-mx-prefill{,-small}.json, us, the route / as
# served before, 27B TP=2 shapes; the w8 output within 8.2e-4 of the GEMM's fp8 mode):
# - MXFP4 (no rotation) wins on every shape at every M measured, 64..8192: M = 64 qkv 63.6 / 74.0,
#   gate_up 143 / 195; M = 2048 qkv 182 / 240, gate_up 407 / 622, down 242 / 303, in_proj 208 /
#   277 (cuBLAS bf16 213 / 475 / 226 / 215); M = 8192 gate_up 1296 / 2105 (cuBLAS 2033).
# - MXFP4-PARO, one activation pass a plane: wins where the planes are wide, from M = 96 (M = 2048
#   gate_up 537 / 657, down 286 / 321, in_proj (6144 + 2048) 289 / 305; M = 96 in_proj 92 / 119,
#   gate_up 150 / 238), at M = 8192 in_proj ties (996 / 995); loses at M = 64 on in_proj (91 / 81,
#   the GEMM) and on qkv's 512-column planes from M = 2048 (322 / 265, 1057 / 847; ties at 96-256).
# Twenty-third pass, measured below M = 64 (H100, `bash kernels/device50.sh 200 100`: the
# MXFP4 half, M = 16..48, kernels/bench-2026-12-05-h100-issue14-pass23-mx-small-m.json, us, the
# route / the GEMM that served, same run): from M = 24 the route wins on every unrotated shape
# but in_proj, where it ties to M = 32 (M = 24 qkv 69.3 / 73.2, gate_up 142 / 190, down 86 / 95,
# o_proj 34.3 / 37.0, in_proj 73.5 / 73.5; M = 48 in_proj 72.4 / 74.6), so it serves from the
# row after the decode GEMVs' last (M = 16: the mma GEMV's 11-35 us against the route's
# 34-140) where the decode chunks (`mx_decode_host.chunks_ok`) do not. Rotated, it wins from
# M = 24 where every plane is at least 4096 wide (M = 24..48 gate_up 152-154 / 193-198, down 90-92 /
# 98-102, o_proj 37-38 / 40-41) and loses on in_proj's 2048-column plane (91-92 / 77-80) until
# M = 96, where the GEMM's 64-row tiles give way to the dequant path (92 / 119).
W8 = True
W8_MIN_M = 17
# (from M rows, the narrowest plane of a rotated layer at least this many columns): the route
W8_ROT_PLANES = ((96, 2048), (17, 4096))


def narrowest_plane(n: int, bounds: tuple[int, ...]) -> int:
    """Columns of the narrowest plane of an N-column layer split at `bounds`."""
    return min(hi - lo for lo, hi in itertools.pairwise((0, *bounds, n)))


def w8_ok(m: int, act: str, hip: bool, dtype: torch.dtype = torch.bfloat16,
          w: MxWeight | None = None, rot_plane: int = 0) -> bool:  # fmt: skip
    """Whether an M-row call of an `act` layer is served on `w8_linear` (w: its weight, whose
    block spans must sit in the e4m3 fold and N on the 8-bit GEMM's multiple of 16; rot_plane:
    for a rotated layer (MXFP4-PARO), the columns of its narrowest plane, 0 unrotated)."""
    fits = w is None or (w.fold_ok(0) and w.n % 16 == 0)
    if rot_plane:
        fits = fits and any(m >= lo and rot_plane >= cols for lo, cols in W8_ROT_PLANES)
    return W8 and not hip and act == "fp8" and dtype == torch.bfloat16 and m >= W8_MIN_M and fits


def reserve_scratch(prep: Prepared, dtype: torch.dtype = torch.bfloat16) -> None:
    """Grow, at load, the shared scratch this layer's prefill routes write to their size for it
    (the dequant path's W' in `dtype`, the model's activation dtype; the 8-bit route's codes and
    column scales where the layer can take that route), so that no later call grows them.

    Since the twenty-second pass one MXFP4-PARO model takes the dequant path at some M (its
    layers with a plane under 4096 columns at 65..95, thin-plane ones beyond) and the 8-bit
    route at others, so vLLM's profile run at the largest M no longer grows the dequant scratch
    to its largest layer: the CUDA graph captures after it would. `fast_host._scratch` keeps a
    captured buffer alive when it grows (correct either way); sizing it here makes the memory
    part of the model's, before vLLM sizes its KV cache, and leaves no retired copies. NVIDIA
    only (gfx1201 serves neither route)."""
    from . import fast_host

    w = prep.weight
    if host._is_hip():
        return
    dev = w.qw.device
    if DEQUANT:
        fast_host._scratch("dequant_w", w.n * w.k, dtype, dev)
    plane = narrowest_plane(w.n, prep.bounds) if prep.rot_hi is not None else 0
    if w8_ok(1 << 30, "fp8", False, dtype, w, plane):  # the route at some M
        fast_host._scratch("w8_fp8", w.n * w.k, torch.float8_e4m3fn, dev)
        fast_host._scratch("w8_scale", w.n, torch.float32, dev)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t, or a copy of it where its data is not 16-byte aligned: cuBLASLt answers
    CUBLAS_STATUS_NOT_SUPPORTED for a rowwise scale vector that is not (H200, torch 2.11: a
    plane's slice of the [P, M] token scales at odd M, the seventeenth pass's GPU suite)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def w8_linear(prep: Prepared, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] in x.dtype = fp8(rot(x)) (codes x scales)^T (+ bias) per plane, on the vendor
    8-bit GEMM (section note above)."""
    n = prep.weight.n
    require(n % 16 == 0, "N (output features)", "a multiple of 16 (the 8-bit GEMM)", n)
    codes, sw = dequant8(prep)
    a, sa = activations(prep, x, "fp8")
    m = x.shape[0]
    b = None if bias is None else bias.to(torch.bfloat16)
    edges = (0, *prep.bounds, n)
    ys = [
        torch._scaled_mm(
            a[p], codes[lo:hi].t(), scale_a=_aligned(sa[p].view(m, 1)),
            scale_b=_aligned(sw[lo:hi].view(1, hi - lo)),
            bias=None if b is None else _aligned(b[lo:hi]), out_dtype=torch.bfloat16,
        )
        for p, (lo, hi) in enumerate(itertools.pairwise(edges))
    ]  # fmt: skip
    y = ys[0] if len(ys) == 1 else torch.cat(ys, 1)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def activations(
    prep: Prepared, x: torch.Tensor, act: ActMode, fused: bool | None = None
) -> tuple[torch.Tensor, ...]:
    """The GEMM's A operand(s) for x [M, K]: (a [P, M, K],) or (a fp8, a_scale [P, M]).

    MXFP4-PARO, fp8: fused=True is the int4 kernels' one-launch rotate + scale + per-token e4m3
    prologue (`host.rotate_quant`); fused=False composes `host.rotate_scale` (fp16 out) and
    `fp8_quant` (two launches). None = PARO_FUSED_PROLOGUE. a16: `host.rotate_scale`, fp16 out.
    NVFP4 -> MXFP4: x itself (a16) or its per-token e4m3 (fp8), one plane.
    """
    require(act in ACT_MODES, "act", " or ".join(ACT_MODES), act)
    check_tensor(x, "x", dtype=A16_DTYPES, ndim=2)
    m, k = x.shape
    require(x.stride(1) == 1, "x", "unit stride along K", x.stride())
    if prep.rot_hi is not None and prep.rot_lo is not None:
        xc = x.to(prep.rot_hi.dtype)  # the prologues take x in the blocks' dtype
        g = prep.group_size
        if act == "fp8" and (PARO_FUSED_PROLOGUE if fused is None else fused):
            q, asc, _ = host.rotate_quant(xc, prep.rot_hi, prep.rot_lo, g, "fp8", "token")
            return q, asc[:, :, 0].contiguous()  # per token: the scale repeats over groups
        xr, _ = host.rotate_scale(xc, prep.rot_hi, prep.rot_lo, g)
        if act == "a16":
            return (xr,)
        q, s = fp8_quant(xr.view(-1, k))
        return q.view(xr.shape), s.view(xr.shape[0], m)
    if act == "a16":
        return (x.unsqueeze(0),)
    q, s = fp8_quant(x)
    return q.unsqueeze(0), s.unsqueeze(0)


def _mma_prologue(prep: Prepared, x: torch.Tensor, rh: torch.Tensor,
                  rl: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """MXFP4-PARO's paired fp16 activations (pair shift 0) for the mma GEMV, by the int4 mma
    GEMV's rule (`decode_host.mma_blocks`): the Givens records, or the sliced blocks (also
    without records)."""
    from . import decode_host, fast_host

    m, k = x.shape
    blocks = decode_host.mma_blocks(m, prep.weight.n * k)
    if prep.gv_idx is not None and prep.gv_coef is not None and not blocks:
        return fast_host.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, prep.group_size, 0)
    return fast_host.rotate_slices(x.to(rh.dtype), rh, rl, prep.group_size, paired=True,
                                   pair_shift=0)[0]  # fmt: skip


PATHS = ("mma", "chunks", "gemv", "gemm", "dequant", "w8")


def mx_linear(
    prep: Prepared, x: torch.Tensor, bias: torch.Tensor | None = None, act: ActMode = "fp8",
    path: str | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, N] in x.dtype = act_quant(rot(x)) W^T (+ bias) for x [M, K] bf16/fp16.

    Decode rows take 16-bit activations, either `act`: the mma GEMV (`mx_decode_host.mma_ok`;
    MXFP4-PARO on the paired prologue, NVFP4 -> MXFP4 on x; a few rows more in MMA_MAX_M-row
    chunks, `chunks_ok`, each chunk its own call), else the FMA GEMV (`gemv_ok`),
    and a few more rows the GEMM on them (`served_act`); prefill from DEQUANT_MIN_M rows the
    layer dequantized (`mx_dequant`, the rotation folded in) + the vendor GEMM on x itself;
    W8 (bf16 fp8 layers from W8_MIN_M rows, rotated ones by plane width, `W8_ROT_PLANES`):
    `w8_linear`, the 8-bit vendor GEMM.
    `path` ("mma" | "chunks" | "gemv" | "gemm" | "dequant" | "w8") forces the kernel and `act`
    the GEMM's activations (the bench's forced paths)."""
    from . import fast_host, mx_decode_host

    require(path in (None, *PATHS), "path", ", ".join(PATHS), path)
    hip = host._is_hip()
    rh, rl, g = prep.rot_hi, prep.rot_lo, prep.group_size
    m = x.shape[0]
    n, bounds = prep.weight.n, prep.bounds
    if path == "chunks" or (path is None and mx_decode_host.chunks_ok(m, n, bounds, hip)):
        step = mx_decode_host.MMA_MAX_M
        return torch.cat([mx_linear(prep, x[i : i + step], bias, act) for i in range(0, m, step)])
    if path == "mma" or (path is None and mx_decode_host.mma_ok(m, n, bounds, hip)):
        if rh is not None and rl is not None:  # MXFP4-PARO: the int4 mma GEMV's prologues
            a = _mma_prologue(prep, x, rh, rl)
            return mx_decode_host.mx_gemv_mma(a, prep.weight, prep.bounds, x.dtype, bias)
        return mx_decode_host.mx_gemv_mma(x.contiguous().unsqueeze(0), prep.weight, prep.bounds,
                                          x.dtype, bias, paired=False)  # fmt: skip
    if path == "gemv" or (path is None and mx_decode_host.gemv_ok(m, hip)):
        if rh is not None and rl is not None and fast_host.prologue_slice(hip):
            # MXFP4-PARO: the int4 decode's sliced prologue (fp16 out), as the int4 GEMVs take it
            a = fast_host.rotate_slices(x.to(rh.dtype), rh, rl, g, f16=True)[0]
        else:
            (a,) = activations(prep, x, "a16")
        return mx_decode_host.mx_gemv(a, prep.weight, prep.bounds, x.dtype, bias)
    rot_plane = narrowest_plane(prep.weight.n, prep.bounds) if rh is not None else 0
    if path == "w8" or (path is None and w8_ok(m, act, hip, x.dtype, prep.weight, rot_plane)):
        return w8_linear(prep, x, bias)
    if path == "dequant" or (path is None and dequant_ok(m, hip)):
        return fast_host.dequant_linear(x, mx_dequant(prep, x.dtype).t(), bias)
    if path is None:
        act = mx_decode_host.served_act(m, act, hip, prep.weight.n, prep.bounds,
                                          rot_plane > 0, prep.weight, x.dtype)  # fmt: skip
    ops = activations(prep, x, act)
    a, a_scale = ops[0], (ops[1] if len(ops) > 1 else None)
    return mx_gemm(a, a_scale, prep.weight, prep.bounds, x.dtype, bias)


# --------------------------------------------------------------------------- bench registry


def random_checkpoint(
    n: int, k: int, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 (weight [N, K/2] u8, weight_scale [N, K/32] u8) spanning a checkpoint's
    exponent range (2^-14 .. 2^-3 per block), for benchmarks and tests."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    scale = torch.randint(127 - 14, 127 - 3, (n, k // MX_BLOCK), generator=g, dtype=torch.uint8)
    return weight.to(device), scale.to(device)


def _variant_bytes(act_bytes: int, rot: bool) -> Callable[[int, int, tuple[int, ...], int], int]:
    def fewest(n: int, k: int, parts: tuple[int, ...], m: int) -> int:
        planes = len(parts) if rot else 1
        # weights + e8m0 scales + activations read once per plane + bf16 output
        return n * k // 2 + n * k // MX_BLOCK + planes * m * k * act_bytes + 2 * m * n

    return fewest


def _build(act: ActMode, rot: bool) -> Callable[..., Callable[[], object]]:
    def build(
        n: int, k: int, parts: tuple[int, ...], m: int, device: torch.device
    ) -> Callable[[], object]:
        # Enough weight copies to exceed the L2 three times; each call reads the next one.
        copies = max(2, -(-3 * L2_BYTES // (n * k // 2)))
        preps = [prepare(*random_checkpoint(n, k, seed=i), None, 0, device) for i in range(copies)]
        if rot:
            r0 = prepare(*random_checkpoint(n, k), random_runs(k, parts), 128, device)
            preps = [dataclasses.replace(r0, weight=p.weight) for p in preps]
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        step = iter(range(1 << 62))
        return lambda: mx_linear(preps[next(step) % copies], x, None, act)

    return build


def random_runs(
    k: int, parts: tuple[int, ...], g: int = 128, krot: int = 8, seed: int = 0
) -> list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Random z-lab rotations (pairs [krot, K] i16, theta, channel scales) per partition."""
    gen = torch.Generator().manual_seed(seed)
    out, n0 = [], 0
    for size in parts:
        perms = [torch.randperm(g, generator=gen) for _ in range(krot * (k // g))]
        pairs = torch.stack(perms).view(krot, k).to(torch.int16)
        theta = ((torch.rand(krot, k // 2, generator=gen) * 2 - 1) * 3.14159).to(torch.float16)
        cs = (torch.rand(1, k, generator=gen) * 1.5 + 0.5).to(torch.float16)
        out.append((n0, n0 + size, pairs, theta, cs))
        n0 += size
    return out


def bench_variants() -> list[object]:
    """The MXFP4 entries of the shared bench registry (`paro_kernels.bench.Variant`)."""
    from .. import bench

    variant = bench.Variant
    return [
        variant("mxfp4_w4a8", _build("fp8", False), _variant_bytes(1, False), "fp8", _aot("fp8")),
        variant("mxfp4_w4a16", _build("a16", False), _variant_bytes(2, False), "bf16", _aot("a16")),
        variant("mxfp4_paro_w4a8", _build("fp8", True), _variant_bytes(1, True), "fp8", None),
    ]


def _aot(act: ActMode) -> Callable[[int, int, tuple[int, ...], int], list[object]]:
    def reports(n: int, k: int, parts: tuple[int, ...], m: int) -> list[object]:
        return [compile_mx_gemm("gfx1201", m, n, k, act)]

    return reports


# --------------------------------------------------------------------------- ahead-of-time builds

# The matrix instruction each mode must become (fp8 mode: fp8 WMMA, never a bf16 decomposition).
MX_MMA_PATTERNS = {
    ("gfx1201", "fp8"): r"v_wmma_f32_16x16x16_fp8_fp8",
    ("gfx1201", "a16"): r"v_wmma_f32_16x16x16_(f16|bf16)",
    ("sm90", "fp8"): r"(wgmma\.mma_async\S*e4m3\.e4m3|mma\.sync\S*e4m3\.e4m3)",
    ("sm90", "a16"): r"(wgmma\.mma_async\S*(f16|bf16)|mma\.sync\S*(f16|bf16))",
}


def _aot_build(
    fn: object,
    sig: dict[str, str],
    const: Mapping[str, object],
    target: str,
    warps: int,
    stages: int,
) -> object:
    import triton

    from . import aot

    src = triton.compiler.ASTSource(
        fn=fn, signature={**sig, **dict.fromkeys(const, "constexpr")}, constexprs=const
    )
    opts = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=aot.TARGETS[target][0], options=opts)


def _aot_report(name: str, target: str, cfg: str, compiled: object, mma: str) -> object:
    import re

    from . import aot

    asm = compiled.asm["amdgcn" if target == "gfx1201" else "ptx"]  # type: ignore[attr-defined]
    lds = int(compiled.metadata.shared)  # type: ignore[attr-defined]
    found = re.search(mma, asm) is not None

    def meta(key: str) -> int:
        hit = re.search(rf"\.{key}:\s*(\d+)", asm)
        return int(hit.group(1)) if hit else 0

    if target == "gfx1201":
        vgprs, spills = meta("vgpr_count"), meta("vgpr_spill_count")
        scratch = meta("private_segment_fixed_size")
    else:  # PTX: `.local` declarations are the spills
        vgprs, spills, scratch = 0, len(re.findall(r"\.local\s", asm)), 0
    return aot.Report(name, target, cfg, found, vgprs, spills, scratch, lds, aot.TARGETS[target][1])


def compile_mx_gemm(
    target: str,
    m: int,
    n: int,
    k: int,
    act: ActMode,
    fold: bool = True,
    bounds: tuple[int, ...] = (),
) -> object:
    """Build the MXFP4 GEMM at the config the launcher picks on `target`; an `aot.Report`."""
    from .mx_kernels import mx_gemm_kernel

    hip = target == "gfx1201"
    opk = 0 if act == "fp8" else 2
    cfg = pick_config(m, n, k, bounds, opk, sms=64 if hip else 132, hip=hip)
    a_ty = "*fp8e4nv" if act == "fp8" else "*bf16"
    sig = {
        "a_ptr": a_ty, "asc_ptr": "*fp32", "qw_ptr": "*u8", "sc_ptr": "*u8", "cmax_ptr": "*i32",
        "bias_ptr": "*bf16", "out_ptr": "*fp32" if cfg.split_k > 1 else "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "b1": "i32", "b2": "i32",
        "split_k": "i32",
    }  # fmt: skip
    const = {
        "OPK": opk, "A_SCALED": act == "fp8", "FOLD": fold, "HAS_BIAS": False,
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "ATOMIC": cfg.split_k > 1,
        "GROUP_M": cfg.group_m, "IMPRECISE": FP8_PROMOTE if opk == 0 else None,
    }  # fmt: skip
    c = _aot_build(mx_gemm_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    name = f"mx_gemm_{act}" + ("" if fold else "_perblock")
    # Triton 3.9 lowers an fp8 dot below 64 rows on sm_90 to f16 mma.sync (exact e4m3 -> f16
    # converts): the decode GEMM is bandwidth-bound, so that is the instruction expected there.
    mode = "a16" if target == "sm90" and cfg.block_m < 64 else act
    return _aot_report(name, target, str(cfg), c, MX_MMA_PATTERNS[(target, mode)])


def compile_mx_dequant(target: str, n: int, k: int, rot: bool, dtype: str = "bf16",
                       bounds: tuple[int, ...] = (), fold: bool = False) -> object:  # fmt: skip
    """Build the prefill dequant (`mx_dequant_kernel`) at the launcher's config; an
    `aot.Report` (`mma`: the rotated kernel's matrix instruction). dtype "fp8": the e4m3 codes
    of `dequant8` (unrotated); fold: the rotated kernel's folded block scales."""
    from .mx_kernels import mx_dequant_kernel

    out8 = dtype == "fp8"
    require(not (out8 and rot), "rot", "False with fp8 codes", rot)
    bn = dequant_block_n(rot, target == "gfx1201")
    bn = _block_n(bn, _align(bounds)) if rot else bn
    w_ty = "fp8e4nv" if out8 else dtype
    sig = {
        "qw_ptr": "*u8", "sc_ptr": "*u8", "rot_hi_ptr": f"*{w_ty}", "rot_lo_ptr": f"*{w_ty}",
        "cmax_ptr": "*i32", "w_ptr": f"*{w_ty}", "s8_ptr": "*fp32", "N": "i32", "K": "i32",
        "b1": "i32", "b2": "i32", "per": "i32", "c1": "i32", "c2": "i32",
    }  # fmt: skip
    const = {"G": 128 if rot else 64, "BLOCK_N": bn, "ROT": rot, "FOLD": fold, "OUT8": out8}
    c = _aot_build(mx_dequant_kernel, sig, const, target, DEQUANT_WARPS, 2)
    mma = MX_MMA_PATTERNS[(target, "a16")] if rot else r"(?!)"  # the plain kernel has none
    name = "mx_dequant" + ("_rot" if rot else "") + ("_fold" if fold else "")
    name += "8" if out8 else ""
    return _aot_report(name, target, f"BLOCK_N={bn}", c, mma)


def compile_fp8_quant(target: str, k: int) -> object:
    """Build the per-token e4m3 quantizer (no matrix instruction: `mma` reports False)."""
    from .mx_kernels import fp8_token_quant_kernel

    bk = min(QUANT_BLOCK_K, max(128, 1 << (k - 1).bit_length()))
    sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "K": "i32", "stride_xr": "i32"}
    const = {"BLOCK_K": bk, "E4M3_BITS": host.e4m3_bits(target == "gfx1201")}
    c = _aot_build(fp8_token_quant_kernel, sig, const, target, 4, 1)
    return _aot_report("fp8_token_quant", target, f"BLOCK_K={bk}", c, r"(?!)")


# --------------------------------------------------------------------------- quick timing

# (name, N, K, partitions): the Qwen3.8-27B TP=2 shapes of the lead's brief.
QUICK_SHAPES = [("qkv", 7168, 5120, (6144, 512, 512)), ("gate_up", 17408, 5120, (8704, 8704)),
                ("down", 5120, 8704, (5120,))]  # fmt: skip


def _graph_time(fns: list[Callable[[], object]], reps: int = 30) -> float:
    """Median microseconds per call over `reps` CUDA-graph replays of >= 16 calls cycling `fns`."""
    for fn in fns:
        fn()  # compile outside the capture
    calls = len(fns) * -(-16 // len(fns))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        t0 = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        t1 = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        t0.record()
        graph.replay()
        t1.record()
        t1.synchronize()
        times.append(t0.elapsed_time(t1) * 1000 / calls)
    return float(sorted(times)[len(times) // 2])


def quick_bench(ms: tuple[int, ...] = (1, 16, 2048), sweep: bool = True) -> list[dict[str, object]]:
    """Time the MXFP4 paths against cuBLAS bf16 on QUICK_SHAPES (weights DRAM-fed: every call
    reads another copy; the copies together exceed the L2 three times). Prints each row."""
    dev = torch.device("cuda")
    rows: list[dict[str, object]] = []
    for name, n, k, parts in QUICK_SHAPES:
        copies_mx = max(2, -(-3 * L2_BYTES // (n * k // 2)))
        copies_bf = max(2, -(-3 * L2_BYTES // (n * k * 2)))
        ckpt = [random_checkpoint(n, k, seed=i) for i in range(copies_mx)]
        preps = [prepare(w, s, None, 0, dev) for w, s in ckpt]
        r0 = prepare(*ckpt[0], random_runs(k, parts), 128, dev)
        rot = [dataclasses.replace(r0, weight=p.weight) for p in preps]
        dense = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies_bf)]
        for m in ms:
            row = _time_cell(m, preps, rot, dense, sweep)
            torch.cuda.synchronize()
            rows.append({"shape": name, "n": n, "k": k, "m": m, **row})
            print(rows[-1], flush=True)
    return rows


def _time_cell(
    m: int, preps: list[Prepared], rot: list[Prepared], dense: list[torch.Tensor], sweep: bool
) -> dict[str, object]:
    """One (shape, M) cell of `quick_bench`: microseconds per call of each path.

    sweep=False: every path; sweep=True: the picked GEMM config, cuBLAS and `_sweep_configs`.
    """
    k, n = dense[0].shape
    x = torch.randn(m, k, device=dense[0].device, dtype=torch.bfloat16)
    q, s = fp8_quant(x)
    a8, s8, a16 = q.unsqueeze(0), s.unsqueeze(0), x.unsqueeze(0)
    bf = torch.bfloat16

    def each(fn: Callable[[Prepared], object], ps: list[Prepared]) -> list[Callable[[], object]]:
        return [functools.partial(fn, p) for p in ps]

    def gemm8(p: Prepared, cfg: Config | None = None, fold: bool | None = None) -> object:
        return mx_gemm(a8, s8, p.weight, (), bf, None, cfg, fold)

    def paro8_fused(p: Prepared) -> object:
        a, sc = activations(p, x, "fp8", True)
        return mx_gemm(a, sc, p.weight, p.bounds, bf)

    t: dict[str, list[Callable[[], object]]] = {
        "cublas_bf16": [functools.partial(torch.matmul, x, d) for d in dense],
        "w4a8_gemm": each(gemm8, preps),
    }
    if not sweep:
        t["w4a8_op"] = each(functools.partial(mx_linear, x=x, act="fp8"), preps)
        t["w4a8_gemm_perblock"] = each(functools.partial(gemm8, fold=False), preps)
        t["w4a16_gemm"] = each(lambda p: mx_gemm(a16, None, p.weight, (), bf), preps)
        t["fp8_quant"] = [functools.partial(fp8_quant, x)]
        t["paro_w4a8_op"] = each(functools.partial(mx_linear, x=x, act="fp8"), rot)
        t["paro_w4a8_op_fused_prologue"] = each(paro8_fused, rot)
        t["paro_w4a16_op"] = each(functools.partial(mx_linear, x=x, act="a16"), rot)
    else:
        for cfg in _sweep_configs(m):
            t[f"w4a8_gemm {_short(cfg)}"] = each(functools.partial(gemm8, cfg=cfg), preps)
    row: dict[str, object] = {key: round(_graph_time(fns), 2) for key, fns in t.items()}
    row["config"] = _short(pick_config(m, n, k, (), 0, sm_count(x.device)))
    us_gemm, us_cublas = float(row["w4a8_gemm"]), float(row["cublas_bf16"])  # type: ignore[arg-type]
    row["w4a8_gemm_GBs"] = round((n * k // 2 + n * k // MX_BLOCK) / (us_gemm * 1e3), 1)
    row["w4a8_gemm_vs_cublas"] = round(us_cublas / us_gemm, 2)
    if not sweep:
        row["w4a8_op_vs_cublas"] = round(us_cublas / float(row["w4a8_op"]), 2)  # type: ignore[arg-type]
    return row


def _short(cfg: Config) -> str:
    return f"{cfg.block_m}x{cfg.block_n}s{cfg.split_k}w{cfg.num_warps}st{cfg.num_stages}"


def _sweep_configs(m: int) -> list[Config]:
    """A few alternatives to the picked config, to learn from the one GPU run we get."""
    if m <= DECODE_MAX_M:
        return [Config(16, 64, 16, 4, 4), Config(16, 128, 8, 4, 4), Config(16, 256, 8, 8, 3)]
    return [Config(128, 256, 1, 8, 3), Config(128, 128, 1, 4, 4), Config(64, 128, 1, 4, 4),
            Config(128, 128, 1, 8, 4)]  # fmt: skip


if __name__ == "__main__":
    import json
    import sys

    # python -m paro_kernels.triton.mx_host OUT.json: the main table, then the config sweep.
    dump = sys.argv[1] if len(sys.argv) > 1 else None
    out = {"main": quick_bench(sweep=False)}
    if dump:
        with open(dump, "w") as f:
            json.dump(out, f, indent=1)
    out["sweep"] = quick_bench(sweep=True)
    if dump:
        with open(dump, "w") as f:
            json.dump(out, f, indent=1)
