"""Checkpoint builders for tests and demos: int5 RTN bit-planes, MXFP4-PARO, NVFP4 (CT).

Each reads a bf16 Hugging Face model directory (safetensors shards) and writes a sibling checkpoint
shard by shard, tokenizer and other files carried over. Rotations are the trained ones when given
(prefix -> (pairs, theta, channel_scales)), else seeded random ones as `rtn` makes them.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .checkpoint import (
    INDEX_NAME,
    LINEAR_RE,
    CheckpointError,
    choose_group_size,
    load_shard,
    make_rotation,
    quantize_linear,
    shard_files,
)
from .formats import E4M3_MAX, e4m3_encode
from .mx import ExpRule, nvfp4_quantize, quantize_paro_mxfp4

Rotation = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # pairs, theta, channel_scales
Quantizer = Callable[[str, torch.Tensor], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class BuildSummary:
    """What a builder wrote."""

    layers: int
    group_size: int
    kinds: dict[str, int]


def _read_config(src: Path) -> dict[str, Any]:
    try:
        config: dict[str, Any] = json.loads((src / "config.json").read_text())
        return config
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{src}/config.json: not readable JSON ({e})") from e


def _linear_shapes(src: Path, files: list[str]) -> dict[str, tuple[int, int]]:
    from safetensors import safe_open

    shapes: dict[str, tuple[int, int]] = {}
    for name in files:
        with safe_open(str(src / name), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                m = LINEAR_RE.match(key)
                if m:
                    n, k = f.get_slice(key).get_shape()
                    shapes[m["prefix"]] = (int(n), int(k))
    if not shapes:
        raise CheckpointError(f"{src}: no decoder-layer linear weights (*.layers.N.*_proj.weight)")
    return shapes


def _convert(src: Path, dst: Path, quantize: Quantizer, quant_config: dict[str, Any]) -> int:
    """Write dst from src with each decoder linear replaced by quantize(prefix, W); the count."""
    from safetensors.torch import save_file

    config, files = _read_config(src), shard_files(src)
    dst.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = count = 0
    for name in files:
        out: dict[str, torch.Tensor] = {}
        tensors = load_shard(src / name)
        for key in sorted(tensors):
            m = LINEAR_RE.match(key)
            if m:
                out.update(
                    {
                        f"{m['prefix']}.{s}": t.contiguous()
                        for s, t in quantize(m["prefix"], tensors[key]).items()
                    }
                )
                count += 1
            else:
                out[key] = tensors[key]
        save_file(out, str(dst / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(out, name))
        total += sum(t.numel() * t.element_size() for t in out.values())
    if (src / INDEX_NAME).exists():
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (dst / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    for extra in src.iterdir():  # tokenizer, generation config, chat template: unchanged
        if (
            extra.is_file()
            and extra.suffix != ".safetensors"
            and extra.name
            not in (
                "config.json",
                INDEX_NAME,
            )
        ):
            shutil.copy2(extra, dst / extra.name)
    config["quantization_config"] = quant_config
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return count


def _rotations(
    shapes: Mapping[str, tuple[int, int]],
    g: int,
    krot: int,
    given: Mapping[str, Rotation] | None,
    seed: int,
) -> dict[str, Rotation]:
    """The given (trained) rotation per prefix, else a seeded random one (unit channel scales)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Rotation] = {}
    for prefix, (_, k) in sorted(shapes.items()):
        if given is not None and prefix in given:
            out[prefix] = given[prefix]
            continue
        pairs, theta = make_rotation(k, g, krot, "random", gen)
        out[prefix] = (pairs, theta, torch.ones(1, k, dtype=torch.float16))
    return out


