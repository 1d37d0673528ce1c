"""paro-quant rtn / inspect on a tiny random Llama-shaped model (safetensors written directly)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from paro_kernels import reference as ref
from paro_kernels.checkpoint import RtnOptions, rtn_checkpoint
from paro_kernels.cli import main
from paro_kernels.formats import unpack_awq, unpack_bitplane
from safetensors.torch import load_file, save_file

H, INTER, KV, V = 192, 256, 64, 64  # H = 192: 128 does not divide K, so the tool picks g64
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
PROJ = {
    "self_attn.q_proj": (H, H),
    "self_attn.k_proj": (KV, H),
    "self_attn.v_proj": (KV, H),
    "self_attn.o_proj": (H, H),
    "mlp.gate_proj": (INTER, H),
    "mlp.up_proj": (INTER, H),
    "mlp.down_proj": (H, INTER),
}


def _tiny_model(d: Path) -> dict[str, torch.Tensor]:
    """Two-layer bf16 model in two shards with an index; q_proj of layer 1 has a bias."""
    gen = torch.Generator().manual_seed(0)
    shards: list[dict[str, torch.Tensor]] = [{}, {}]
    for i in range(2):
        for name, shape in PROJ.items():
            w = torch.randn(*shape, generator=gen) * 0.05
            shards[i][f"model.layers.{i}.{name}.weight"] = w.to(torch.bfloat16)
        shards[i][f"model.layers.{i}.input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    shards[1]["model.layers.1.self_attn.q_proj.bias"] = torch.randn(H).to(torch.bfloat16)
    shards[1]["model.embed_tokens.weight"] = torch.randn(V, H).to(torch.bfloat16)
    shards[1]["lm_head.weight"] = torch.randn(V, H).to(torch.bfloat16)
    d.mkdir(parents=True)
    for tensors, name in zip(shards, SHARDS, strict=True):
        save_file(tensors, str(d / name), metadata={"format": "pt"})
    wmap = {k: n for t, n in zip(shards, SHARDS, strict=True) for k in t}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": H}))
    (d / "tokenizer.json").write_text("{}")
    return {k: v for t in shards for k, v in t.items()}


def _load(d: Path) -> dict[str, torch.Tensor]:
    return {k: v for n in SHARDS for k, v in load_file(str(d / n)).items()}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    d = tmp_path_factory.mktemp("m") / "src"
    return d, _tiny_model(d)


@pytest.fixture(scope="module")
def quantized(
    model: tuple[Path, dict[str, torch.Tensor]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("q") / "out"
    assert main(["rtn", str(model[0]), str(out), "--channel-scales", "random", "--seed", "3"]) == 0
    return out


def _layer(t: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) + 1 :]: v for k, v in t.items() if k.startswith(prefix + ".")}


def test_rtn_layout_and_config(
    model: tuple[Path, dict[str, torch.Tensor]], quantized: Path
) -> None:
    cfg = json.loads((quantized / "config.json").read_text())
    assert cfg["quantization_config"] == {
        "quant_method": "paroquant",
        "bits": 4,
        "group_size": 64,
        "krot": 8,
    }
    assert cfg["model_type"] == "llama" and (quantized / "tokenizer.json").exists()
    out, src = _load(quantized), model[1]
    lay = _layer(out, "model.layers.0.mlp.down_proj")
    assert {k: (v.dtype, tuple(v.shape)) for k, v in lay.items()} == {
        "qweight": (torch.int32, (INTER, H // 8)),
        "qzeros": (torch.int32, (INTER // 64, H // 8)),
        "scales": (torch.float16, (INTER // 64, H)),
        "pairs": (torch.int16, (8, INTER)),
        "theta": (torch.float16, (8, INTER // 2)),
        "channel_scales": (torch.float16, (1, INTER)),
    }
    assert out["model.layers.1.self_attn.q_proj.bias"].dtype == torch.float16
    for key in (
        "lm_head.weight",
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
    ):
        assert torch.equal(out[key], src[key])
    assert not any(k.endswith("_proj.weight") for k in out)
    index = json.loads((quantized / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["model.layers.0.mlp.down_proj.qweight"] == SHARDS[0]
    assert set(index["weight_map"]) == set(out)


@pytest.mark.parametrize("name", ["self_attn.q_proj", "mlp.down_proj"])
def test_rtn_linear_reproduces_the_float_layer(
    model: tuple[Path, dict[str, torch.Tensor]], quantized: Path, name: str
) -> None:
    out, src = _load(quantized), model[1]
    prefix = f"model.layers.1.{name}"
    t = _layer(out, prefix)
    w = src[prefix + ".weight"].double()
    x = torch.randn(16, w.shape[1], dtype=torch.float64)
    y = ref.paro_linear_ref(
        x,
        t["qweight"],
        t["qzeros"],
        t["scales"],
        t["pairs"],
        t["theta"],
        t["channel_scales"],
        4,
        64,
        t.get("bias"),
    )
    bias = t["bias"].double() if "bias" in t else 0.0
    expect = x @ w.t() + bias
    # int4 g64 RTN noise on Gaussian rows (~0.1), amplified where channel_scales > 1
    assert ((y - expect).norm() / (expect - bias).norm()).item() < 0.2


def test_rtn_identity_is_plain_asymmetric_rtn(
    model: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    rtn_checkpoint(model[0], tmp_path / "o", RtnOptions(bits=5, rotation="identity"))
    t = _layer(_load(tmp_path / "o"), "model.layers.0.self_attn.o_proj")
    assert torch.equal(t["pairs"][3, :4], torch.tensor([0, 1, 2, 3], dtype=torch.int16))
    w = model[1]["model.layers.0.self_attn.o_proj.weight"].double().view(H, H // 64, 64)
    s = ((w.amax(2) - w.amin(2)).clamp(min=1e-5) / 31).half().double()
    z = (-torch.round(w.amin(2) / s)).clamp(0, 31)
    codes = (torch.round(w / s.unsqueeze(2)) + z.unsqueeze(2)).clamp(0, 31)
    expect = ((codes - z.unsqueeze(2)) * s.unsqueeze(2)).view(H, H)
    got = ref.dequantize(
        t["qweight"], t["qzeros"], t["scales"], 5, 64, t["qweight_hi"], t["qzeros_hi"]
    )
    assert torch.equal(got, expect)
    assert int(unpack_bitplane(t["qweight_hi"]).max()) == 1


def _rewrite(src: Path, dst: Path, edit: dict[str, torch.Tensor]) -> None:
    import shutil

    shutil.copytree(src, dst)
    t = load_file(str(dst / SHARDS[0]))
    t.update(edit)
    save_file(t, str(dst / SHARDS[0]), metadata={"format": "pt"})


def test_inspect_ok(quantized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(quantized)]) == 0
    assert capsys.readouterr().out.endswith("14 quantized linears, 0 warning(s): OK\n")


def _broken_cases(q: Path) -> dict[str, tuple[dict[str, torch.Tensor], str]]:
    t = load_file(str(q / SHARDS[0]))
    p = "model.layers.0.self_attn.q_proj"
    pairs = t[p + ".pairs"].clone()
    pairs[2, 70] = pairs[2, 71]
    codes, zeros = unpack_awq(t[p + ".qweight"]), unpack_awq(t[p + ".qzeros"])
    shifts = torch.arange(8) * 4  # plain (non-AWQ) nibble order for the zeros only
    plain = (zeros.long().view(zeros.shape[0], -1, 8) << shifts).sum(-1)
    plain = torch.where(plain >= 2**31, plain - 2**32, plain).int()
    assert codes.shape[0] == H
    return {
        "pairs": (
            {p + ".pairs": pairs},
            f"ERROR {p}.pairs: layer 2 group 1 is not a permutation of 0..63",
        ),
        "dtype": (
            {p + ".scales": t[p + ".scales"].float()},
            f"ERROR {p}.scales: dtype expected torch.float16, got torch.float32",
        ),
        "shape": (
            {p + ".theta": t[p + ".theta"][:, :-2].contiguous()},
            f"ERROR {p}.theta: shape expected [8, 96], got [8, 94]",
        ),
        "nibbles": (
            {p + ".qzeros": plain},
            f"ERROR {p}.qzeros: zeros pair with the codes in plain nibble order",
        ),
        "nan": (
            {p + ".channel_scales": torch.full((1, H), float("nan")).half()},
            f"ERROR {p}.channel_scales: contains NaN or inf",
        ),
    }


@pytest.mark.parametrize("case", ["pairs", "dtype", "shape", "nibbles", "nan"])
def test_inspect_names_tensor_and_problem(
    quantized: Path, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    edit, message = _broken_cases(quantized)[case]
    _rewrite(quantized, tmp_path / "bad", edit)
    assert main(["inspect", str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    assert message in out and "INVALID (1 error(s))" in out and "Traceback" not in out


def test_inspect_truncated_file_and_bad_config(
    quantized: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(quantized, bad)
    data = (bad / SHARDS[1]).read_bytes()
    (bad / SHARDS[1]).write_bytes(data[: len(data) // 2])
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"]["quant_method"] = "awq"
    (bad / "config.json").write_text(json.dumps(cfg))
    assert main(["inspect", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"ERROR {SHARDS[1]}: not a readable safetensors file" in out
    assert "ERROR config.json quantization_config.quant_method: expected 'paroquant'" in out
    assert "Traceback" not in out


def test_cli_errors_are_one_line(
    tmp_path: Path, model: tuple[Path, dict[str, torch.Tensor]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(tmp_path / "nope")]) == 1
    assert "not a directory" in capsys.readouterr().out
    assert main(["rtn", str(tmp_path / "nope"), str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["rtn", str(model[0]), str(tmp_path / "full")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
