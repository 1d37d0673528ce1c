"""The torch fast path against the fp64 reference, across odd sizes and group boundaries."""

from __future__ import annotations

import pytest
import torch
from _paro_fixtures import random_layer
from paro_kernels import reference as ref
from paro_kernels.torch_ops import dequantize_weight, paro_linear, rotate_activations


def _rel(y: torch.Tensor, r: torch.Tensor) -> float:
    return ((y.double() - r).norm() / r.norm()).item()


# N odd multiples of 8, large enough that the Frobenius error statistic is stable at M = 1.
CASES = [(64, 88, 64), (128, 136, 128), (576, 200, 64), (1536, 264, 128)]


@pytest.mark.parametrize(("k", "n", "g"), CASES)
@pytest.mark.parametrize("m", [1, 3, 17])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paro_linear_matches_fp64_reference(
    k: int, n: int, g: int, m: int, dtype: torch.dtype
) -> None:
    layer = random_layer(k, n, g, seed=k * 31 + n, bias=m == 3)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
    y = paro_linear(x, *layer.args(), 4, g, layer.bias)
    r = ref.paro_linear_ref(x, *layer.args(), 4, g, layer.bias)
    assert y.dtype == dtype and y.shape == (m, n)
    assert _rel(y, r) <= (2e-3 if dtype == torch.bfloat16 else 1e-5)
    if dtype == torch.bfloat16:
        # fp32 inside, one rounding at the end: nearly every output is the rounded reference.
        assert (y == r.to(dtype)).double().mean().item() >= 0.97


def test_paro_linear_int5_and_leading_dims() -> None:
    layer = random_layer(192, 96, 64, bits=5, seed=5, bias=True)
    x = torch.randn(2, 3, 192, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    y = paro_linear(x, *layer.args(), 5, 64, layer.bias, **layer.hi())
    r = ref.paro_linear_ref(x, *layer.args(), 5, 64, layer.bias, **layer.hi())
    assert y.shape == (2, 3, 96)
    assert _rel(y, r) <= 2e-3


def test_pieces_match_reference_exactly_in_fp64() -> None:
    layer = random_layer(576, 40, 64, seed=8)
    w = dequantize_weight(layer.qweight, layer.qzeros, layer.scales, 4, 64, dtype=torch.float64)
    assert torch.equal(w.t(), ref.dequantize(layer.qweight, layer.qzeros, layer.scales, 4, 64))
    x = torch.randn(4, 576, dtype=torch.float64)
    xr = rotate_activations(x, layer.pairs, layer.theta, layer.channel_scales, 64)
    expect = ref.rotate(x * layer.channel_scales.double(), layer.pairs, layer.theta, 64)
    assert torch.allclose(xr, expect, rtol=0, atol=1e-13)


def test_paro_linear_contract() -> None:
    layer = random_layer(128, 16, 128, seed=4)
    with pytest.raises(ValueError, match=r"qweight.shape\[0\]: expected K = x.shape\[-1\] = 64"):
        paro_linear(torch.randn(1, 64), *layer.args())
    with pytest.raises(ValueError, match=r"bias.shape: expected \[16\], got \[8\]"):
        paro_linear(torch.randn(1, 128), *layer.args(), bias=torch.zeros(8))
    with pytest.raises(ValueError, match=r"x.dtype"):
        paro_linear(torch.zeros(1, 128, dtype=torch.int32), *layer.args())
