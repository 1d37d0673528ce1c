"""ParoQuant checkpoints: make one by RTN from a bf16 HF safetensors model, and validate one.

Layout written (z-lab `paroquant` real-mode export, per decoder linear `<prefix>`):
`<prefix>.qweight [K, N/8] i32`, `.qzeros [K/G, N/8] i32` (AWQ nibble order, zeros not offset),
`.scales [K/G, N] f16`, `.pairs [krot, K] i16` (local to each G-group), `.theta [krot, K/2] f16`,
`.channel_scales [1, K] f16` (pre-inverted: multiplies activations), `.bias [N] f16` if present;
bits=5 adds `.qweight_hi [K, N/32]`, `.qzeros_hi [K/G, N/32]` i32 fifth-bit planes. config.json
gets `quantization_config = {quant_method: "paroquant", bits, group_size, krot}`.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from . import reference as ref
from .formats import AWQ_PACK_ORDER, pack_awq, pack_bitplane, unpack_awq, unpack_bitplane

LINEAR_RE = re.compile(
    r"^(?P<prefix>(?:.*\.)?layers\.\d+\."
    r"(?:self_attn\.(?:q|k|v|o)_proj|mlp\.(?:gate|up|down)_proj))\.weight$"
)
INDEX_NAME = "model.safetensors.index.json"
CONFIG_KEYS = ("quant_method", "bits", "group_size", "krot")


class CheckpointError(Exception):
    """A model or checkpoint directory that cannot be read or converted; the message says why."""


@dataclass(frozen=True)
class RtnOptions:
    """How `rtn` quantizes; group_size None = 128, or 64 where 128 does not divide every K."""

    bits: int = 4
    group_size: int | None = None
    krot: int = 8
    rotation: Literal["random", "identity"] = "random"
    channel_scales: Literal["ones", "random"] = "ones"
    seed: int = 0


@dataclass(frozen=True)
class RtnSummary:
    """What `rtn` wrote."""

    layers: int
    group_size: int
    files: tuple[str, ...]


# --------------------------------------------------------------------------- files


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(f"{path}: missing") from e
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def shard_files(model_dir: Path) -> list[str]:
    """Safetensors files of a model dir: from its index if it has one, else every *.safetensors."""
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir}: not a directory")
    index = model_dir / INDEX_NAME
    if index.exists():
        wmap = _read_json(index).get("weight_map")
        if not isinstance(wmap, dict):
            raise CheckpointError(f"{index}: no 'weight_map' object")
        files = sorted(set(wmap.values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir}: no .safetensors files")
    return files


def load_shard(path: Path) -> dict[str, torch.Tensor]:
    """Load one safetensors file, turning any reader failure into a CheckpointError."""
    from safetensors.torch import load_file

    if not path.exists():
        raise CheckpointError(f"{path}: missing (listed in the index)")
    try:
        return load_file(str(path))
    except Exception as e:  # the reader raises its own error type for truncated/corrupt files
        raise CheckpointError(f"{path.name}: not a readable safetensors file ({e})") from e


# --------------------------------------------------------------------------- rtn


def choose_group_size(ks: Iterable[int], preferred: int = 128) -> int:
    """One group size for the whole model: 128 if it divides every K, else 64."""
    ks = list(ks)
    for g in (preferred, 64):
        if all(k % g == 0 for k in ks):
            return g
    bad = sorted({k for k in ks if k % 64})
    raise CheckpointError(f"in_features {bad} are not multiples of 64: no valid group size")


def make_rotation(
    k: int, g: int, krot: int, mode: str, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """pairs [krot, K] i16 and theta [krot, K/2] f16: random per group, or the identity."""
    if mode == "identity":
        pairs = torch.arange(g, dtype=torch.int16).repeat(krot, k // g)
        return pairs, torch.zeros(krot, k // 2, dtype=torch.float16)
    perms = torch.rand(krot * (k // g), g, generator=gen).argsort(dim=1)
    theta = (torch.rand(krot, k // 2, generator=gen, dtype=torch.float64) * 2 - 1) * math.pi
    return perms.reshape(krot, k).to(torch.int16), theta.to(torch.float16)


def _channel_scales(k: int, mode: str, gen: torch.Generator) -> torch.Tensor:
    # RTN has no activation statistics; "random" (0.5..2) exists to exercise the scale path.
    if mode == "ones":
        return torch.ones(1, k, dtype=torch.float16)
    return (torch.rand(1, k, generator=gen) * 1.5 + 0.5).to(torch.float16)


def quantize_linear(
    weight: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    channel_scales: torch.Tensor,
    bits: int,
    group_size: int,
) -> dict[str, torch.Tensor]:
    """RTN-quantize W [N, K] rotated as z-lab exports it: Q ~ rot(W / channel_scales) per row.

    channel_scales [1, K] f16 is the stored (pre-inverted) activation multiplier, so the weight
    is divided by it; with R orthogonal, rot(x * cs) rot(W / cs)^T = x W^T. Scales are rounded
    to f16 before the codes are chosen, so dequantization reproduces the chosen grid exactly.
    """
    n, k = weight.shape
    qmax = (1 << bits) - 1
    w = ref.rotate(
        weight.to(torch.float64) / channel_scales.to(torch.float64)[0], pairs, theta, group_size
    ).view(n, k // group_size, group_size)
    lo, hi = w.amin(dim=2, keepdim=True), w.amax(dim=2, keepdim=True)
    scale = ((hi - lo).clamp(min=1e-5) / qmax).to(torch.float16)
    s = scale.to(torch.float64)
    zero = (-torch.round(lo / s)).clamp(0, qmax)
    codes = (torch.round(w / s) + zero).clamp(0, qmax).to(torch.int32).view(n, k).t().contiguous()
    zeros = zero.to(torch.int32).view(n, -1).t().contiguous()
    out = {
        "qweight": pack_awq(codes & 0xF, "codes"),
        "qzeros": pack_awq(zeros & 0xF, "zeros"),
        "scales": scale.view(n, -1).t().contiguous(),
        "pairs": pairs,
        "theta": theta,
        "channel_scales": channel_scales,
    }
    if bits == 5:
        out["qweight_hi"] = pack_bitplane(codes >> 4, "codes")
        out["qzeros_hi"] = pack_bitplane(zeros >> 4, "zeros")
    return out


def _linear_in_features(src: Path, files: list[str]) -> dict[str, tuple[int, int]]:
    from safetensors import safe_open

    shapes: dict[str, tuple[int, int]] = {}
    for name in files:
        try:
            with safe_open(str(src / name), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                    m = LINEAR_RE.match(key)
                    if m:
                        n, k = f.get_slice(key).get_shape()
                        shapes[m["prefix"]] = (int(n), int(k))
        except Exception as e:
            raise CheckpointError(f"{name}: not a readable safetensors file ({e})") from e
    return shapes


def rtn_checkpoint(src: Path, dst: Path, opts: RtnOptions) -> RtnSummary:
    """Write a ParoQuant checkpoint of the bf16 model in `src` to `dst`, shard by shard."""
    from safetensors.torch import save_file

    if opts.bits not in (4, 5):
        raise CheckpointError(f"bits: expected 4 or 5, got {opts.bits}")
    if opts.krot < 1:
        raise CheckpointError(f"krot: expected >= 1, got {opts.krot}")
    config = _read_json(src / "config.json")
    files = shard_files(src)
    shapes = _linear_in_features(src, files)
    if not shapes:
        raise CheckpointError(f"{src}: no decoder-layer linear weights (*.layers.N.*_proj.weight)")
    g = opts.group_size or choose_group_size(k for _, k in shapes.values())
    align = 32 if opts.bits == 5 else 8
    for prefix, (n, k) in shapes.items():
        if k % g or n % align:
            raise CheckpointError(
                f"{prefix}.weight: shape [{n}, {k}] needs K % {g} == 0 and N % {align} == 0"
            )
    dst.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(opts.seed)
    weight_map: dict[str, str] = {}
    total = 0
    for name in files:
        tensors = load_shard(src / name)
        out: dict[str, torch.Tensor] = {}
        for key in sorted(tensors):
            m = LINEAR_RE.match(key)
            if not m:
                is_linear_bias = key.endswith(".bias") and key[: -len(".bias")] in shapes
                out[key] = tensors[key].to(torch.float16) if is_linear_bias else tensors[key]
                continue
            prefix = m["prefix"]
            n, k = shapes[prefix]
            pairs, theta = make_rotation(k, g, opts.krot, opts.rotation, gen)
            cs = _channel_scales(k, opts.channel_scales, gen)
            q = quantize_linear(tensors[key], pairs, theta, cs, opts.bits, g)
            out.update({f"{prefix}.{s}": t.contiguous() for s, t in q.items()})
        save_file(out, str(dst / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(out, name))
        total += sum(t.numel() * t.element_size() for t in out.values())
    if (src / INDEX_NAME).exists():
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (dst / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    for extra in src.iterdir():  # tokenizer, generation config, ...: carried over unchanged
        if (
            extra.is_file()
            and extra.suffix != ".safetensors"
            and extra.name not in ("config.json", INDEX_NAME)
        ):
            shutil.copy2(extra, dst / extra.name)
    config["quantization_config"] = {
        "quant_method": "paroquant",
        "bits": opts.bits,
        "group_size": g,
        "krot": opts.krot,
    }
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return RtnSummary(layers=len(shapes), group_size=g, files=tuple(files))


# --------------------------------------------------------------------------- inspect


@dataclass
class Report:
    """Result of `inspect_checkpoint`: every error found (not just the first), plus notes."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    layers: int = 0

    @property
    def ok(self) -> bool:
        """True when no error was found."""
        return not self.errors


