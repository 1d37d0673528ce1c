"""The int4/int5 `paroquant` reference path honours PARO_ACT_FORMAT / PARO_ACT_SCALE /
PARO_ZP_EPILOGUE / PARO_DECODE_MAX_M (as `activations.py` defines them) on real vLLM layers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from paro_kernels.checkpoint import make_rotation, quantize_linear
from paro_kernels.formats import e4m3_decode
from paro_kernels.reference import paro_linear_ref, rotate, unpack_codes
from paro_vllm import activations as act
from paro_vllm import paroquant as pq
from paro_vllm import reference_backend as rb
from paro_vllm.activations import ActConfig

F64 = torch.float64
G, KROT, K = 64, 4, 256
PARTS = (128, 64)  # two output partitions with different rotations: two runs
BF16_FLOOR = 2e-3  # rel (Frobenius) of a bf16-rounded output vs fp64, with margin
# Same quantized activations: the bf16 output floor plus the rare activation rounding that the
# fp32 rotation (vs fp64) flips.
TIGHT = 3e-3
# Vs exact activations (loose): the activation quantization itself, measured here at most 2.9e-2
# for fp8 (seed: e4m3 per-token ~2.6e-2 on the real checkpoint) and 2.4e-2 for int8 (per-token at
# M=80; group-local rotations keep a x20 channel's group coarse); bounds with ~40% margin.
LOOSE = {"fp8": 4e-2, "int8": 3.5e-2, "bf16": BF16_FLOOR}
MODES = [(fmt, scale) for fmt in ("fp8", "int8") for scale in ("token", "group")] + [
    ("bf16", "token")
]


def _knobs(fmt: str = "fp8", scale: str = "token", zpe: str = "0", band: int = 64) -> dict:
    return {
        "PARO_ACT_FORMAT": fmt,
        "PARO_ACT_SCALE": scale,
        "PARO_ZP_EPILOGUE": zpe,
        "PARO_DECODE_MAX_M": str(band),
    }


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.to(F64) - ref).norm() / ref.norm())


def _outlier_acts(m: int, seed: int) -> torch.Tensor:
    """bf16 activations with a few large channels (what the rotations have to spread)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, K, generator=gen)
    x[:, torch.randperm(K, generator=gen)[:4]] *= 20
    return x.to(torch.bfloat16)


