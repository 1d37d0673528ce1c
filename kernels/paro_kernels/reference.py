"""fp64 reference ops for the ParoQuant linear: the ground truth every fast path is tested against.

Rotation convention (learned from z-lab/paroquant `paroquant/kernels/cuda/rotation.cuh` and
`rotation.cu`, read not copied): activations are rotated within groups of G channels by `krot`
layers applied in order r = 0..krot-1. In layer r, group g, pair i rotates the local channels
a = pairs[r, g*G + 2i] and b = pairs[r, g*G + 2i + 1] (each 0..G-1; per layer and group the pairs
are a permutation of 0..G-1) by t = theta[r, g*G/2 + i]:

    x_a' =  cos(t) * x_a + sin(t) * x_b
    x_b' = -sin(t) * x_a + cos(t) * x_b

Channel scales multiply first. With R the resulting orthogonal map written on row vectors
(x -> x R^T), the linear is y = ((x * channel_scales) R^T) W^T + bias, W = dequant(Q) in [N, K].
Weight side: (x R^T) W^T = x (W R)^T, and W R applies the inverse rotation (layers in reverse
order, negated angles) to every row of W.
"""

from __future__ import annotations

import torch

from ._contract import check_multiple, check_tensor, require
from .formats import E4M3_MAX, e4m3_decode, e4m3_encode, unpack_awq, unpack_bitplane

_F64 = torch.float64


# --------------------------------------------------------------------------- dequantization