def _check_config(model_dir: Path, rep: Report) -> dict | None:
    try:
        config = _read_json(model_dir / "config.json")
    except CheckpointError as e:
        rep.errors.append(str(e))
        return None
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        rep.errors.append("config.json: no 'quantization_config' object")
        return None
    bad = []
    if qc.get("quant_method") != "paroquant":
        bad.append(f"quant_method: expected 'paroquant', got {qc.get('quant_method')!r}")
    if qc.get("bits") not in (4, 5):
        bad.append(f"bits: expected 4 or 5, got {qc.get('bits')!r}")
    gs = qc.get("group_size")
    if not (isinstance(gs, int) and gs > 0 and gs % 2 == 0):
        bad.append(f"group_size: expected a positive even integer, got {gs!r}")
    kr = qc.get("krot")
    if not (isinstance(kr, int) and kr > 0):
        bad.append(f"krot: expected a positive integer, got {kr!r}")
    rep.errors += [f"config.json quantization_config.{b}" for b in bad]
    extra = sorted(set(qc) - set(CONFIG_KEYS))
    if extra:
        rep.warnings.append(f"config.json quantization_config: unknown keys {extra}")
    return None if bad else qc


_DTYPES = {
    "qweight": torch.int32,
    "qzeros": torch.int32,
    "scales": torch.float16,
    "pairs": torch.int16,
    "theta": torch.float16,
    "channel_scales": torch.float16,
    "qweight_hi": torch.int32,
    "qzeros_hi": torch.int32,
}


