"""`paro-quant mxfp4` / `nvfp4`: the builders behind the CPU demo's format copies, via the CLI.

The NVFP4 copy is mixed on purpose (NVFP4 + FP8 per-channel + an ignored bf16 linear) so the
load-time requant's routing has every source kind to route; these tests pin what each kind holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from paro_kernels.cli import EXIT_CANNOT_RUN, EXIT_OK, main
from paro_kernels.formats import E4M3_MAX
from paro_kernels.mx import nvfp4_dequantize, paro_mxfp4_linear_ref, rel_rms

F64 = torch.float64
SHAPES = {  # [N, K]: K a multiple of 64 (group) and 32 (MX block); one layer, four linears
    "self_attn.q_proj": (96, 192),
    "self_attn.o_proj": (192, 96 + 32),
    "mlp.up_proj": (64, 192),
    "mlp.down_proj": (192, 64),
}


@pytest.fixture
def src(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """A one-layer bf16 model directory with the decoder-linear names the builders look for."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(11)
    t = {
        f"model.layers.0.{p}.weight": (torch.randn(*s, generator=gen) * 0.05).to(torch.bfloat16)
        for p, s in SHAPES.items()
    }
    t["model.embed_tokens.weight"] = torch.randn(8, 192, generator=gen).to(torch.bfloat16)
    path = tmp_path / "bf16"
    path.mkdir()
    save_file(t, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    return path, t


def _load(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors.torch import load_file

    cfg = json.loads((path / "config.json").read_text())
    return load_file(str(path / "model.safetensors")), cfg["quantization_config"]


def test_nvfp4_cli_writes_each_kind_and_lists_the_bf16_linear_as_ignored(
    src: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, w = src
    dst = tmp_path / "nv"
    argv = ["nvfp4", str(path), str(dst), "--fp8", r"self_attn\.", "--bf16", r"mlp\.down_proj"]
    assert main(argv) == EXIT_OK
    assert capsys.readouterr().out == (
        f"wrote {dst}: 4 linears compressed-tensors (1 bf16, 2 fp8, 1 nvfp4)\n"
    )
    t, qc = _load(dst)
    pre = "model.layers.0"
    assert qc["ignore"] == ["lm_head", f"{pre}.mlp.down_proj"]
    assert qc["config_groups"]["group_1"]["targets"] == [r"re:self_attn\."]
    # bf16: carried over bit for bit, no scale (nothing for the loader to mistake for FP8)
    assert torch.equal(t[f"{pre}.mlp.down_proj.weight"], w[f"{pre}.mlp.down_proj.weight"])
    assert f"{pre}.mlp.down_proj.weight_scale" not in t
    # FP8 per channel: amax/448 scales, dequant within e4m3's half-ulp (2^-4 relative) per element
    for proj in ("q_proj", "o_proj"):
        wq, sc = t[f"{pre}.self_attn.{proj}.weight"], t[f"{pre}.self_attn.{proj}.weight_scale"]
        ref = w[f"{pre}.self_attn.{proj}.weight"].to(F64)
        assert wq.dtype == torch.float8_e4m3fn and sc.shape == (ref.shape[0], 1)
        assert torch.allclose(sc.to(F64), ref.abs().amax(1, keepdim=True) / E4M3_MAX, rtol=1e-6)
        deq = wq.to(F64) * sc.to(F64)
        assert bool(((deq - ref).abs() <= ref.abs() * 2.0**-4 + sc.to(F64) * 2.0**-9).all())
    # NVFP4: the packed form, at its measured error class
    up = f"{pre}.mlp.up_proj"
    nv = nvfp4_dequantize(
        t[f"{up}.weight_packed"], t[f"{up}.weight_scale"], t[f"{up}.weight_global_scale"]
    )
    assert 0.05 < rel_rms(nv, w[f"{up}.weight"]) < 0.15


def test_nvfp4_cli_refuses_a_bf16_pattern_that_matches_nothing(
    src: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = src
    assert main(["nvfp4", str(path), str(tmp_path / "nv"), "--bf16", "in_proj_a"]) == 2
    assert "--bf16 'in_proj_a': matches no linear of" in capsys.readouterr().err


def test_mxfp4_cli_writes_paro_mxfp4_and_refuses_a_non_empty_destination(
    src: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, w = src
    dst = tmp_path / "mx"
    argv = ["mxfp4", str(path), str(dst), "--group-size", "64", "--krot", "2", "--exp", "ocp"]
    assert main(argv) == EXIT_OK
    assert capsys.readouterr().out == f"wrote {dst}: 4 linears MXFP4-PARO g64 krot 2, exp ocp\n"
    t, qc = _load(dst)
    assert qc == {"quant_method": "paroquant_mxfp4", "fmt": "mxfp4", "group_size": 64, "krot": 2}
    pre = "model.layers.0.mlp.up_proj"
    assert t[f"{pre}.weight"].shape == (64, 96) and t[f"{pre}.weight_scale"].shape == (64, 6)
    x = torch.randn(5, 192, generator=torch.Generator().manual_seed(3), dtype=F64)
    names = ("weight", "weight_scale", "pairs", "theta", "channel_scales")
    y = paro_mxfp4_linear_ref(x, *(t[f"{pre}.{n}"] for n in names), group_size=64)
    assert 0.05 < rel_rms(y, x @ w[f"{pre}.weight"].to(F64).t()) < 0.2  # the MXFP4 class
    assert main(argv) == EXIT_CANNOT_RUN  # the same destination again: never overwritten
    assert "exists and is not empty" in capsys.readouterr().err
