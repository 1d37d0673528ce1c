"""fp64 reference: dequantization, rotation algebra and the activation/weight-side identity."""

from __future__ import annotations

import pytest
import torch
from _paro_fixtures import random_layer, random_rotation
from paro_kernels import reference as ref


def test_dequantize_is_group_asymmetric() -> None:
    layer = random_layer(256, 24, 64, seed=1)
    w = ref.dequantize(layer.qweight, layer.qzeros, layer.scales, 4, 64)
    assert w.shape == (24, 256) and w.dtype == torch.float64
    k, n = 130, 7  # spot-check one element by hand: group 130 // 64 = 2
    expect = (layer.codes[k, n] - layer.zeros[2, n]).double() * layer.scales[2, n].double()
    assert w[n, k].item() == expect.item()


def test_dequantize_int5_uses_fifth_bit() -> None:
    layer = random_layer(128, 64, 128, bits=5, seed=2)
    w = ref.dequantize(layer.qweight, layer.qzeros, layer.scales, 5, 128, **layer.hi())
    expect = (layer.codes - layer.zeros).double() * layer.scales.double()
    assert torch.equal(w, expect.t())
    assert int(layer.codes.max()) > 15 and int(layer.zeros.max()) > 15


def test_single_givens_sign_convention() -> None:
    # Layer 0 rotates local channels (a, b) = (3, 5) by t:
    # x_a' = c x_a + s x_b, x_b' = c x_b - s x_a
    g = 8
    pairs = torch.tensor([[3, 5, 0, 1, 2, 4, 6, 7]], dtype=torch.int16)
    theta = torch.tensor([[0.3, 0.0, 0.0, 0.0]], dtype=torch.float64)
    x = torch.arange(1.0, 9.0, dtype=torch.float64).view(1, 8)
    y = ref.rotate(x, pairs, theta, g)
    c, s = torch.cos(torch.tensor(0.3, dtype=torch.float64)), torch.sin(torch.tensor(0.3))
    assert torch.allclose(y[0, 3], c * 4 + s.double() * 6)
    assert torch.allclose(y[0, 5], c * 6 - s.double() * 4)
    untouched = [0, 1, 2, 4, 6, 7]
    assert torch.equal(y[0, untouched], x[0, untouched])


@pytest.mark.parametrize(("k", "g"), [(128, 128), (576, 64), (1536, 128)])
def test_rotation_inverse_is_identity_and_orthogonal(k: int, g: int) -> None:
    gen = torch.Generator().manual_seed(k)
    pairs, theta = random_rotation(8, k, g, gen)
    x = torch.randn(5, k, generator=gen, dtype=torch.float64)
    y = ref.rotate(x, pairs, theta, g)
    assert torch.allclose(ref.rotate(y, pairs, theta, g, inverse=True), x, rtol=0, atol=1e-13)
    assert torch.allclose(y.norm(dim=1), x.norm(dim=1), rtol=1e-14, atol=0)
    assert not torch.allclose(y, x)
    # rotation never mixes channels across groups
    if k // g >= 2:
        x1 = torch.zeros(1, k, dtype=torch.float64)
        x1[0, g + 1] = 1.0
        moved = ref.rotate(x1, pairs, theta, g).abs() > 0
        assert bool(moved[0, g : 2 * g].any()) and not bool(moved[0, :g].any())


@pytest.mark.parametrize(
    ("k", "n", "g", "bits"),
    [(128, 24, 128, 4), (576, 40, 64, 4), (1536, 72, 128, 4), (256, 64, 64, 5)],
)
def test_activation_rotation_equals_weight_rotation(k: int, n: int, g: int, bits: int) -> None:
    layer = random_layer(k, n, g, bits=bits, seed=k + n, bias=True)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    ya = ref.paro_linear_ref(x, *layer.args(), bits, g, layer.bias, **layer.hi())
    yw = ref.paro_linear_weight_side_ref(x, *layer.args(), bits, g, layer.bias, **layer.hi())
    assert ((ya - yw).abs().max() / ya.abs().max()).item() <= 1e-12


def test_contract_errors_name_the_argument() -> None:
    layer = random_layer(128, 16, 64, seed=3)
    x = torch.randn(2, 128, dtype=torch.float64)
    bad_pairs = layer.pairs.clone()
    bad_pairs[2, 5] = bad_pairs[2, 6]
    with pytest.raises(ValueError, match=r"pairs: expected a permutation of 0\.\.63"):
        ref.rotate(x, bad_pairs, layer.theta, 64)
    with pytest.raises(ValueError, match=r"theta.shape: expected \[8, 64\], got \[8, 63\]"):
        ref.rotate(x, layer.pairs, layer.theta[:, :63], 64)
    with pytest.raises(ValueError, match=r"pairs.dtype: expected torch.int16"):
        ref.rotate(x, layer.pairs.int(), layer.theta, 64)
    with pytest.raises(ValueError, match=r"scales.shape: expected \[2, 16\], got \[1, 16\]"):
        ref.dequantize(layer.qweight, layer.qzeros, layer.scales[:1], 4, 64)
    with pytest.raises(ValueError, match=r"N \(output features\) for bits=5: expected a positive"):
        ref.dequantize(layer.qweight, layer.qzeros, layer.scales, 5, 64)
    wide = random_layer(128, 32, 64, seed=3)
    with pytest.raises(ValueError, match=r"qweight_hi: expected a torch.Tensor, got NoneType"):
        ref.dequantize(wide.qweight, wide.qzeros, wide.scales, 5, 64)
    with pytest.raises(ValueError, match=r"channel_scales.shape: expected \[1, 128\]"):
        ref.paro_linear_ref(x, *layer.args()[:5], layer.channel_scales[:, :64], 4, 64)
