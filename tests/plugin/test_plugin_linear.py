"""The served linear on real vLLM layers and real demo-model tensors vs the fp64 reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("vllm")

from paro_kernels.checkpoint import make_rotation, quantize_linear
from paro_kernels.reference import paro_linear_ref
from paro_vllm import reference_backend
from paro_vllm.paroquant import STATE, ParoQuantConfig, marker_line, rotation_runs

SUFFIXES = ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales")
G, KROT = 64, 8
BF16_FLOOR = 2e-3  # rel (Frobenius) of a bf16-rounded output vs fp64, with margin


def _cfg() -> ParoQuantConfig:
    return ParoQuantConfig(4, G, KROT)


def _load(layer: torch.nn.Module, tensors: dict[str, Any], prefix: str, shard: object) -> None:
    for s in SUFFIXES:
        param = getattr(layer, s)
        if shard is None:
            param.weight_loader(param, tensors[f"{prefix}.{s}"])
        else:
            param.weight_loader(param, tensors[f"{prefix}.{s}"], shard)


def _ref(x: torch.Tensor, t: dict[str, Any], prefixes: list[str]) -> torch.Tensor:
    parts = [
        paro_linear_ref(x, *(t[f"{p}.{s}"] for s in SUFFIXES), bits=4, group_size=G)
        for p in prefixes
    ]
    return torch.cat(parts, dim=-1)


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).norm() / ref.norm())


def _acts(t: dict[str, Any], m: int, k: int) -> torch.Tensor:
    """Real activations for K=576 (embedding rows of the demo model), seeded normals otherwise."""
    if k == t["model.embed_tokens.weight"].shape[1]:
        ids = torch.arange(m) * 977 % t["model.embed_tokens.weight"].shape[0]
        return t["model.embed_tokens.weight"][ids].to(torch.bfloat16) * 30
    gen = torch.Generator().manual_seed(m)
    return torch.randn(m, k, generator=gen).to(torch.bfloat16)


@pytest.fixture
def layers(vllm_ctx: None, paro_tensors: dict[str, Any]) -> dict[str, Any]:
    """Layer 0's four vLLM linears built with ParoQuant and loaded like LlamaForCausalLM does."""
    from vllm.model_executor.layers.linear import (
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )

    cfg, t, dt = _cfg(), paro_tensors, torch.bfloat16
    pre = "model.layers.0"
    qkv = QKVParallelLinear(576, 64, 9, 3, bias=False, quant_config=cfg, params_dtype=dt)
    o = RowParallelLinear(576, 576, bias=False, quant_config=cfg, params_dtype=dt)
    gu = MergedColumnParallelLinear(
        576, [1536, 1536], bias=False, quant_config=cfg, params_dtype=dt
    )
    down = RowParallelLinear(1536, 576, bias=False, quant_config=cfg, params_dtype=dt)
    for shard, name in zip("qkv", ("q_proj", "k_proj", "v_proj"), strict=True):
        _load(qkv, t, f"{pre}.self_attn.{name}", shard)
    _load(o, t, f"{pre}.self_attn.o_proj", None)
    _load(gu, t, f"{pre}.mlp.gate_proj", 0)
    _load(gu, t, f"{pre}.mlp.up_proj", 1)
    _load(down, t, f"{pre}.mlp.down_proj", None)
    for layer in (qkv, o, gu, down):
        layer.quant_method.process_weights_after_loading(layer)
    return {
        "qkv": (qkv, [f"{pre}.self_attn.{p}_proj" for p in "qkv"]),
        "o": (o, [f"{pre}.self_attn.o_proj"]),
        "gate_up": (gu, [f"{pre}.mlp.gate_proj", f"{pre}.mlp.up_proj"]),
        "down": (down, [f"{pre}.mlp.down_proj"]),
    }


def test_parameters_have_the_zlab_shapes(layers: dict[str, Any]) -> None:
    qkv = layers["qkv"][0]
    shapes = {n: tuple(p.shape) for n, p in qkv.named_parameters()}
    assert shapes == {
        "qweight": (576, 120),
        "qzeros": (9, 120),
        "scales": (9, 960),
        "pairs": (3, KROT, 576),
        "theta": (3, KROT, 288),
        "channel_scales": (3, 1, 576),
    }
    assert qkv.scales.dtype == torch.float16  # never cast: it is the dequantization grid