def _tensors(bits: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for i, n in enumerate(PARTS):
        gen = torch.Generator().manual_seed(100 * bits + i)
        pairs, theta = make_rotation(K, G, KROT, "random", gen)
        cs = (torch.rand(1, K, generator=gen) + 0.5).to(torch.float16)
        out.append(
            quantize_linear(torch.randn(n, K, generator=gen) * 0.05, pairs, theta, cs, bits, G)
        )
    return out


def _build(bits: int, knobs: dict, tensors: list[dict[str, torch.Tensor]]) -> Any:
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    cfg = pq.ParoQuantConfig(bits, G, KROT, knobs=knobs)
    layer = MergedColumnParallelLinear(
        K, list(PARTS), bias=False, quant_config=cfg, params_dtype=torch.bfloat16
    )
    for shard, q in enumerate(tensors):
        for name, t in q.items():
            param = getattr(layer, name)
            param.weight_loader(param, t, shard)
    layer.quant_method.process_weights_after_loading(layer)
    return layer


@pytest.fixture(scope="module")
def built(vllm_ctx: None) -> Iterator[dict[Any, Any]]:
    """Per (bits, zpe): a two-partition merged linear, its checkpoint tensors and the markers."""
    saved = pq.STATE  # a fresh marker state for this module's layers only
    out: dict[Any, Any] = {}
    for bits in (4, 5):
        tensors = _tensors(bits)
        for zpe in ("0", "1"):
            pq.STATE = pq._LoadState()
            layer = _build(bits, _knobs("int8", "group", zpe), tensors)
            out[bits, zpe] = (layer, tensors, pq.STATE.lines)
    pq.STATE = saved
    yield out


def _same_acts_ref(x: torch.Tensor, tensors: list[dict], bits: int, cfg: ActConfig) -> torch.Tensor:
    """fp64: rotate, quantize the activations with activations.py, the in-loop int GEMM."""
    parts = []
    for q in tensors:
        xr = rotate(x.to(F64) * q["channel_scales"].to(F64)[0], q["pairs"], q["theta"], G)
        codes, zeros = unpack_codes(
            q["qweight"], q["qzeros"], bits, q.get("qweight_hi"), q.get("qzeros_hi")
        )
        parts.append(act.int_linear(xr, codes, zeros, q["scales"], bits, cfg))
    return torch.cat(parts, dim=-1)


def _exact_ref(x: torch.Tensor, tensors: list[dict], bits: int) -> torch.Tensor:
    return torch.cat([paro_linear_ref(x, **q, bits=bits, group_size=G) for q in tensors], dim=-1)


# --------------------------------------------------------------------------- the fast quantizer


def test_e4m3_rounding_matches_the_codec_on_every_value_and_midpoint() -> None:
    vals = e4m3_decode(torch.arange(256, dtype=torch.uint8)).to(F64)
    vals = vals[~vals.isnan()].unique()
    mids = (vals[1:] + vals[:-1]) / 2  # exact ties: RNE must pick the even code
    up, down = torch.tensor(1e9, dtype=F64), torch.tensor(-1e9, dtype=F64)
    extra = torch.tensor([464.0, 500.0, -1e6, 1e-300, 2.0**-10, 3 * 2.0**-11], dtype=F64)
    v = torch.cat([vals, mids, torch.nextafter(mids, up), torch.nextafter(mids, down), extra])
    cfg = ActConfig("fp8", "token", group_size=v.numel())
    want = act.quantize_acts(v.view(1, -1), cfg)
    got = rb._e4m3_round(v / want.scale[0, 0])
    assert torch.equal(got, want.q[0])


@pytest.mark.parametrize(("fmt", "scale"), MODES[:4])
def test_fast_quantizer_is_bit_identical_to_activations_py(fmt: str, scale: str) -> None:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(33, 512, generator=gen) * torch.logspace(-9, 3, 512)[torch.randperm(512)]
    x[3] = 0  # a zero row (scale 1, codes 0)
    x[5, :G] = 0  # a zero group
    cfg = ActConfig(fmt, scale, group_size=G)  # type: ignore[arg-type]
    assert torch.equal(rb.fake_quant(x, cfg), act.fake_quant_acts(x, cfg).float())


# --------------------------------------------------------------------------- served layers


@pytest.mark.parametrize("bits", [4, 5])
@pytest.mark.parametrize("zpe", ["0", "1"])
@pytest.mark.parametrize(("fmt", "scale"), MODES)
@pytest.mark.parametrize("m", [1, 7, 80])
def test_layer_output_matches_the_fp64_reference_of_its_quantized_activations(
    built: dict[Any, Any], bits: int, zpe: str, fmt: str, scale: str, m: int
) -> None:
    layer, tensors, _ = built[bits, zpe]
    knobs = _knobs(fmt, scale, zpe)
    layer.quant_method.quant_config.knobs = knobs  # read per call, as apply() does
    x = _outlier_acts(m, seed=m + bits)
    y = layer(x)[0]
    assert y.dtype == torch.bfloat16 and y.shape == (m, sum(PARTS))
    exact = _exact_ref(x, tensors, bits)
    if fmt == "bf16":  # the W4A16 path: fp32 rotated activations, no quantization
        assert _rel(y, exact) <= BF16_FLOOR
        return
    cfg = act.act_config(knobs, m, G)
    assert cfg.scale == ("group" if m <= 64 else scale)  # the decode band is always per-group
    assert _rel(y, _same_acts_ref(x, tensors, bits, cfg)) <= TIGHT
    assert _rel(y, exact) <= LOOSE[fmt]


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_decode_band_edge_switches_the_scale_granularity(built: dict[Any, Any], fmt: str) -> None:
    layer, tensors, _ = built[4, "0"]
    x = _outlier_acts(7, seed=3)
    token = _same_acts_ref(x, tensors, 4, ActConfig(fmt, "token", group_size=G))  # type: ignore[arg-type]
    group = _same_acts_ref(x, tensors, 4, ActConfig(fmt, "group", group_size=G))  # type: ignore[arg-type]
    assert _rel(token, group) > 3 * TIGHT  # the two modes are distinguishable here
    for band, want in ((7, group), (6, token)):  # M=7 inside the band, then just above it
        layer.quant_method.quant_config.knobs = _knobs(fmt, "token", band=band)
        assert _rel(layer(x)[0], want) <= TIGHT


@pytest.mark.parametrize("bits", [4, 5])
@pytest.mark.parametrize(("fmt", "scale"), MODES)
def test_zero_point_epilogue_equals_the_in_loop_form(
    built: dict[Any, Any], bits: int, fmt: str, scale: str
) -> None:
    inloop, _, _ = built[bits, "0"]
    epi, _, _ = built[bits, "1"]
    assert all(r.sz is None for r in inloop.paro_runs)
    assert all(r.sz is not None for r in epi.paro_runs)
    x = _outlier_acts(80, seed=bits).float()
    cfg = act.act_config(_knobs(fmt, scale), 80, G)
    a = rb.apply(inloop.paro_runs, x, None, cfg)
    b = rb.apply(epi.paro_runs, x, None, cfg)
    assert _rel(b, a.to(F64)) <= 1e-5  # fp32 summation order only


def test_default_config_is_w4a16_and_from_config_reads_the_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert pq.ParoQuantConfig(4, G, KROT).knobs["PARO_ACT_FORMAT"] == "bf16"
    for name, value in _knobs("int8", "group", "1", 32).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PARO_BACKEND", "reference")
    raw = {"quant_method": "paroquant", "bits": 5, "group_size": G, "krot": KROT}
    cfg = pq.ParoQuantConfig.from_config(raw)
    assert cfg.knobs == _knobs("int8", "group", "1", 32)
    assert "act=int8/group zpe=1" in repr(cfg)


# --------------------------------------------------------------------------- the boot marker


def test_marker_shows_the_served_activation_mode(built: dict[Any, Any]) -> None:
    for bits, zpe in ((4, "0"), (5, "1")):
        assert built[bits, zpe][2] == [
            f"paro-vllm: method=paroquant backend=reference bits={bits} layers=2/2 "
            f"version=0.1.0 act=int8/group zpe={zpe} kernels=precompiled:0 jit:0 source=none"
        ]


@pytest.mark.parametrize(
    ("knobs", "backend", "label"),
    [
        (_knobs(), "reference", "act=fp8/token zpe=0"),  # the registry defaults
        (_knobs("int8", "group", "1"), "reference", "act=int8/group zpe=1"),
        (_knobs("bf16", "token", "1"), "reference", "act=bf16 zpe=1"),
        (_knobs("int8", "group", "1"), "triton", "act=int8/group zpe=1"),  # W4A8 kernels
    ],
)
def test_act_label(knobs: dict, backend: str, label: str) -> None:
    assert pq.act_label(knobs, backend) == label
    line = pq.marker_line(backend, 4, 210, 210, label)
    assert line.startswith(
        f"paro-vllm: method=paroquant backend={backend} bits=4 layers=210/210 version="
    )
    assert line.endswith(f" {label} kernels=precompiled:0 jit:0 source=none")
