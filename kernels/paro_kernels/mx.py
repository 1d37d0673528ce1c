"""MXFP4 (OCP MX: e2m1 elements, one e8m0 scale per 32) and NVFP4 (e2m1, e4m3 per 16, fp32 global).

Layouts are the checkpoint ones: Quark-style MXFP4 `weight [N, K/2]` u8 (two e2m1 codes per byte,
low nibble = even column) + `weight_scale [N, K/32]` u8 e8m0; compressed-tensors NVFP4
`weight_packed [N, K/2]` u8 + `weight_scale [N, K/16]` e4m3 + `weight_global_scale [1]` fp32,
dequantized as code * scale / global_scale.

Exponent choice per 32-block (seed log 2026-09-15): "ocp" is the spec rule
e = floor(log2 amax) - 2 (it may clip the block maximum to 6); "noclip" is the smallest e with
amax / 2**e <= 6; "mse" takes the better of noclip and noclip - 1 by squared error. The OCP
exponent is always one of those two, so "mse" is never worse than "ocp" on any block.
"""

from __future__ import annotations

from typing import Literal

import torch

from ._contract import check_multiple, check_tensor, require
from .formats import (
    E2M1_MAX,
    E4M3_MAX,
    E8M0_BIAS,
    e2m1_decode,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    pack_fp4,
    unpack_fp4,
)

MX_BLOCK = 32
NV_BLOCK = 16
ExpRule = Literal["ocp", "noclip", "mse"]
EXP_RULES: tuple[str, ...] = ("ocp", "noclip", "mse")
_F64 = torch.float64
_E_MIN, _E_MAX = -E8M0_BIAS, 254 - E8M0_BIAS  # e8m0 codes 0..254 (255 is NaN)


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    """floor(log2 a) exactly for positive finite fp64 a (frexp, no log rounding)."""
    _, exp = torch.frexp(a)
    return exp.to(torch.int64) - 1


def noclip_exponent(amax: torch.Tensor) -> torch.Tensor:
    """Smallest integer e with amax / 2**e <= 6 (int64; amax == 0 gives the smallest scale)."""
    a = amax.to(_F64)
    pos = a > 0
    safe = torch.where(pos, a, torch.ones_like(a))
    e = _floor_log2(safe) - 2  # amax / 2**e in [4, 8)
    e = e + (safe / torch.pow(2.0, e.to(_F64)) > E2M1_MAX).to(torch.int64)
    return torch.where(pos, e, torch.full_like(e, _E_MIN)).clamp(_E_MIN, _E_MAX)


def ocp_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The OCP MX rule floor(log2 amax) - emax(e2m1)=2 (int64; amax == 0 -> smallest scale)."""
    a = amax.to(_F64)
    pos = a > 0
    e = _floor_log2(torch.where(pos, a, torch.ones_like(a))) - 2
    return torch.where(pos, e, torch.full_like(e, _E_MIN)).clamp(_E_MIN, _E_MAX)


def _fake_quant(blocks: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """e2m1(blocks / 2**e) * 2**e in fp64; blocks [..., B], e [...] int64."""
    s = torch.pow(2.0, e.to(_F64)).unsqueeze(-1)
    return e2m1_decode(e2m1_encode(blocks / s)).to(_F64) * s


def block_sq_error(blocks: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Squared error of each block quantized with exponent e (fp64, shape of e)."""
    return (_fake_quant(blocks, e) - blocks).pow(2).sum(-1)


def choose_exponent(blocks: torch.Tensor, rule: ExpRule = "mse") -> torch.Tensor:
    """Per-block shared exponent [...] int64 for fp64 blocks [..., 32] under `rule`."""
    require(rule in EXP_RULES, "rule", " or ".join(EXP_RULES), rule)
    amax = blocks.abs().amax(-1)
    if rule == "ocp":
        return ocp_exponent(amax)
    e0 = noclip_exponent(amax)
    if rule == "noclip":
        return e0
    e1 = (e0 - 1).clamp(min=_E_MIN)
    # Ties keep the no-clip exponent: it never saturates the block maximum.
    return torch.where(block_sq_error(blocks, e1) < block_sq_error(blocks, e0), e1, e0)


