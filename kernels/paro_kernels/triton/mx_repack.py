"""Load-time repack of an MXFP4 layer for the Triton kernels (`MxWeight`, `Prepared`) and the
MXFP4 family's constants.

The checkpoint form (Quark MXFP4 / the NVFP4 requant): weight [N, K/2] u8 (low nibble = even
column), weight_scale [N, K/32] u8 e8m0; `prepare` repacks it once.

Exactness (mx_gemm_kernels doc): the folded GEMM is exact when every nonzero block of a column
lies within 11 (fp8) / 13 (fp16) / 125 (bf16) binades of the column's largest; `prepare` measures
the layer's widest column span and the launcher falls back to the per-block GEMM (exact
everywhere except e8m0 code 0 = 2^-127, flushed) when the fold would flush anything. bf16 covers
every checkpoint in practice; the fp16 limit matters only for fp16 W4A16 (the PARO prologue's
output).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Literal

import torch

from .._contract import check_multiple, check_tensor, require
from ..formats import E8M0_NAN, unpack_fp4
from .repack import givens_tables, rotation_blocks, split_hi_lo

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
# fused prologue.rotate_quant on the H200 (2026-11-29, with the GEMM: qkv M=1 53 vs 230 us, M=16 54
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
    # the Givens records (`repack.givens_tables`) for the decode prologue of the mma GEMV
    gv_idx: torch.Tensor | None = None  # [P, krot, K] int32
    gv_coef: torch.Tensor | None = None  # [P, 2 krot + 1, K] fp32


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
    rots = torch.stack([rotation_blocks(p, t, cs, group_size) for _, _, p, t, cs in runs])
    hi, lo = split_hi_lo(rots, dtype)
    bounds = tuple(n0 for n0, _, _, _, _ in runs[1:])
    _block_n(128, _align(bounds))  # refuse unaligned boundaries at load, not at the first call
    gv = givens_tables(runs, group_size)
    gi, gc = (None, None) if gv is None else (gv[0].to(dev), gv[1].to(dev))
    return Prepared(w, bounds, hi.to(dev), lo.to(dev), group_size, gi, gc)


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


def random_checkpoint(
    n: int, k: int, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 (weight [N, K/2] u8, weight_scale [N, K/32] u8) spanning a checkpoint's
    exponent range (2^-14 .. 2^-3 per block), for benchmarks and tests."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    scale = torch.randint(127 - 14, 127 - 3, (n, k // MX_BLOCK), generator=g, dtype=torch.uint8)
    return weight.to(device), scale.to(device)


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
