"""Activation modes, MXFP4-PARO and NVFP4 -> MXFP4 on real vLLM layers vs fp64 references."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from paro_kernels.checkpoint import make_rotation
from paro_kernels.mx import (
    mxfp4_dequantize,
    mxfp4_quantize,
    nvfp4_dequantize,
    nvfp4_quantize,
    paro_mxfp4_linear_ref,
    quantize_paro_mxfp4,
    rel_rms,
)
from paro_kernels.reference import dequantize_codes, rotate
from paro_vllm import activations as act
from paro_vllm.activations import ActConfig

F64 = torch.float64
G, KROT = 64, 8
BF16_FLOOR = 2e-3  # rel (Frobenius) of a bf16-rounded output vs fp64, with margin
DEFAULT_KNOBS = {
    "PARO_ACT_FORMAT": "fp8",
    "PARO_ACT_SCALE": "token",
    "PARO_ZP_EPILOGUE": "0",
    "PARO_DECODE_MAX_M": "64",
}


def _outlier_acts(
    m: int = 64, k: int = 1536, seed: int = 0, outliers: int = 6, mult: float = 60
) -> torch.Tensor:
    """Gaussian activations with a few huge channels, as the seed's rotated rows still have."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen, dtype=F64)
    cols = torch.randperm(k, generator=gen)[:outliers]
    x[:, cols] *= mult
    return x


# --------------------------------------------------------------------------- activation quantizers


def test_int8_quantizer_is_amax_127_round_clamp_with_integer_row_sums() -> None:
    x = _outlier_acts(8, 256)
    for scale in ("token", "group"):
        qa = act.quantize_acts(x, ActConfig("int8", scale, group_size=G))  # type: ignore[arg-type]
        assert torch.equal(qa.q, qa.q.round()) and float(qa.q.abs().max()) == 127
        assert torch.equal(qa.row_sums, qa.q.view(8, -1, G).sum(-1))
        want = torch.round(x.view(8, -1, G) / qa.scale.unsqueeze(-1)).clamp(-127, 127)
        assert torch.equal(qa.q, want.view(8, 256))
        amax = x.abs().view(8, -1, G).amax(-1)
        if scale == "token":
            amax = amax.amax(-1, keepdim=True).expand_as(amax)
        assert torch.equal(qa.scale, (amax / 127).float().double())


def test_fp8_quantizer_maps_the_amax_to_448_and_stays_on_the_e4m3_grid() -> None:
    from paro_kernels.formats import e4m3_decode, e4m3_encode

    x = _outlier_acts(8, 256)
    for scale in ("token", "group"):
        qa = act.quantize_acts(x, ActConfig("fp8", scale, group_size=G))  # type: ignore[arg-type]
        assert torch.equal(qa.q, e4m3_decode(e4m3_encode(qa.q)).double())
        peaks = qa.q.abs().view(8, -1, G).amax(-1)
        assert bool((peaks.amax(-1) == 448).all())


def test_bf16_is_a_passthrough_rounded_to_bf16() -> None:
    x = _outlier_acts(4, 128)
    got = act.fake_quant_acts(x, ActConfig("bf16", group_size=G))
    assert torch.equal(got, x.to(torch.bfloat16).double())


def _out_err(x: torch.Tensor, fmt: str, scale: str) -> float:
    w = torch.randn(256, x.shape[1], generator=torch.Generator().manual_seed(1), dtype=F64)
    cfg = ActConfig(fmt, scale, group_size=128)  # type: ignore[arg-type]
    return rel_rms(act.fake_quant_acts(x, cfg) @ w.t(), x @ w.t())


def test_int8_per_group_beats_per_token_on_outlier_heavy_activations() -> None:
    """Seed 2026-09-11: one 127-level grid per token flattens the bulk; per-group does not."""
    x = _outlier_acts()  # 6 channels x60
    assert _out_err(x, "int8", "group") < _out_err(x, "int8", "token") / 2
    assert _out_err(x, "int8", "token") > _out_err(x, "fp8", "token")  # per-token int8 loses
    soft = _outlier_acts(outliers=2, mult=20)  # what the rotations leave: softened outliers
    assert _out_err(soft, "int8", "group") < _out_err(soft, "fp8", "token")