def unpack_codes(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    bits: int,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack weight codes [K, N] and zero codes [K/G, N] (int32) from the checkpoint tensors.

    Contract: qweight [K, N/8] int32, qzeros [K/G, N/8] int32; bits=5 adds qweight_hi [K, N/32]
    and qzeros_hi [K/G, N/32] int32 fifth-bit planes.
    """
    require(bits in (4, 5), "bits", "4 or 5", bits)
    check_tensor(qweight, "qweight", dtype=torch.int32, ndim=2)
    check_tensor(qzeros, "qzeros", dtype=torch.int32, shape=[None, qweight.shape[1]])
    codes, zeros = unpack_awq(qweight, "qweight"), unpack_awq(qzeros, "qzeros")
    if bits == 5:
        n = codes.shape[1]
        check_multiple(n, 32, "N (output features) for bits=5")
        check_tensor(qweight_hi, "qweight_hi", dtype=torch.int32, shape=[qweight.shape[0], n // 32])
        check_tensor(qzeros_hi, "qzeros_hi", dtype=torch.int32, shape=[qzeros.shape[0], n // 32])
        assert qweight_hi is not None and qzeros_hi is not None
        codes = codes | (unpack_bitplane(qweight_hi, "qweight_hi") << 4)
        zeros = zeros | (unpack_bitplane(qzeros_hi, "qzeros_hi") << 4)
    else:
        require(qweight_hi is None and qzeros_hi is None, "qweight_hi/qzeros_hi", "None", "set")
    return codes, zeros


def dequantize_codes(
    codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """(c - z) * s per group of `group_size` rows along K; returns W [N, K] fp64 (nn.Linear layout).

    Contract: codes [K, N] int, zeros [K/G, N] int, scales [K/G, N] float, K % G == 0.
    """
    check_tensor(codes, "codes", ndim=2)
    k, n = codes.shape
    check_multiple(k, group_size, f"K (codes.shape[0]) for group_size={group_size}")
    check_tensor(zeros, "zeros", shape=[k // group_size, n])
    check_tensor(scales, "scales", shape=[k // group_size, n])
    c = codes.to(_F64).view(k // group_size, group_size, n)
    w = (c - zeros.to(_F64).unsqueeze(1)) * scales.to(_F64).unsqueeze(1)
    return w.reshape(k, n).t()


def dequantize(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    bits: int = 4,
    group_size: int = 128,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantize packed int4/int5 group-asymmetric weights to W [N, K] fp64.

    Contract: qweight [K, N/8] int32, qzeros [K/G, N/8] int32, scales [K/G, N] f16/bf16/f32
    (+ qweight_hi [K, N/32], qzeros_hi [K/G, N/32] int32 for bits=5).
    """
    codes, zeros = unpack_codes(qweight, qzeros, bits, qweight_hi, qzeros_hi)
    check_tensor(scales, "scales", dtype=(torch.float16, torch.bfloat16, torch.float32, _F64))
    return dequantize_codes(codes, zeros, scales, group_size)


# --------------------------------------------------------------------------- rotation


def check_rotation(pairs: torch.Tensor, theta: torch.Tensor, k: int, group_size: int) -> None:
    """Check pairs [krot, K] int16 (per layer and group a permutation of 0..G-1), theta [krot, K/2].

    The permutation property is what makes each layer a product of disjoint Givens rotations.
    """
    check_multiple(k, group_size, f"K for group_size={group_size}")
    check_multiple(group_size, 2, "group_size")
    check_tensor(pairs, "pairs", dtype=torch.int16, shape=[None, k])
    check_tensor(theta, "theta", shape=[pairs.shape[0], k // 2])
    require(theta.is_floating_point(), "theta.dtype", "a floating dtype", theta.dtype)
    local = pairs.to(torch.int64).view(pairs.shape[0], k // group_size, group_size)
    ident = torch.arange(group_size, dtype=torch.int64)
    ok = bool((local.sort(dim=-1).values == ident).all())
    require(ok, "pairs", f"a permutation of 0..{group_size - 1} per layer and group", "not one")


def pair_indices(pairs: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Global channel indices (a, b) [krot, K/2] int64 of each Givens pair (local + offset)."""
    krot, k = pairs.shape
    local = pairs.to(torch.int64).view(krot, k // group_size, group_size // 2, 2)
    offs = (torch.arange(k // group_size, dtype=torch.int64) * group_size).view(1, -1, 1)
    a = (local[..., 0] + offs).reshape(krot, k // 2)
    b = (local[..., 1] + offs).reshape(krot, k // 2)
    return a, b


def _apply_layers(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    theta: torch.Tensor,
    layers: range,
    sign: float,
) -> torch.Tensor:
    y = x.clone()
    for r in layers:  # layers are sequential; each is disjoint pairs, vectorized over all of K
        t = theta[r].to(y.dtype) * sign
        c, s = torch.cos(t), torch.sin(t)
        xa, xb = y[..., a[r]], y[..., b[r]]
        y[..., a[r]] = c * xa + s * xb
        y[..., b[r]] = c * xb - s * xa
    return y


def rotate(
    x: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    group_size: int = 128,
    inverse: bool = False,
) -> torch.Tensor:
    """Apply the grouped Givens rotation x -> x R^T (or its inverse) in fp64; x [..., K].

    Contract: x [..., K] float, pairs [krot, K] int16, theta [krot, K/2] float.
    """
    check_tensor(x, "x")
    require(x.is_floating_point(), "x.dtype", "a floating dtype", x.dtype)
    k = x.shape[-1]
    check_rotation(pairs, theta, k, group_size)
    a, b = pair_indices(pairs, group_size)
    theta64 = theta.to(_F64)
    krot = pairs.shape[0]
    layers = range(krot - 1, -1, -1) if inverse else range(krot)
    return _apply_layers(x.to(_F64), a, b, theta64, layers, -1.0 if inverse else 1.0)


def rotate_weight(
    w: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, group_size: int = 128
) -> torch.Tensor:
    """W R for W [N, K]: the weight-side equivalent of rotating activations (fp64)."""
    return rotate(w, pairs, theta, group_size, inverse=True)


# --------------------------------------------------------------------------- the linear


def _check_linear_inputs(
    x: torch.Tensor, channel_scales: torch.Tensor, bias: torch.Tensor | None, n: int
) -> None:
    check_tensor(x, "x")
    require(x.is_floating_point(), "x.dtype", "a floating dtype", x.dtype)
    k = x.shape[-1]
    check_tensor(channel_scales, "channel_scales", shape=[1, k])
    if bias is not None:
        check_tensor(bias, "bias", shape=[n])


def paro_linear_ref(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    bits: int = 4,
    group_size: int = 128,
    bias: torch.Tensor | None = None,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp64 y = ((x * channel_scales) R^T) dequant(Q)^T (+ bias); x [..., K] -> y [..., N] fp64.

    Contract: x [..., K]; qweight [K, N/8] int32; qzeros [K/G, N/8] int32; scales [K/G, N];
    pairs [krot, K] int16; theta [krot, K/2]; channel_scales [1, K]; bias [N] or None.
    """
    w = dequantize(qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi)
    require(w.shape[1] == x.shape[-1], "x.shape[-1]", f"K = {w.shape[1]}", x.shape[-1])
    _check_linear_inputs(x, channel_scales, bias, w.shape[0])
    xr = rotate(x.to(_F64) * channel_scales.to(_F64)[0], pairs, theta, group_size)
    y = xr @ w.t()
    return y if bias is None else y + bias.to(_F64)


def paro_linear_weight_side_ref(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    bits: int = 4,
    group_size: int = 128,
    bias: torch.Tensor | None = None,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same linear computed by rotating the dequantized weights (W R) instead of activations."""
    w = dequantize(qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi)
    require(w.shape[1] == x.shape[-1], "x.shape[-1]", f"K = {w.shape[1]}", x.shape[-1])
    _check_linear_inputs(x, channel_scales, bias, w.shape[0])
    wr = rotate_weight(w, pairs, theta, group_size)
    y = (x.to(_F64) * channel_scales.to(_F64)[0]) @ wr.t()
    return y if bias is None else y + bias.to(_F64)


# --------------------------------------------------------------------------- W4A8 / W5A8

INT8_MAX = 127.0


def quantize_acts(
    x: torch.Tensor, act_format: str, act_scale: str, group_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 codes q [M, K] and scales [M, K/G] of x [M, K], by the plugin's rules.

    The rules of `plugin/paro_vllm/activations.py` (which the kernels package cannot import):
    scale = fp32(amax / top) per group or per row (top 448 e4m3, 127 int8; zero amax -> 1);
    q = RNE(x / scale) on the e4m3 grid (saturating) or to an integer clamped to +-127.
    """
    require(act_format in ("fp8", "int8"), "act_format", "fp8 or int8", act_format)
    require(act_scale in ("group", "token"), "act_scale", "group or token", act_scale)
    m, k = x.shape
    g = group_size
    xd = x.to(_F64).view(m, k // g, g)
    amax = xd.abs().amax(-1)
    if act_scale == "token":
        amax = amax.amax(-1, keepdim=True).expand(m, k // g)
    top = E4M3_MAX if act_format == "fp8" else INT8_MAX
    scale = (amax / top).to(torch.float32).to(_F64)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    xs = xd / scale.unsqueeze(-1)
    if act_format == "fp8":
        q = e4m3_decode(e4m3_encode(xs)).to(_F64)
    else:
        q = torch.round(xs).clamp(-INT8_MAX, INT8_MAX)
    return q.view(m, k), scale


def paro_linear_a8_ref(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    act_format: str,
    act_scale: str,
    bits: int = 4,
    group_size: int = 128,
    bias: torch.Tensor | None = None,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp64 y = act_quant((x * cs) R^T) dequant(Q)^T (+ bias): the W4A8 / W5A8 linear.

    Contract: as `paro_linear_ref` with x [M, K]; the quantization is `quantize_acts`.
    """
    w = dequantize(qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi)
    require(w.shape[1] == x.shape[-1], "x.shape[-1]", f"K = {w.shape[1]}", x.shape[-1])
    _check_linear_inputs(x, channel_scales, bias, w.shape[0])
    xr = rotate(x.to(_F64) * channel_scales.to(_F64)[0], pairs, theta, group_size)
    q, sc = quantize_acts(xr, act_format, act_scale, group_size)
    m, k = q.shape
    xq = (q.view(m, k // group_size, group_size) * sc.unsqueeze(-1)).view(m, k)
    y = xq @ w.t()
    return y if bias is None else y + bias.to(_F64)