def test_loaders_put_each_tensor_in_its_partition(
    layers: dict[str, Any], paro_tensors: dict[str, Any]
) -> None:
    qkv, prefixes = layers["qkv"]
    k_qweight = paro_tensors[f"{prefixes[1]}.qweight"]
    assert torch.equal(qkv.qweight.data[:, 72:96], k_qweight)  # q: 576/8 cols, k: 192/8
    assert torch.equal(qkv.scales.data[:, 576:768], paro_tensors[f"{prefixes[1]}.scales"])
    assert torch.equal(qkv.pairs.data[2], paro_tensors[f"{prefixes[2]}.pairs"])
    assert [(r.n0, r.n1) for r in qkv.paro_runs] == [(0, 576), (576, 768), (768, 960)]


@pytest.mark.parametrize("name", ["qkv", "o", "gate_up", "down"])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_served_output_matches_fp64_reference(
    layers: dict[str, Any], paro_tensors: dict[str, Any], name: str, m: int
) -> None:
    layer, prefixes = layers[name]
    x = _acts(paro_tensors, m, layer.input_size)
    y = layer(x)[0]
    assert y.dtype == torch.bfloat16 and y.shape == (m, layer.paro_n)
    assert _rel(y, _ref(x, paro_tensors, prefixes)) <= BF16_FLOOR


def test_apply_keeps_leading_dims(layers: dict[str, Any]) -> None:
    layer = layers["gate_up"][0]
    x = torch.randn(2, 3, 576).to(torch.bfloat16)
    y = layer.quant_method.apply(layer, x)
    assert y.shape == (2, 3, 3072)
    one = layer.quant_method.apply(layer, x[1, 2:3])[0]  # GEMM blocking differs with M: ~1 ulp
    torch.testing.assert_close(y[1, 2], one, rtol=1e-2, atol=1e-2)


def test_marker_counts_projections() -> None:
    assert marker_line("reference", 4, 210, 210) == (
        "paro-vllm: method=paroquant backend=reference bits=4 layers=210/210 version=0.1.0 "
        "kernels=precompiled:0 jit:0 source=none"  # reference backend; outside a paroctl image
    )
    assert STATE.projections >= 7 and STATE.emitted in (True, False)


# --------------------------------------------------------------------------- merged partitions


def _quantized(w: torch.Tensor, seed: int, rotation: str = "random") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    pairs, theta = make_rotation(w.shape[1], G, KROT, rotation, gen)
    cs = (torch.rand(1, w.shape[1], generator=gen) + 0.5).to(torch.float16)
    return quantize_linear(w, pairs, theta, cs, 4, G)


def test_four_partitions_with_a_shared_rotation_dedup_to_two_runs(
    vllm_ctx: None, paro_tensors: dict[str, Any]
) -> None:
    """in_proj_qkvz: vLLM sees 4 partitions (q, k, v, z); q/k/v come from ONE checkpoint tensor."""
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    t = paro_tensors
    bf16 = {
        p: torch.randn(n, 576, generator=torch.Generator().manual_seed(i)) * 0.05
        for i, (p, n) in enumerate((("qkv", 960), ("z", 576)))
    }
    qkv_q, z_q = _quantized(bf16["qkv"], 1), _quantized(bf16["z"], 2)
    layer = MergedColumnParallelLinear(
        576, [576, 192, 192, 576], bias=False, quant_config=_cfg(), params_dtype=torch.bfloat16
    )
    before = STATE.projections
    for s in SUFFIXES:
        param = getattr(layer, s)
        param.weight_loader(param, qkv_q[s], (0, 1, 2))
        param.weight_loader(param, z_q[s], 3)
    assert STATE.projections - before == 2  # checkpoint projections, not vLLM partitions
    layer.quant_method.process_weights_after_loading(layer)
    assert [(r.n0, r.n1) for r in layer.paro_runs] == [(0, 960), (960, 1536)]
    x = _acts(t, 5, 576)
    ref = torch.cat(
        [paro_linear_ref(x, *(q[s] for s in SUFFIXES), bits=4, group_size=G) for q in (qkv_q, z_q)],
        dim=-1,
    )
    assert _rel(layer(x)[0], ref) <= BF16_FLOOR