def mxfp4_quantize(w: torch.Tensor, rule: ExpRule = "mse") -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize W [N, K] to (weight [N, K/2] u8 e2m1 pairs, weight_scale [N, K/32] u8 e8m0).

    Contract: w float [N, K] with K % 32 == 0 and no NaN/inf.
    """
    check_tensor(w, "w", ndim=2)
    require(w.is_floating_point(), "w.dtype", "a floating dtype", w.dtype)
    n, k = w.shape
    check_multiple(k, MX_BLOCK, "K (w.shape[1])")
    wd = w.to(_F64)
    require(bool(torch.isfinite(wd).all()), "w", "finite values", "NaN/inf")
    blocks = wd.view(n, k // MX_BLOCK, MX_BLOCK)
    e = choose_exponent(blocks, rule)
    codes = e2m1_encode(blocks / torch.pow(2.0, e.to(_F64)).unsqueeze(-1)).view(n, k)
    return pack_fp4(codes), (e + E8M0_BIAS).to(torch.uint8)


def mxfp4_dequantize(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """W [N, K] fp64 from weight [N, K/2] u8 and weight_scale [N, K/32] u8 (e8m0; 255 = NaN)."""
    check_tensor(weight, "weight", dtype=torch.uint8, ndim=2)
    n, k = weight.shape[0], 2 * weight.shape[1]
    check_multiple(k, MX_BLOCK, "K (2 * weight.shape[1])")
    check_tensor(weight_scale, "weight_scale", dtype=torch.uint8, shape=[n, k // MX_BLOCK])
    vals = e2m1_decode(unpack_fp4(weight)).to(_F64).view(n, k // MX_BLOCK, MX_BLOCK)
    e = weight_scale.to(_F64) - E8M0_BIAS
    scale = torch.where(weight_scale == 255, torch.nan, torch.pow(2.0, e))
    return (vals * scale.unsqueeze(-1)).view(n, k)


# --------------------------------------------------------------------------- NVFP4


def _e4m3_codes(scale: torch.Tensor) -> torch.Tensor:
    """uint8 e4m3 codes of a scale tensor stored as torch.float8_e4m3fn or as raw uint8."""
    if scale.dtype == torch.uint8:
        return scale
    require(
        scale.dtype == torch.float8_e4m3fn,
        "weight_scale.dtype",
        "float8_e4m3fn or uint8",
        scale.dtype,
    )
    return scale.view(torch.uint8)


def nvfp4_dequantize(
    weight_packed: torch.Tensor, weight_scale: torch.Tensor, weight_global_scale: torch.Tensor
) -> torch.Tensor:
    """W [N, K] fp64 = e2m1 * e4m3 / global (compressed-tensors NVFP4, one scale per 16).

    Contract: weight_packed [N, K/2] u8, weight_scale [N, K/16] e4m3 (float8_e4m3fn or u8 codes),
    weight_global_scale [1] float (the divisor, 448 * 6 / amax at quantization).
    """
    check_tensor(weight_packed, "weight_packed", dtype=torch.uint8, ndim=2)
    n, k = weight_packed.shape[0], 2 * weight_packed.shape[1]
    check_multiple(k, NV_BLOCK, "K (2 * weight_packed.shape[1])")
    codes = _e4m3_codes(weight_scale)
    check_tensor(codes, "weight_scale", shape=[n, k // NV_BLOCK])
    check_tensor(weight_global_scale, "weight_global_scale")
    require(
        weight_global_scale.numel() == 1,
        "weight_global_scale.numel()",
        1,
        weight_global_scale.numel(),
    )
    g = weight_global_scale.to(_F64).reshape(())
    vals = e2m1_decode(unpack_fp4(weight_packed)).to(_F64).view(n, k // NV_BLOCK, NV_BLOCK)
    scale = e4m3_decode(codes).to(_F64) / g
    return (vals * scale.unsqueeze(-1)).view(n, k)


def nvfp4_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """compressed-tensors NVFP4 of W [N, K]: (weight_packed u8, weight_scale f8e4m3, global f32).

    As llm-compressor does it: global = 448 * 6 / amax(W) (fp32); per 16-block scale =
    e4m3(global * amax_b / 6); codes = e2m1(x * global / scale).
    """
    check_tensor(w, "w", ndim=2)
    n, k = w.shape
    check_multiple(k, NV_BLOCK, "K (w.shape[1])")
    wd = w.to(_F64)
    amax = float(wd.abs().max())
    glob = torch.tensor([E4M3_MAX * E2M1_MAX / amax if amax > 0 else 1.0], dtype=torch.float32)
    g = glob.to(_F64)[0]
    blocks = wd.view(n, k // NV_BLOCK, NV_BLOCK)
    sc_codes = e4m3_encode(g * blocks.abs().amax(-1) / E2M1_MAX)
    sc = e4m3_decode(sc_codes).to(_F64)
    safe = torch.where(sc > 0, sc, torch.ones_like(sc))
    codes = e2m1_encode(blocks * g / safe.unsqueeze(-1)).view(n, k)
    return pack_fp4(codes), sc_codes.view(torch.float8_e4m3fn), glob


def rel_rms(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """||approx - exact|| / ||exact|| in fp64 (the requant error metric, relRMS)."""
    a, b = approx.to(_F64), exact.to(_F64)
    return float((a - b).norm() / b.norm().clamp(min=1e-300))


# --------------------------------------------------------------------------- MXFP4-PARO linear


def paro_mxfp4_linear_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    group_size: int = 128,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp64 y = ((x * channel_scales) R^T) W^T (+ bias), W = MXFP4 dequant; x [..., K] -> [..., N].

    Contract: weight [N, K/2] u8, weight_scale [N, K/32] u8, pairs [krot, K] i16,
    theta [krot, K/2], channel_scales [1, K], bias [N] or None.
    """
    from .reference import rotate

    w = mxfp4_dequantize(weight, weight_scale)
    require(w.shape[1] == x.shape[-1], "x.shape[-1]", f"K = {w.shape[1]}", x.shape[-1])
    check_tensor(channel_scales, "channel_scales", shape=[1, w.shape[1]])
    y = rotate(x.to(_F64) * channel_scales.to(_F64)[0], pairs, theta, group_size) @ w.t()
    return y if bias is None else y + bias.to(_F64)


def quantize_paro_mxfp4(
    weight: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    group_size: int,
    rule: ExpRule = "mse",
) -> dict[str, torch.Tensor]:
    """MXFP4-PARO tensors of W [N, K]: MXFP4 of rot(W / channel_scales) plus the rotation.

    With R orthogonal, rot(x * cs) rot(W / cs)^T = x W^T (the z-lab identity, as in RTN int4).
    """
    from .reference import rotate

    w = rotate(weight.to(_F64) / channel_scales.to(_F64)[0], pairs, theta, group_size)
    packed, scale = mxfp4_quantize(w, rule)
    return {
        "weight": packed,
        "weight_scale": scale,
        "pairs": pairs,
        "theta": theta,
        "channel_scales": channel_scales,
    }