def int5_checkpoint(
    src: Path,
    dst: Path,
    rotations: Mapping[str, Rotation] | None = None,
    group_size: int | None = None,
    krot: int = 8,
    seed: int = 0,
) -> BuildSummary:
    """int5 "int5-bitplane" RTN (uniform asymmetric, fp16 group scales) of bf16 x rotations."""
    files = shard_files(src)
    shapes = _linear_shapes(src, files)
    g = group_size or choose_group_size(k for _, k in shapes.values())
    bad = sorted(p for p, (n, k) in shapes.items() if k % g or n % 32)
    if bad:
        raise CheckpointError(f"{bad[0]}: int5 needs K % {g} == 0 and N % 32 == 0")
    rots = _rotations(shapes, g, krot, rotations, seed)

    def quantize(prefix: str, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return quantize_linear(w, *rots[prefix], bits=5, group_size=g)

    qc = {"quant_method": "paroquant", "bits": 5, "group_size": g, "krot": krot}
    n = _convert(src, dst, quantize, qc)
    return BuildSummary(n, g, {"int5": n})


def paro_mxfp4_checkpoint(
    src: Path,
    dst: Path,
    rotations: Mapping[str, Rotation] | None = None,
    group_size: int | None = None,
    krot: int = 8,
    rule: ExpRule = "mse",
    seed: int = 0,
) -> BuildSummary:
    """MXFP4-PARO (`paroquant_mxfp4`): MXFP4 of rot(W / channel_scales) per linear + rotations."""
    files = shard_files(src)
    shapes = _linear_shapes(src, files)
    g = group_size or choose_group_size(k for _, k in shapes.values())
    bad = sorted(p for p, (_, k) in shapes.items() if k % g or k % 32)
    if bad:
        raise CheckpointError(f"{bad[0]}: MXFP4-PARO needs K % {g} == 0 and K % 32 == 0")
    rots = _rotations(shapes, g, krot, rotations, seed)

    def quantize(prefix: str, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return quantize_paro_mxfp4(w, *rots[prefix], group_size=g, rule=rule)

    qc = {"quant_method": "paroquant_mxfp4", "fmt": "mxfp4", "group_size": g, "krot": krot}
    n = _convert(src, dst, quantize, qc)
    return BuildSummary(n, g, {"mxfp4": n})


def nvfp4_quant_config(fp8_targets: list[str], ignore: list[str]) -> dict[str, Any]:
    """The compressed-tensors quantization_config vLLM reads (NVFP4 W4A16 + FP8 per-channel)."""
    nvfp4 = {
        "num_bits": 4,
        "type": "float",
        "strategy": "tensor_group",
        "group_size": 16,
        "symmetric": True,
        "dynamic": False,
        "observer": "minmax",
    }
    groups: dict[str, dict[str, Any]] = {
        "group_0": {
            "targets": ["Linear"],
            "weights": nvfp4,
            "input_activations": None,
            "output_activations": None,
            "format": "nvfp4-pack-quantized",
        }
    }
    if fp8_targets:
        fp8 = {
            "num_bits": 8,
            "type": "float",
            "strategy": "channel",
            "symmetric": True,
            "dynamic": False,
            "observer": "minmax",
        }
        groups["group_1"] = {
            "targets": fp8_targets,
            "weights": fp8,
            "input_activations": None,
            "output_activations": None,
            "format": "float-quantized",
        }
    return {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": ignore,
        "kv_cache_scheme": None,
    }


def fp8_channel_quantize(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """compressed-tensors FP8 per-channel: weight e4m3 [N, K], weight_scale fp32 [N, 1] amax/448."""
    wd = w.to(torch.float64)
    scale = (wd.abs().amax(1, keepdim=True) / E4M3_MAX).to(torch.float32)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale)).to(torch.float64)
    codes = e4m3_encode(wd / safe)
    return {"weight": codes.view(torch.float8_e4m3fn), "weight_scale": scale}


def nvfp4_checkpoint(
    src: Path, dst: Path, fp8_pattern: str | None = None, bf16_pattern: str | None = None
) -> BuildSummary:
    """A compressed-tensors NVFP4 checkpoint (weight_packed / weight_scale / weight_global_scale).

    Linears whose prefix matches `fp8_pattern` are written FP8 per-channel and those matching
    `bf16_pattern` stay bf16 and join the config's `ignore` list: a mixed checkpoint like the
    seed's unsloth NVFP4 (FP8 attention and late MLPs, bf16 in_proj_a/b), so every routing branch
    of the load-time requant is exercised. bf16 wins where both match.
    """
    files = shard_files(src)
    shapes = _linear_shapes(src, files)
    bad = sorted(p for p, (_, k) in shapes.items() if k % 16)
    if bad:
        raise CheckpointError(f"{bad[0]}: NVFP4 needs K % 16 == 0")
    fp8_re = re.compile(fp8_pattern) if fp8_pattern else None
    bf16_re = re.compile(bf16_pattern) if bf16_pattern else None
    kept = sorted(p for p in shapes if bf16_re is not None and bf16_re.search(p))
    if bf16_re is not None and not kept:
        raise CheckpointError(f"--bf16 {bf16_pattern!r}: matches no linear of {src}")
    kinds = {"nvfp4": 0, "fp8": 0, "bf16": 0}

    def quantize(prefix: str, w: torch.Tensor) -> dict[str, torch.Tensor]:
        if prefix in kept:
            kinds["bf16"] += 1
            return {"weight": w.to(torch.bfloat16)}
        if fp8_re is not None and fp8_re.search(prefix):
            kinds["fp8"] += 1
            return fp8_channel_quantize(w)
        kinds["nvfp4"] += 1
        packed, scale, glob = nvfp4_quantize(w)
        return {"weight_packed": packed, "weight_scale": scale, "weight_global_scale": glob}

    targets = [f"re:{fp8_pattern}"] if fp8_pattern else []
    n = _convert(src, dst, quantize, nvfp4_quant_config(targets, ["lm_head", *kept]))
    return BuildSummary(n, 16, kinds)