def test_only_adjacent_identical_rotations_merge() -> None:
    k = 128
    gen = torch.Generator().manual_seed(0)
    a = make_rotation(k, G, 2, "random", gen)
    b = make_rotation(k, G, 2, "random", gen)
    cs = torch.ones(1, k, dtype=torch.float16)

    def stack(*rots: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return (
            torch.stack([r[0] for r in rots]),
            torch.stack([r[1] for r in rots]),
            torch.stack([cs] * len(rots)),
        )

    runs = rotation_runs(*stack(a, a, b, a), [8, 8, 16, 8])
    assert [(r[0], r[1]) for r in runs] == [(0, 16), (16, 32), (32, 40)]
    scaled = stack(a, a)
    scaled[2][1] *= 2  # same rotation, different channel scales: not the same transform
    assert len(rotation_runs(*scaled, [8, 8])) == 2


def test_a_partition_never_loaded_fails_loudly(vllm_ctx: None) -> None:
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear

    layer = MergedColumnParallelLinear(
        128, [64, 64], bias=False, quant_config=_cfg(), params_dtype=torch.bfloat16
    )
    q = _quantized(torch.randn(64, 128) * 0.05, 3)
    for s in SUFFIXES:
        getattr(layer, s).weight_loader(getattr(layer, s), q[s], 0)
    with pytest.raises(ValueError, match=r"pairs: partitions \[1\] not loaded"):
        layer.quant_method.process_weights_after_loading(layer)
    STATE.created -= 1  # this layer never finishes loading; keep the marker counts honest


# --------------------------------------------------------------------------- tensor parallel


def test_row_parallel_k_shards_sum_to_the_full_output(paro_tensors: dict[str, Any]) -> None:
    """Row-parallel: each rank holds a K slice (whole groups, group-local pairs); sum = full."""
    from paro_vllm.paroquant import rotation_loader

    t, pre, tp = paro_tensors, "model.layers.5.mlp.down_proj", 2
    k, n = 1536, 576
    x = _acts(t, 4, k).float()
    full = reference_backend.prepare(
        t[f"{pre}.qweight"],
        t[f"{pre}.qzeros"],
        t[f"{pre}.scales"],
        [(0, n, t[f"{pre}.pairs"], t[f"{pre}.theta"], t[f"{pre}.channel_scales"])],
        4,
        G,
    )
    total = torch.zeros(4, n)
    ks = k // tp
    for rank in range(tp):
        fake_layer = torch.nn.Module()
        fake_layer.tp_rank = rank
        rot = {}
        for name, width in (("pairs", ks), ("theta", ks // 2), ("channel_scales", ks)):
            rows = t[f"{pre}.{name}"].shape[0]
            param = torch.nn.Parameter(
                torch.zeros(1, rows, width, dtype=t[f"{pre}.{name}"].dtype), requires_grad=False
            )
            param.paro_loaded = set()
            rotation_loader(fake_layer, 1, counts=False)(param, t[f"{pre}.{name}"])
            rot[name] = param.data[0]
        g0, g1 = rank * ks // G, (rank + 1) * ks // G
        shard = reference_backend.prepare(
            t[f"{pre}.qweight"][rank * ks : (rank + 1) * ks],
            t[f"{pre}.qzeros"][g0:g1],
            t[f"{pre}.scales"][g0:g1],
            [(0, n, rot["pairs"], rot["theta"], rot["channel_scales"])],
            4,
            G,
        )
        total += reference_backend.apply(shard, x[:, rank * ks : (rank + 1) * ks], None)
    want = reference_backend.apply(full, x, None)
    assert float((total - want).norm() / want.norm()) < 1e-5


def test_column_parallel_shards_n_and_keeps_every_rotation(vllm_ctx: None) -> None:
    """Column-parallel: rank r loads columns [r*N/tp, (r+1)*N/tp); rotations are whole (K)."""
    from paro_vllm.paroquant import ParoQuantLinearMethod

    q = _quantized(torch.randn(128, 128) * 0.05, 4)
    layer = torch.nn.Module()
    layer.tp_rank = 1
    method = ParoQuantLinearMethod(_cfg())
    method.create_weights(layer, 128, [64], 128, 128, torch.bfloat16, weight_loader=None)
    for s in SUFFIXES:
        param = getattr(layer, s)
        if hasattr(param, "load_column_parallel_weight"):
            param.tp_rank = 1
            param.load_column_parallel_weight(q[s])
        else:
            param.weight_loader(param, q[s])
    assert torch.equal(layer.qweight.data, q["qweight"][:, 8:16])
    assert torch.equal(layer.scales.data, q["scales"][:, 64:128])
    assert torch.equal(layer.pairs.data[0], q["pairs"])
    STATE.created -= 1  # a bare module, never processed


# --------------------------------------------------------------------------- Triton backend wiring
# The kernels need a GPU (tests/kernels/test_triton_*_gpu.py); here the CPU side: which layers the
# backend takes, what the marker says, and that every call hands it the per-call activation mode.


def _act_knobs(fmt: str, scale: str, zpe: str, band: int = 16) -> dict[str, str]:
    return {
        "PARO_ACT_FORMAT": fmt,
        "PARO_ACT_SCALE": scale,
        "PARO_ZP_EPILOGUE": zpe,
        "PARO_DECODE_MAX_M": str(band),
    }


@pytest.mark.parametrize(
    ("bits", "sizes", "fmt", "k", "why"),
    [
        (4, [576, 64, 64], "bf16", 576, None),
        (4, [576, 64, 64], "fp8", 576, None),
        (5, [576, 64, 64], "int8", 576, None),
        (5, [576, 64, 64], "bf16", 576, "bits=5 with PARO_ACT_FORMAT=bf16"),
        (5, [576, 48], "int8", 576, "N and K multiples of 32"),
        (4, [200, 136], "fp8", 576, "not multiples of 16"),
        (6, [64], "int8", 576, "bits=6"),
    ],
)
def test_triton_backend_takes_int4_and_int5_by_mode(
    bits: int, sizes: list[int], fmt: str, k: int, why: str | None
) -> None:
    from paro_vllm import triton_backend

    got = triton_backend.supported(bits, sizes, 3 if len(sizes) == 3 else 1, fmt, k)
    assert got is None if why is None else why in str(got)


@pytest.mark.parametrize(
    ("knobs", "label"),
    [
        (_act_knobs("int8", "group", "1"), "act=int8/group zpe=1"),
        (_act_knobs("fp8", "token", "0"), "act=fp8/token zpe=0"),
        (_act_knobs("bf16", "token", "1"), "act=bf16 zpe=0"),  # W4A16 has no epilogue form
    ],
)
def test_triton_marker_names_the_served_mode(knobs: dict[str, str], label: str) -> None:
    from paro_vllm import paroquant as pq

    assert pq.act_label(knobs, "triton") == label
    assert pq.marker_line("triton", 5, 7, 7, label).endswith(
        f" {label} kernels=precompiled:0 jit:0 source=none"
    )


@pytest.mark.parametrize(
    ("m", "scale"), [(1, "group"), (16, "group"), (17, "token"), (300, "token")]
)
def test_triton_apply_gets_the_per_call_mode(
    monkeypatch: pytest.MonkeyPatch, m: int, scale: str
) -> None:
    from paro_vllm import paroquant as pq
    from paro_vllm import triton_backend

    seen = []

    def fake_apply(prep: object, x: torch.Tensor, bias: object, act: object) -> torch.Tensor:
        seen.append(act)
        return torch.zeros(x.shape[0], 8, dtype=x.dtype)

    monkeypatch.setattr(triton_backend, "apply", fake_apply)
    cfg = pq.ParoQuantConfig(5, G, KROT, knobs=_act_knobs("fp8", "token", "1"))
    layer = torch.nn.Module()
    layer.paro_triton, layer.paro_n = object(), 8
    y = pq.ParoQuantLinearMethod(cfg).apply(layer, torch.randn(1, m, G))  # M = m tokens
    assert y.shape == (1, m, 8)
    (act,) = seen  # the decode band (M <= 16 here) is per-group whatever PARO_ACT_SCALE says
    assert (act.format, act.scale, act.zp_epilogue, act.group_size) == ("fp8", scale, True, G)
