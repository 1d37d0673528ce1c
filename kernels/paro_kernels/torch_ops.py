"""Fast torch path of the ParoQuant linear (CPU or any device): what the vLLM CPU plugin calls.

Same math and conventions as `reference.py`, in fp32 (fp64 stays fp64): the rotation is vectorized
over all groups and pairs of a layer (the only Python loop is over the `krot` layers), the
dequantization over the whole matrix. Computing in fp32 and rounding once at the end keeps a
bf16 result at the output-rounding floor of the fp64 reference.
"""

from __future__ import annotations

import torch

from ._contract import check_tensor, require
from .reference import check_rotation, pair_indices, unpack_codes

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def dequantize_weight(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    bits: int = 4,
    group_size: int = 128,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Dequantize packed int4/int5 weights to W^T [K, N] in `dtype` (layout of the AWQ tensors).

    Contract: qweight [K, N/8] int32, qzeros [K/G, N/8] int32, scales [K/G, N] float
    (+ qweight_hi [K, N/32], qzeros_hi [K/G, N/32] int32 for bits=5).
    """
    codes, zeros = unpack_codes(qweight, qzeros, bits, qweight_hi, qzeros_hi)
    k, n = codes.shape
    require(k % group_size == 0, "K (qweight.shape[0])", f"a multiple of {group_size}", k)
    check_tensor(scales, "scales", dtype=_FLOATS, shape=[k // group_size, n])
    require(qzeros.shape[0] == k // group_size, "qzeros.shape[0]", k // group_size, qzeros.shape[0])
    c = codes.view(k // group_size, group_size, n).to(dtype)
    w = (c - zeros.to(dtype).unsqueeze(1)) * scales.to(dtype).unsqueeze(1)
    return w.view(k, n)


def rotate_activations(
    x: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor | None = None,
    group_size: int = 128,
) -> torch.Tensor:
    """(x * channel_scales) R^T in fp32 (fp64 if x is fp64); x [..., K] -> same shape.

    Contract: pairs [krot, K] int16, theta [krot, K/2] float, channel_scales [1, K] or None.
    """
    check_tensor(x, "x", dtype=_FLOATS)
    k = x.shape[-1]
    check_rotation(pairs, theta, k, group_size)
    ct = _compute_dtype(x.dtype)
    y = x.to(ct).reshape(-1, k)
    if channel_scales is not None:
        check_tensor(channel_scales, "channel_scales", dtype=_FLOATS, shape=[1, k])
        y = y * channel_scales.to(ct)
    else:
        y = y.clone()
    a, b = pair_indices(pairs, group_size)
    t = theta.to(ct)
    cos, sin = torch.cos(t), torch.sin(t)
    for r in range(pairs.shape[0]):  # layers are sequential by definition
        ya, yb = y[:, a[r]], y[:, b[r]]
        y[:, a[r]] = cos[r] * ya + sin[r] * yb
        y[:, b[r]] = cos[r] * yb - sin[r] * ya
    return y.view(x.shape)


def paro_linear(
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
    *,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> torch.Tensor:
    """y = ((x * channel_scales) R^T) dequant(Q)^T (+ bias); x [..., K] -> y [..., N] in x.dtype.

    Contract: x [..., K] f16/bf16/f32/f64; qweight [K, N/8] int32; qzeros [K/G, N/8] int32;
    scales [K/G, N] float; pairs [krot, K] int16; theta [krot, K/2]; channel_scales [1, K];
    bias [N] or None; for bits=5 also qweight_hi [K, N/32] and qzeros_hi [K/G, N/32] int32.
    """
    check_tensor(x, "x", dtype=_FLOATS)
    check_tensor(qweight, "qweight", dtype=torch.int32, ndim=2)
    k = x.shape[-1]
    require(qweight.shape[0] == k, "qweight.shape[0]", f"K = x.shape[-1] = {k}", qweight.shape[0])
    ct = _compute_dtype(x.dtype)
    w = dequantize_weight(qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi, ct)
    n = w.shape[1]
    if bias is not None:
        check_tensor(bias, "bias", dtype=_FLOATS, shape=[n])
    xr = rotate_activations(x, pairs, theta, channel_scales, group_size).reshape(-1, k)
    y = xr @ w if bias is None else torch.addmm(bias.to(ct), xr, w)
    return y.to(x.dtype).view(*x.shape[:-1], n)
