"""Load-time repack of a ParoQuant checkpoint layer for the Triton kernels: the AWQ codes packed
along K, the fifth-bit planes (int5), the folded rotation blocks split hi + lo, the Givens
records and the 8-bit route's per-channel max, bundled in one `Prepared`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import reference as ref
from .._contract import check_multiple, check_tensor, require
from ..formats import unpack_awq, unpack_bitplane
from . import dequant, launch
from .weights import Prepared as Prepared


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
    require(group_size in launch.GROUP_SIZES, "group_size", launch.GROUP_SIZES, group_size)
    require(dtype in launch.ACT_DTYPES, "dtype", launch.ACT_DTYPES, dtype)
    require(bits in launch.BITS, "bits", launch.BITS, bits)
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

    bounds = tuple(n0 for n0, _, _, _, _ in runs[1:])
    hi, lo, qw, sc, zp = hi.to(dev), lo.to(dev), qw.to(dev), sc.to(dev), zp.to(dev)
    qh = None if qh is None else qh.to(dev)
    prep = Prepared(
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
    )
    return replace(prep, w8_amax=dequant.w8_amax(prep))
