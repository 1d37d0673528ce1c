"""ParoQuantConfig: the z-lab keys, the backend knob, which modules are quantized."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

from paro_vllm.knobs import KnobError
from paro_vllm.paroquant import ParoQuantConfig, parse_config

ZLAB = {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 8}


@pytest.mark.parametrize(("bits", "gs"), [(4, 64), (4, 128), (5, 64), (5, 128)])
def test_valid_configs(bits: int, gs: int) -> None:
    cfg = ParoQuantConfig.from_config({**ZLAB, "bits": bits, "group_size": gs})
    assert (cfg.bits, cfg.group_size, cfg.krot, cfg.backend) == (bits, gs, 8, "reference")
    assert cfg.get_name() == "paroquant"


def test_every_config_problem_is_reported() -> None:
    bad = {"quant_method": "awq", "bits": 3, "group_size": 96, "krot": 0}
    with pytest.raises(ValueError) as info:
        parse_config(bad)
    assert str(info.value) == (
        "paroquant quantization_config: quant_method: expected 'paroquant', got 'awq'; "
        "bits: expected 4 or 5, got 3; group_size: expected 64 or 128, got 96; "
        "krot: expected a positive integer, got 0"
    )


def test_unknown_keys_are_tolerated() -> None:
    assert ParoQuantConfig.from_config({**ZLAB, "version": "0.1"}).bits == 4


def test_backend_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARO_BACKEND", "triton")
    with pytest.raises(ValueError, match="PARO_BACKEND=triton"):
        ParoQuantConfig.from_config(ZLAB)
    monkeypatch.setenv("PARO_BACKEND", "")
    with pytest.raises(KnobError, match="PARO_BACKEND: empty value"):
        ParoQuantConfig.from_config(ZLAB)


def test_merged_modules_follow_their_parts() -> None:
    cfg = ParoQuantConfig(4, 64, 8, quantized=frozenset({"m.layers.0.q_proj", "m.layers.0.k_proj"}))
    cfg.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj"], "gate_up": ["gate", "up"]}
    assert cfg.is_quantized("m.layers.0.qkv_proj")
    assert not cfg.is_quantized("m.layers.0.gate_up")
    assert not cfg.is_quantized("lm_head")
    cfg.quantized = frozenset({"m.layers.0.q_proj"})
    with pytest.raises(ValueError, match="must be all ParoQuant or all unquantized"):
        cfg.is_quantized("m.layers.0.qkv_proj")
    assert ParoQuantConfig(4, 64, 8).is_quantized("anything")  # unknown checkpoint: quantize


def test_checkpoint_tensor_names_decide(paro_model: Path) -> None:
    cfg = ParoQuantConfig(4, 64, 8)
    cfg.maybe_update_config(str(paro_model))
    assert cfg.quantized is not None and len(cfg.quantized) == 210
    assert "model.layers.0.self_attn.q_proj" in cfg.quantized
    assert not any("lm_head" in p or "embed" in p for p in cfg.quantized)


def test_non_linear_modules_stay_unquantized(vllm_ctx: None) -> None:
    from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    cfg = ParoQuantConfig(4, 64, 8, quantized=frozenset({"quantized"}))
    emb = VocabParallelEmbedding(256, 64)
    assert cfg.get_quant_method(emb, "model.embed_tokens") is None
    plain = ReplicatedLinear(64, 64, bias=False, quant_config=cfg, prefix="plain")
    assert isinstance(plain.quant_method, UnquantizedLinearMethod)