def test_decode_band_is_always_per_group() -> None:
    assert act.act_config(DEFAULT_KNOBS, 64, G).scale == "group"
    assert act.act_config(DEFAULT_KNOBS, 65, G).scale == "token"
    knobs = {**DEFAULT_KNOBS, "PARO_ACT_SCALE": "group", "PARO_ZP_EPILOGUE": "1"}
    cfg = act.act_config(knobs, 500, G)
    assert (cfg.scale, cfg.zp_epilogue, cfg.format) == ("group", True, "fp8")


@pytest.mark.parametrize("bits", [4, 5])
@pytest.mark.parametrize("fmt", ["int8", "fp8", "bf16"])
@pytest.mark.parametrize("scale", ["token", "group"])
def test_zero_point_epilogue_equals_the_in_loop_form_to_fp64_precision(
    bits: int, fmt: str, scale: str
) -> None:
    gen = torch.Generator().manual_seed(bits)
    k, n, m = 384, 96, 9
    top = (1 << bits) - 1
    codes = torch.randint(0, top + 1, (k, n), generator=gen, dtype=torch.int32)
    zeros = torch.randint(0, top + 1, (k // G, n), generator=gen, dtype=torch.int32)
    scales = (torch.rand(k // G, n, generator=gen) * 0.02 + 1e-3).to(torch.float16)
    x = _outlier_acts(m, k, seed=bits)
    cfg = ActConfig(fmt, scale, group_size=G)  # type: ignore[arg-type]
    qa = act.quantize_acts(x, cfg)
    inloop = act.int_linear_inloop(qa, codes, zeros, scales)
    epi = act.int_linear_epilogue(qa, codes, zeros, scales, bits)
    ref = qa.dequantize() @ dequantize_codes(codes, zeros, scales, G).t()
    assert rel_rms(inloop, ref) < 1e-13
    assert rel_rms(epi, ref) < 1e-12
    assert torch.equal(act.int_linear(x, codes, zeros, scales, bits, cfg), inloop)
    cfg_epi = ActConfig(fmt, scale, True, G)  # type: ignore[arg-type]
    assert torch.equal(act.int_linear(x, codes, zeros, scales, bits, cfg_epi), epi)


# --------------------------------------------------------------------------- real weights


@pytest.fixture(scope="session")
def bf16_tensors() -> dict[str, Any]:
    """Every tensor of the bf16 SmolLM2 demo model (fetched/converted once in PAROCTL_CACHE)."""
    from safetensors.torch import load_file

    from paroctl import demo

    model = demo.ensure_smollm2(demo.default_models_dir(), Path(sys.executable))
    out: dict[str, Any] = {}
    for f in sorted(model.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


PROJ = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


def _w(t: dict[str, Any], layer: int, proj: str) -> torch.Tensor:
    return t[f"model.layers.{layer}.{PROJ[proj]}.weight"]


def test_requant_error_on_smollm2_weights_nvfp4_vs_requant_vs_direct(
    bf16_tensors: dict[str, Any],
) -> None:
    """The seed's 0.113 / 0.158 / 0.112 table on SmolLM2 (layers 0 and 15, all projections)."""
    rows = {"nvfp4": [], "nv->mx mse": [], "nv->mx ocp": [], "direct mse": []}
    for layer in (0, 15):
        for proj in PROJ:
            w = _w(bf16_tensors, layer, proj).to(F64)
            nv = nvfp4_dequantize(*nvfp4_quantize(w))
            rows["nvfp4"].append(rel_rms(nv, w))
            for rule in ("mse", "ocp"):
                mx = mxfp4_dequantize(*mxfp4_quantize(nv, rule))  # type: ignore[arg-type]
                rows[f"nv->mx {rule}"].append(rel_rms(mx, w))
            rows["direct mse"].append(rel_rms(mxfp4_dequantize(*mxfp4_quantize(w, "mse")), w))
    mean = {k: sum(v) / len(v) for k, v in rows.items()}
    print("relRMS vs bf16:", {k: round(v, 4) for k, v in mean.items()})
    assert mean["nvfp4"] < mean["nv->mx mse"] <= mean["nv->mx ocp"]
    assert mean["direct mse"] < mean["nv->mx mse"]
    assert all(a <= b for a, b in zip(rows["nv->mx mse"], rows["nv->mx ocp"], strict=True))


def test_mse_never_worse_than_ocp_per_block_on_real_weights(bf16_tensors: dict[str, Any]) -> None:
    w = nvfp4_dequantize(*nvfp4_quantize(_w(bf16_tensors, 3, "down").to(F64)))
    errs = {}
    for rule in ("mse", "ocp"):
        mx = mxfp4_dequantize(*mxfp4_quantize(w, rule))  # type: ignore[arg-type]
        errs[rule] = (mx - w).pow(2).view(w.shape[0], -1, 32).sum(-1)
    assert bool((errs["mse"] <= errs["ocp"]).all())


# --------------------------------------------------------------------------- MXFP4-PARO on vLLM


MX_SUFFIXES = ("weight", "weight_scale", "pairs", "theta", "channel_scales")


def _mx_tensors(w: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    pairs, theta = make_rotation(w.shape[1], G, KROT, "random", gen)
    cs = (torch.rand(1, w.shape[1], generator=gen) + 0.5).to(torch.float16)
    return quantize_paro_mxfp4(w, pairs, theta, cs, G)


def _mx_ref(x: torch.Tensor, q: dict[str, torch.Tensor], cfg: ActConfig) -> torch.Tensor:
    """fp64: rotate, quantize activations as the served mode does, MXFP4 GEMM."""
    xr = rotate(x.to(F64) * q["channel_scales"].to(F64)[0], q["pairs"], q["theta"], G)
    return act.fake_quant_acts(xr, cfg) @ mxfp4_dequantize(q["weight"], q["weight_scale"]).t()


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).norm() / ref.norm())


@pytest.fixture(scope="module")
def mx_layers(vllm_ctx: None, bf16_tensors: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Layer 2's four linears as vLLM builds them for SmolLM2, loaded with MXFP4-PARO tensors."""
    from paro_vllm import paroquant_mxfp4 as pm
    from vllm.model_executor.layers.linear import (
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )

    saved = pm.STATE, pm.MARKERS  # a fresh marker state for this module's layers only
    pm.STATE, pm.MARKERS = pm._LoadState(), []
    cfg, dt = pm.ParoMxfp4Config(G, KROT, knobs=dict(DEFAULT_KNOBS)), torch.bfloat16
    q = {p: _mx_tensors(_w(bf16_tensors, 2, p), i) for i, p in enumerate(PROJ)}
    qkv = QKVParallelLinear(576, 64, 9, 3, bias=False, quant_config=cfg, params_dtype=dt)
    o = RowParallelLinear(576, 576, bias=False, quant_config=cfg, params_dtype=dt)
    gu = MergedColumnParallelLinear(
        576, [1536, 1536], bias=False, quant_config=cfg, params_dtype=dt
    )
    down = RowParallelLinear(1536, 576, bias=False, quant_config=cfg, params_dtype=dt)
    loads = [(qkv, "q", "q"), (qkv, "k", "k"), (qkv, "v", "v"), (o, "o", None)]
    loads += [(gu, "gate", 0), (gu, "up", 1), (down, "down", None)]
    for layer, proj, shard in loads:
        for s in MX_SUFFIXES:
            param = getattr(layer, s)
            args = (param, q[proj][s]) if shard is None else (param, q[proj][s], shard)
            param.weight_loader(*args)
    for layer in (qkv, o, gu, down):
        layer.quant_method.process_weights_after_loading(layer)
    yield {
        "qkv": (qkv, ["q", "k", "v"]),
        "o": (o, ["o"]),
        "gate_up": (gu, ["gate", "up"]),
        "down": (down, ["down"]),
        "q": q,
        "cfg": cfg,
        "state": pm.STATE,
        "markers": pm.MARKERS,
    }
    pm.STATE, pm.MARKERS = saved


def test_mxfp4_parameters_have_the_quark_shapes(mx_layers: dict[str, Any]) -> None:
    qkv = mx_layers["qkv"][0]
    shapes = {n: (tuple(p.shape), p.dtype) for n, p in qkv.named_parameters()}
    assert shapes == {
        "weight": ((960, 288), torch.uint8),
        "weight_scale": ((960, 18), torch.uint8),
        "pairs": ((3, KROT, 576), torch.int16),
        "theta": ((3, KROT, 288), torch.float16),
        "channel_scales": ((3, 1, 576), torch.float16),
    }
    assert torch.equal(qkv.weight.data[576:768], mx_layers["q"]["k"]["weight"])
    assert [(r.n0, r.n1) for r in qkv.paro_runs] == [(0, 576), (576, 768), (768, 960)]


def test_mxfp4_boot_marker_counts_every_partition(mx_layers: dict[str, Any]) -> None:
    from paro_vllm.paroquant_mxfp4 import marker_line

    assert mx_layers["markers"] == [
        "paro-vllm: method=paroquant_mxfp4 backend=reference act=fp8 layers=7/7 from=mxfp4:7 "
        "kept=none lm_head=bf16 version=0.1.0 kernels=precompiled:0 jit:0 source=none"
    ]
    assert marker_line("reference", "int8", 210, 211).endswith(
        "layers=210/211 from=mxfp4:210 kept=bf16:1 lm_head=bf16 version=0.1.0 "
        "kernels=precompiled:0 jit:0 source=none"
    )


@pytest.mark.parametrize("name", ["qkv", "o", "gate_up", "down"])
@pytest.mark.parametrize("m", [1, 7, 80])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "int8"])
def test_mxfp4_served_output_matches_fp64_reference(
    mx_layers: dict[str, Any], name: str, m: int, fmt: str
) -> None:
    layer, projs = mx_layers[name]
    knobs = {**DEFAULT_KNOBS, "PARO_ACT_FORMAT": fmt}
    mx_layers["cfg"].knobs = knobs  # read per call, as apply() does
    gen = torch.Generator().manual_seed(m)
    x = (torch.randn(m, layer.input_size, generator=gen) * 2).to(torch.bfloat16)
    y = layer(x)[0]
    assert y.dtype == torch.bfloat16 and y.shape == (m, layer.paro_n)
    cfg = act.token_act_config(knobs, G)  # per token at every M (the MX methods)
    ref = torch.cat([_mx_ref(x, mx_layers["q"][p], cfg) for p in projs], dim=-1)
    # fp32 vs fp64 rotation can flip a rare activation rounding: a few bf16 ulps on top
    assert _rel(y, ref) <= (BF16_FLOOR if fmt == "bf16" else 4e-3)
    if fmt == "bf16":
        exact = torch.cat(
            [
                paro_mxfp4_linear_ref(x, *(mx_layers["q"][p][s] for s in MX_SUFFIXES), G)
                for p in projs
            ],
            dim=-1,
        )
        assert _rel(y, exact) <= 4e-3  # bf16 rounding of the rotated activations only


# --------------------------------------------------------------------------- NVFP4 -> MXFP4


def test_nvfp4_config_is_claimed_only_with_the_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from paro_kernels.builders import nvfp4_quant_config
    from paro_vllm.nvfp4_mxfp4 import NvFp4MxFp4Config, is_nvfp4_config

    qc = nvfp4_quant_config([], ["lm_head"])
    assert is_nvfp4_config(qc) and not is_nvfp4_config({"quant_method": "awq"})
    monkeypatch.delenv("PARO_NVFP4_MXFP4", raising=False)
    assert NvFp4MxFp4Config.override_quantization_method(qc, None) is None
    assert NvFp4MxFp4Config.override_quantization_method(qc, "nvfp4_mxfp4") == "nvfp4_mxfp4"
    monkeypatch.setenv("PARO_NVFP4_MXFP4", "1")
    assert NvFp4MxFp4Config.override_quantization_method(qc, None) == "nvfp4_mxfp4"
    assert NvFp4MxFp4Config.override_quantization_method({"quant_method": "fp8"}, None) is None


@pytest.fixture
def nv_layers(
    vllm_ctx: None, bf16_tensors: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Layer 4's linears from a mixed NVFP4 checkpoint (o_proj FP8 per channel), requantized."""
    from paro_kernels.builders import fp8_channel_quantize
    from paro_vllm import nvfp4_mxfp4 as nm
    from vllm.model_executor.layers.linear import (
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )

    monkeypatch.setattr(nm, "STATE", nm._LoadState())
    monkeypatch.setattr(nm, "MARKERS", [])
    knobs = {**DEFAULT_KNOBS, "PARO_ACT_FORMAT": "bf16", "PARO_NVFP4_EXP": "mse"}
    knobs |= {"PARO_NVFP4_FP8_LAYERS": "mxfp4", "PARO_NVFP4_BF16_LAYERS": "in_proj_ba"}
    cfg = nm.NvFp4MxFp4Config(("lm_head",), False, knobs)
    cfg.packed_modules_mapping = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    pre = "model.layers.4"
    cfg.nvfp4 = frozenset(f"{pre}.{PROJ[p]}" for p in PROJ if p != "o")
    cfg.fp8 = frozenset({f"{pre}.self_attn.o_proj"})
    src, dt = {}, torch.bfloat16
    for p in PROJ:
        w = _w(bf16_tensors, 4, p)
        if p == "o":
            src[p] = fp8_channel_quantize(w)
        else:
            packed, scale, glob = nvfp4_quantize(w)
            src[p] = {"weight_packed": packed, "weight_scale": scale, "weight_global_scale": glob}

    def build(cls: Any, *args: Any, name: str) -> Any:
        return cls(*args, bias=False, quant_config=cfg, params_dtype=dt, prefix=f"{pre}.{name}")

    qkv = build(QKVParallelLinear, 576, 64, 9, 3, name="self_attn.qkv_proj")
    o = build(RowParallelLinear, 576, 576, name="self_attn.o_proj")
    gu = build(MergedColumnParallelLinear, 576, [1536, 1536], name="mlp.gate_up_proj")
    down = build(RowParallelLinear, 1536, 576, name="mlp.down_proj")
    loads = [(qkv, "q", "q"), (qkv, "k", "k"), (qkv, "v", "v"), (o, "o", None)]
    loads += [(gu, "gate", 0), (gu, "up", 1), (down, "down", None)]
    for layer, proj, shard in loads:
        for s, t in src[proj].items():
            param = getattr(layer, s)
            param.weight_loader(*((param, t) if shard is None else (param, t, shard)))
    for layer in (qkv, o, gu, down):
        layer.quant_method.process_weights_after_loading(layer)
    return {"layers": (qkv, o, gu, down), "src": src, "state": nm.STATE, "markers": nm.MARKERS}


def _source(src: dict[str, torch.Tensor]) -> torch.Tensor:
    if "weight_packed" in src:
        return nvfp4_dequantize(
            src["weight_packed"], src["weight_scale"], src["weight_global_scale"]
        )
    return src["weight"].to(F64) * src["weight_scale"].to(F64)


def test_nvfp4_requant_reports_every_layer_and_the_marker(nv_layers: dict[str, Any]) -> None:
    st = nv_layers["state"]
    assert st.kinds == {"nvfp4": 6, "fp8": 1} and st.partitions == 7
    assert len(st.errors) == 4 and all(0.03 < e < 0.2 for e in st.errors.values())
    (line,) = nv_layers["markers"]
    assert line.startswith("paro-vllm: method=nvfp4_mxfp4 backend=reference exp=mse layers=7/7 ")
    assert " from=fp8:1,nvfp4:6 kept=none lm_head=bf16 relrms_mean=0." in line
    mean = sum(st.errors.values()) / 4
    assert f"relrms_mean={mean:.4f} relrms_max={max(st.errors.values()):.4f} " in line
    assert line.endswith(" version=0.1.0 kernels=precompiled:0 jit:0 source=none")


def test_nvfp4_requant_weights_are_the_mxfp4_of_the_checkpoint(nv_layers: dict[str, Any]) -> None:
    qkv, o, gu, down = nv_layers["layers"]
    src = nv_layers["src"]
    for layer, projs in ((qkv, "qkv"), (o, ["o"]), (gu, ["gate", "up"]), (down, ["down"])):
        w = torch.cat([_source(src[p]) for p in projs])
        wq, sq = mxfp4_quantize(w, "mse")
        assert torch.equal(layer.weight.data, wq) and torch.equal(layer.weight_scale.data, sq)
        x = (torch.randn(5, layer.input_size) * 2).to(torch.bfloat16)
        ref = x.to(F64) @ mxfp4_dequantize(wq, sq).t()
        assert _rel(layer(x)[0], ref) <= BF16_FLOOR


def _routing_cfg(which: str = "in_proj_ba") -> Any:
    from paro_vllm.nvfp4_mxfp4 import NvFp4MxFp4Config

    knobs = {**DEFAULT_KNOBS, "PARO_NVFP4_EXP": "mse", "PARO_NVFP4_LMHEAD": "bf16"}
    knobs |= {"PARO_NVFP4_FP8_LAYERS": "mxfp4", "PARO_NVFP4_BF16_LAYERS": which}
    cfg = NvFp4MxFp4Config(("lm_head", "model.layers.0.mlp.down_proj"), False, knobs)
    cfg.packed_modules_mapping = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
    pre = "model.layers.1"
    cfg.nvfp4 = frozenset({f"{pre}.mlp.gate_proj", f"{pre}.mlp.up_proj", f"{pre}.mlp.down_proj"})
    cfg.fp8 = frozenset(f"{pre}.self_attn.{p}_proj" for p in "qkvo")
    return cfg


@pytest.mark.parametrize(
    ("which", "prefix", "want"),
    [
        ("in_proj_ba", "model.layers.1.mlp.gate_up_proj", ("nvfp4", True)),
        ("in_proj_ba", "model.layers.1.self_attn.qkv_proj", ("fp8", True)),
        ("in_proj_ba", "model.layers.1.self_attn.o_proj", ("fp8", True)),
        # bf16 in the checkpoint: only the seed's GDN in_proj_a/b are requantized
        ("in_proj_ba", "model.layers.0.mlp.down_proj", ("bf16", False)),
        ("in_proj_ba", "model.layers.1.linear_attn.in_proj_a", ("bf16", True)),
        ("in_proj_ba", "model.layers.1.linear_attn.in_proj_b", ("bf16", True)),
        ("none", "model.layers.1.linear_attn.in_proj_b", ("bf16", False)),
        ("none", "model.layers.1.self_attn.o_proj", ("fp8", True)),
    ],
)
def test_nvfp4_routes_each_source_kind_by_the_knobs(
    which: str, prefix: str, want: tuple[str, bool]
) -> None:
    pytest.importorskip("vllm")
    cfg = _routing_cfg(which)
    assert cfg.route(prefix) == want
    assert cfg.kind(prefix) == (want[0] if want[1] else "none")


def test_nvfp4_route_refuses_a_merge_of_mixed_kinds() -> None:
    pytest.importorskip("vllm")
    cfg = _routing_cfg()
    cfg.fp8 = cfg.fp8 | {"model.layers.2.mlp.gate_proj"}
    cfg.nvfp4 = cfg.nvfp4 | {"model.layers.2.mlp.up_proj"}  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"gate_up_proj merges .* of mixed kinds"):
        cfg.route("model.layers.2.mlp.gate_up_proj")


def test_nvfp4_unknown_tensor_names_make_every_non_ignored_linear_nvfp4() -> None:
    pytest.importorskip("vllm")
    cfg = _routing_cfg()
    cfg.nvfp4 = None  # the safetensors metadata was unreadable
    assert cfg.route("model.layers.7.mlp.down_proj") == ("nvfp4", True)
    assert cfg.route("model.layers.0.mlp.down_proj") == ("bf16", False)  # in the ignore list


def test_nvfp4_kept_bf16_layer_is_counted_by_kind_in_the_marker(
    vllm_ctx: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paro_vllm import nvfp4_mxfp4 as nm
    from vllm.model_executor.layers.linear import RowParallelLinear, UnquantizedLinearMethod

    monkeypatch.setattr(nm, "STATE", nm._LoadState())
    cfg = _routing_cfg()
    kw = {"bias": False, "quant_config": cfg, "params_dtype": torch.bfloat16}
    kept = RowParallelLinear(1536, 576, prefix="model.layers.0.mlp.down_proj", **kw)
    claimed = RowParallelLinear(576, 576, prefix="model.layers.1.self_attn.o_proj", **kw)
    assert isinstance(kept.quant_method, UnquantizedLinearMethod)
    assert isinstance(claimed.quant_method, nm.NvFp4MxFp4LinearMethod)
    assert claimed.quant_method.kind == "fp8"
    assert nm.STATE.kept == {"bf16": 1} and nm.STATE.unquantized == 1
    nm.STATE.kinds, nm.STATE.partitions = {"fp8": 1}, 1
    nm.STATE.errors = {"a": 0.1, "b": 0.3}
    assert (
        " layers=1/2 from=fp8:1 kept=bf16:1 lm_head=bf16 relrms_mean=0.2000 relrms_max=0.3000 "
        in (nm.marker_line(nm.STATE))
    )
    assert nm.relrms_summary(nm.STATE.errors) == (pytest.approx(0.2), 0.3, "b")
    assert nm.relrms_summary({}) == (0.0, 0.0, "-")


def test_nvfp4_refuses_an_fp8_lm_head() -> None:
    pytest.importorskip("vllm")
    cfg = _routing_cfg()
    cfg.fp8 = cfg.fp8 | {"lm_head"}
    with pytest.raises(ValueError, match="lm_head is FP8 in the checkpoint"):
        cfg.check_lm_head()


def test_nvfp4_from_config_refuses_keeping_fp8_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from paro_kernels.builders import nvfp4_quant_config
    from paro_vllm.nvfp4_mxfp4 import NvFp4MxFp4Config

    qc = nvfp4_quant_config(["re:o_proj"], ["lm_head"])
    assert NvFp4MxFp4Config.from_config(qc).ignore == ("lm_head",)
    monkeypatch.setenv("PARO_NVFP4_FP8_LAYERS", "keep")
    with pytest.raises(ValueError, match="PARO_NVFP4_FP8_LAYERS=keep is not supported"):
        NvFp4MxFp4Config.from_config(qc)
    with pytest.raises(ValueError, match="expected a compressed-tensors NVFP4"):
        NvFp4MxFp4Config.from_config({"quant_method": "awq"})


def test_mxfp4_config_lists_every_problem() -> None:
    pytest.importorskip("vllm")
    from paro_vllm.paroquant_mxfp4 import parse_config

    assert parse_config({"quant_method": "paroquant_mxfp4", "group_size": 64, "krot": 8}) == (64, 8)
    with pytest.raises(ValueError) as e:
        parse_config({"quant_method": "paroquant", "group_size": 96, "krot": 0, "fmt": "nvfp4"})
    for key in ("quant_method", "group_size", "krot", "fmt"):
        assert f"{key}:" in str(e.value)
