"""MXFP4 / NVFP4 codecs vs fp64 ground truth: exhaustive over the code spaces, brute-force exponents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from paro_kernels.formats import E2M1_MAGNITUDES, pack_fp4
from paro_kernels.mx import (
    choose_exponent,
    mxfp4_dequantize,
    mxfp4_quantize,
    noclip_exponent,
    nvfp4_dequantize,
    nvfp4_quantize,
    ocp_exponent,
    paro_mxfp4_linear_ref,
    rel_rms,
)

F64 = torch.float64
E2M1_VALUES = list(E2M1_MAGNITUDES) + [-m for m in E2M1_MAGNITUDES]  # code order 0..15


def _e4m3_value(code: int) -> float:
    """Independent e4m3fn decoder (spec arithmetic, not the table under test)."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 0xF and m == 7:
        return float("nan")
    return sign * (m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def _grid_sq_error(block: torch.Tensor, e: int) -> float:
    """Brute force: each element's squared distance to the nearest point of the 2**e e2m1 grid."""
    grid = torch.tensor(E2M1_VALUES, dtype=F64) * 2.0**e
    return float((block.unsqueeze(-1) - grid).pow(2).amin(-1).sum())


def _blocks(seed: int, n: int = 64) -> torch.Tensor:
    """Gaussian and heavy-tailed 32-blocks over a wide range of magnitudes."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=gen, dtype=F64)
    tail = torch.distributions.StudentT(2.0).sample((n, 32)).to(F64)
    mag = torch.pow(2.0, torch.randint(-20, 20, (n, 1), generator=gen).to(F64))
    return torch.cat((x, tail)) * torch.cat((mag, mag))


# --------------------------------------------------------------------------- MXFP4 decode


def test_mxfp4_dequantize_is_exhaustive_over_element_and_scale_codes() -> None:
    codes = torch.arange(16, dtype=torch.uint8).repeat(256, 2)  # [256, 32]: every code twice
    scales = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(256, 1)
    w = mxfp4_dequantize(pack_fp4(codes), scales)
    for s in range(256):
        want = [v * 2.0 ** (s - 127) for v in E2M1_VALUES] * 2
        if s == 255:
            assert bool(torch.isnan(w[s]).all())
        else:
            assert w[s].tolist() == want, s


def test_mxfp4_round_trips_every_representable_block() -> None:
    # Each row holds every e2m1 value (amax 6 * 2**e): every rule must recover the same codes.
    codes = torch.arange(16, dtype=torch.uint8).repeat(254, 2)
    scales = torch.arange(254, dtype=torch.int64).to(torch.uint8).view(254, 1)
    packed = pack_fp4(codes)
    w = mxfp4_dequantize(packed, scales)
    for rule in ("ocp", "noclip", "mse"):
        q, s = mxfp4_quantize(w, rule)  # type: ignore[arg-type]
        assert torch.equal(s, scales), rule
        assert torch.equal(mxfp4_dequantize(q, s), w), rule


def test_mxfp4_shape_contract() -> None:
    with pytest.raises(ValueError, match="K"):
        mxfp4_quantize(torch.zeros(2, 48))
    with pytest.raises(ValueError, match=r"weight_scale\.shape"):
        mxfp4_dequantize(
            torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8)
        )


# --------------------------------------------------------------------------- exponent choice


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exponents_match_brute_force(seed: int) -> None:
    blocks = _blocks(seed)
    e0, eo = noclip_exponent(blocks.abs().amax(-1)), ocp_exponent(blocks.abs().amax(-1))
    for i, b in enumerate(blocks):
        amax = float(b.abs().max())
        # smallest e with amax <= 6 * 2**e, by scanning
        want = next(e for e in range(-127, 128) if amax <= 6 * 2.0**e)
        assert int(e0[i]) == want
        assert int(eo[i]) == next(e for e in range(127, -128, -1) if 2.0 ** (e + 2) <= amax)
        assert int(eo[i]) in (want, want - 1)  # why "mse" can never lose to "ocp"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mse_picks_the_better_of_the_two_candidates_by_brute_force(seed: int) -> None:
    blocks = _blocks(seed)
    e = choose_exponent(blocks, "mse")
    e0 = noclip_exponent(blocks.abs().amax(-1))
    for i, b in enumerate(blocks):
        errs = {c: _grid_sq_error(b, c) for c in (int(e0[i]), int(e0[i]) - 1)}
        best = min(errs.values())
        assert int(e[i]) in errs
        assert errs[int(e[i])] == best
        if errs[int(e0[i])] == best:
            assert int(e[i]) == int(e0[i])  # ties keep the no-clip exponent


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantized_blocks_reach_the_brute_force_error(seed: int) -> None:
    blocks = _blocks(seed)
    for rule in ("ocp", "noclip", "mse"):
        q, s = mxfp4_quantize(blocks, rule)  # type: ignore[arg-type]
        err = (mxfp4_dequantize(q, s) - blocks).pow(2).sum(-1)
        for i, b in enumerate(blocks):
            assert float(err[i]) == pytest.approx(_grid_sq_error(b, int(s[i, 0]) - 127), rel=1e-12)


def test_mse_is_never_worse_than_ocp_per_block() -> None:
    blocks = torch.cat([_blocks(s) for s in range(8)])
    err = {}
    for rule in ("ocp", "mse"):
        q, s = mxfp4_quantize(blocks, rule)  # type: ignore[arg-type]
        err[rule] = (mxfp4_dequantize(q, s) - blocks).pow(2).sum(-1)
    assert bool((err["mse"] <= err["ocp"]).all())
    assert bool((err["mse"] < err["ocp"]).any())  # and it does differ somewhere


def test_zero_block_quantizes_to_zero() -> None:
    q, s = mxfp4_quantize(torch.zeros(1, 32))
    assert int(s[0, 0]) == 0
    assert bool((mxfp4_dequantize(q, s) == 0).all())


# --------------------------------------------------------------------------- NVFP4


def test_nvfp4_dequantize_is_exhaustive_over_element_and_scale_codes() -> None:
    n = 256
    codes = torch.arange(16, dtype=torch.uint8).repeat(n, 1)  # one 16-block per scale code
    scale = torch.arange(n, dtype=torch.int64).to(torch.uint8).view(n, 1)
    glob = torch.tensor([3.0], dtype=torch.float32)
    w = nvfp4_dequantize(pack_fp4(codes), scale.view(torch.float8_e4m3fn), glob)
    same = nvfp4_dequantize(pack_fp4(codes), scale, glob)  # raw u8 codes == float8_e4m3fn
    assert torch.allclose(w, same, rtol=0, atol=0, equal_nan=True)
    for c in range(n):
        sv = _e4m3_value(c)
        got = w[c].tolist()
        if sv != sv:  # NaN scale code
            assert all(g != g for g in got)
        else:
            assert got == [e * sv / 3.0 for e in E2M1_VALUES], c


def test_nvfp4_quantize_round_trips_its_own_grid() -> None:
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(48, 64, generator=gen, dtype=F64)
    packed, scale, glob = nvfp4_quantize(w)
    assert (packed.dtype, scale.dtype, glob.dtype) == (
        torch.uint8,
        torch.float8_e4m3fn,
        torch.float32,
    )
    assert packed.shape == (48, 32) and scale.shape == (48, 4) and glob.shape == (1,)
    wq = nvfp4_dequantize(packed, scale, glob)
    again = nvfp4_dequantize(*nvfp4_quantize(wq))
    assert rel_rms(again, wq) < 1e-6  # a dequantized NVFP4 tensor is (nearly) a fixed point
    assert 0.05 < rel_rms(wq, w) < 0.15  # 4-bit float class on Gaussian weights


def test_requant_rules_order_on_gaussian_weights() -> None:
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(64, 256, generator=gen, dtype=F64)
    nv = nvfp4_dequantize(*nvfp4_quantize(w))
    errs = {r: rel_rms(mxfp4_dequantize(*mxfp4_quantize(nv, r)), w) for r in ("ocp", "mse")}  # type: ignore[arg-type]
    assert errs["mse"] < errs["ocp"]
    assert rel_rms(nv, w) < errs["mse"]  # double rounding costs


# --------------------------------------------------------------------------- checkpoint builders


def _tiny_model(path: Path) -> dict[str, torch.Tensor]:
    """A one-layer bf16 'model' directory with the decoder-linear names the builders look for."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(7)
    shapes = {
        "self_attn.q_proj": (64, 128),
        "self_attn.o_proj": (128, 64),
        "mlp.down_proj": (128, 64),
    }
    t = {
        f"model.layers.0.{p}.weight": (torch.randn(*s, generator=gen) * 0.05).to(torch.bfloat16)
        for p, s in shapes.items()
    }
    t["model.embed_tokens.weight"] = torch.randn(16, 128, generator=gen).to(torch.bfloat16)
    path.mkdir()
    save_file(t, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    return t


def test_builders_write_each_format_and_round_trip(tmp_path: Path) -> None:
    from paro_kernels.builders import int5_checkpoint, nvfp4_checkpoint, paro_mxfp4_checkpoint
    from paro_kernels.reference import paro_linear_ref
    from safetensors.torch import load_file

    src = _tiny_model(tmp_path / "bf16")
    pre = "model.layers.0.self_attn.q_proj"
    w = src[f"{pre}.weight"].to(F64)
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(8), dtype=F64)

    s = paro_mxfp4_checkpoint(tmp_path / "bf16", tmp_path / "mx", group_size=64, krot=2)
    t = load_file(str(tmp_path / "mx" / "model.safetensors"))
    qc = json.loads((tmp_path / "mx" / "config.json").read_text())["quantization_config"]
    assert (s.layers, qc["quant_method"], qc["group_size"]) == (3, "paroquant_mxfp4", 64)
    assert (tmp_path / "mx" / "tokenizer.json").exists() and f"{pre}.weight" in t
    assert t[f"{pre}.weight"].shape == (64, 64) and t[f"{pre}.weight_scale"].shape == (64, 4)
    args = (t[f"{pre}.{n}"] for n in ("weight", "weight_scale", "pairs", "theta", "channel_scales"))
    y = paro_mxfp4_linear_ref(x, *args, group_size=64)
    assert 0.05 < rel_rms(y, x @ w.t()) < 0.2  # MXFP4 class

    nvfp4_checkpoint(tmp_path / "bf16", tmp_path / "nv", fp8_pattern=r"o_proj")
    t = load_file(str(tmp_path / "nv" / "model.safetensors"))
    qc = json.loads((tmp_path / "nv" / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "nvfp4-pack-quantized"
    assert t["model.layers.0.self_attn.o_proj.weight"].dtype == torch.float8_e4m3fn
    nv = nvfp4_dequantize(
        *(t[f"{pre}.{n}"] for n in ("weight_packed", "weight_scale", "weight_global_scale"))
    )
    assert 0.05 < rel_rms(nv, w) < 0.15

    int5_checkpoint(tmp_path / "bf16", tmp_path / "i5", group_size=64, krot=2)
    t = load_file(str(tmp_path / "i5" / "model.safetensors"))
    assert t[f"{pre}.qweight_hi"].shape == (128, 2)  # [K, N/32] fifth-bit plane
    names = ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales")
    y5 = paro_linear_ref(
        x,
        *(t[f"{pre}.{n}"] for n in names),
        bits=5,
        group_size=64,
        qweight_hi=t[f"{pre}.qweight_hi"],
        qzeros_hi=t[f"{pre}.qzeros_hi"],
    )
    assert rel_rms(y5, x @ w.t()) < 0.06  # int5 g64 RTN: well under MXFP4's error