def _expected_shapes(k: int, n: int, g: int, krot: int) -> dict[str, tuple[int, ...]]:
    return {
        "qweight": (k, n // 8),
        "qzeros": (k // g, n // 8),
        "scales": (k // g, n),
        "pairs": (krot, k),
        "theta": (krot, k // 2),
        "channel_scales": (1, k),
        "qweight_hi": (k, n // 32),
        "qzeros_hi": (k // g, n // 32),
        "bias": (n,),
    }


def _zero_pairing_gap(codes: torch.Tensor, zeros: torch.Tensor, g: int) -> float:
    """Median |mean code of a (group, column) - its zero|: small when codes and zeros pair up."""
    k, n = codes.shape
    means = codes.double().view(k // g, g, n).mean(dim=1)
    return float((means - zeros.double()).abs().median())


def _check_nibble_pairing(
    prefix: str, qzeros: torch.Tensor, codes: torch.Tensor, zeros: torch.Tensor, g: int, rep: Report
) -> None:
    """Flag qzeros whose nibbles pair with the codes better in a non-AWQ slot order.

    For RTN-like grids a group's mean code sits near its zero; if qweight and qzeros were packed
    in different nibble orders, reading the zeros' slots in plain or inverse order (the other
    members of the AWQ shuffle's cyclic group) pairs them up better than the declared order.
    """
    n = codes.shape[1]
    slots = (qzeros.long().unsqueeze(-1) >> (torch.arange(8) * 4)) & 0xF  # [K/G, N/8, slot]
    high = (zeros >> 4).view(-1, n // 8, 8)
    declared = _zero_pairing_gap(codes, zeros, g)
    for order_name, order in (("plain", list(range(8))), ("AWQ_PACK_ORDER", AWQ_PACK_ORDER)):
        alt = (slots[:, :, list(order)] | (high << 4)).reshape(-1, n)
        gap = _zero_pairing_gap(codes, alt, g)
        if gap < 0.75 * declared and declared - gap > 0.2:
            rep.errors.append(
                f"{prefix}.qzeros: zeros pair with the codes in {order_name} nibble order "
                f"(median |mean code - zero| {gap:.2f}) better than in AWQ order ({declared:.2f}):"
                f" qweight and qzeros were packed in different orders"
            )
            return


def _check_layer(prefix: str, t: dict[str, torch.Tensor], qc: dict, rep: Report) -> None:
    bits, g, krot = qc["bits"], qc["group_size"], qc["krot"]
    names = ["qweight", "qzeros", "scales", "pairs", "theta", "channel_scales"]
    names += ["qweight_hi", "qzeros_hi"] if bits == 5 else []
    missing = [s for s in names if s not in t]
    if missing:
        rep.errors.append(f"{prefix}: missing tensors {missing}")
        return
    errs = [
        f"{prefix}.{s}: dtype expected {_DTYPES[s]}, got {t[s].dtype}"
        for s in names
        if t[s].dtype != _DTYPES[s]
    ]
    if "bias" in t and not t["bias"].is_floating_point():
        errs.append(f"{prefix}.bias: dtype expected a float dtype, got {t['bias'].dtype}")
    if t["qweight"].dim() != 2:
        errs.append(
            f"{prefix}.qweight: expected 2-D [K, N/8], got shape {list(t['qweight'].shape)}"
        )
    if errs:
        rep.errors += errs
        return
    k, n = t["qweight"].shape[0], t["qweight"].shape[1] * 8
    if k % g:
        rep.errors.append(f"{prefix}.qweight: K = {k} is not a multiple of group_size {g}")
        return
    want = _expected_shapes(k, n, g, krot)
    errs = [
        f"{prefix}.{s}: shape expected {list(want[s])}, got {list(t[s].shape)}"
        for s in [*names, *(["bias"] if "bias" in t else [])]
        if tuple(t[s].shape) != want[s]
    ]
    if bits == 5 and n % 32:
        errs.append(f"{prefix}.qweight: N = {n} is not a multiple of 32 (needed for bits=5)")
    if errs:
        rep.errors += errs
        return
    local = t["pairs"].long().view(krot, k // g, g).sort(dim=-1).values
    bad = (local != torch.arange(g)).any(dim=-1).nonzero()
    if bad.numel():
        r, grp = bad[0].tolist()
        rep.errors.append(
            f"{prefix}.pairs: layer {r} group {grp} is not a permutation of "
            f"0..{g - 1} ({bad.shape[0]} bad (layer, group) blocks)"
        )
    for s in ("theta", "channel_scales", "scales"):
        if not bool(torch.isfinite(t[s]).all()):
            rep.errors.append(f"{prefix}.{s}: contains NaN or inf")
    if bool((t["channel_scales"] == 0).any()):
        rep.errors.append(f"{prefix}.channel_scales: contains zeros (pre-inverted scales multiply)")
    if bool((t["scales"] <= 0).any()):
        rep.warnings.append(f"{prefix}.scales: {int((t['scales'] <= 0).sum())} non-positive scales")
    codes, zeros = unpack_awq(t["qweight"]), unpack_awq(t["qzeros"])
    if bits == 5:
        codes = codes | (unpack_bitplane(t["qweight_hi"]) << 4)
        zeros = zeros | (unpack_bitplane(t["qzeros_hi"]) << 4)
    _check_nibble_pairing(prefix, t["qzeros"], codes, zeros, g, rep)
    rep.info.append(
        f"{prefix}: K={k} N={n} zeros {int(zeros.min())}..{int(zeros.max())} "
        f"({float((zeros == (1 << (bits - 1))).double().mean()):.0%} at midpoint)"
    )


def inspect_checkpoint(model_dir: Path) -> Report:
    """Validate a ParoQuant checkpoint dir against the format; collects every problem found."""
    rep = Report()
    qc = _check_config(model_dir, rep)
    try:
        files = shard_files(model_dir)
    except CheckpointError as e:
        rep.errors.append(str(e))
        return rep
    layers: dict[str, dict[str, torch.Tensor]] = {}
    for name in files:
        try:
            tensors = load_shard(model_dir / name)
        except CheckpointError as e:
            rep.errors.append(str(e))
            continue
        for key, tensor in tensors.items():
            prefix, _, suffix = key.rpartition(".")
            if suffix in _DTYPES or suffix == "bias":
                layers.setdefault(prefix, {})[suffix] = tensor
            if LINEAR_RE.match(key):
                rep.warnings.append(f"{key}: decoder linear left unquantized")
    layers = {p: t for p, t in layers.items() if set(t) - {"bias"}}
    if not layers and not rep.errors:
        rep.errors.append(f"{model_dir}: no quantized layers (no *.qweight tensors)")
    if qc is not None:
        for prefix in sorted(layers):
            _check_layer(prefix, layers[prefix], qc, rep)
    rep.layers = len(layers)
    return rep
