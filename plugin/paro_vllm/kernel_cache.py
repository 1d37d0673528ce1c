"""The plugin's precompiled Triton kernels: what a model's layers need, built and counted.

A *plan* names the layers of a served model (method, output partition sizes, K, bits, group
size, the activation knobs) and the token counts M it runs at. `calls(plan)` drives the plugin's
own Triton entry points (`triton_backend.apply`, `mx_triton_backend.apply`: the functions
vLLM's `apply` calls) on layers prepared by the plugin's own `prepare`, so every kernel and
config the launcher picks for those shapes is visited; `paro_kernels.triton.precompile` runs
them under its compile-only stand-in (see its docstring for why the cache keys are the JIT's).

M buckets (`ms`): every M up to 16, the CUDA/HIP-graph capture sizes (vLLM's default list up
to the largest capture size), and every multiple of 16 up to the chunk (max_num_batched_tokens)
with the M just above it: Triton specializes an int on `== 1`
and `% 16 == 0`, and every M threshold of the launcher is a multiple of 16, so both sides of
each are visited.

The marker field `kernels=precompiled:N jit:M` (`marker_field`): the distinct kernel
specializations this process's Triton layers need at those M (N + M of them), N found in the
shipped cache, M absent (compiled at boot by the same walk, so capture then hits the writable
cache). No Triton layer (the reference backend): `kernels=precompiled:0 jit:0`.

Image layout: the cache is built inside the image by `python -m paro_vllm.kernel_cache build`
into /opt/paroctl/kernel-cache/<target>/ (`paroctl image build` writes the plan); `activate()`
(called by `register()` in every vLLM process) points Triton's cache manager at it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SHIPPED_ROOT = Path("/opt/paroctl/kernel-cache")
log = logging.getLogger("paro_vllm")


@dataclass(frozen=True)
class Layer:
    """One linear's shape as the kernels see it."""

    method: str
    sizes: tuple[int, ...]  # output partitions (N = their sum)
    k: int
    bits: int = 4
    group_size: int = 128
    bias: bool = False


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to max_size: 1, 2, 4, 8..248 by 8, 256.. by 16."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def ms(max_capture: int, chunk: int, captures: Iterable[int] | None = None) -> list[int]:
    """The M buckets: capture sizes (vLLM's default list to max_capture, or the serve's own
    `captures`), then the prefill band sampled (module doc)."""
    caps = sorted(captures) if captures is not None else capture_sizes(max_capture)
    # From 16 whatever the captures: an eager serve (or a smaller capture list) runs those Ms too.
    band = {v for b in range(16, chunk + 1, 16) for v in (b, b + 1)}
    small = range(1, min(16, chunk) + 1)  # eager serves every M: the decode band's classes
    return sorted({*small, *caps, *(v for v in band if v <= chunk), chunk})


# --------------------------------------------------------------------------- layers -> calls


def _prep(layer: Layer, device: str = "cpu", wide: bool = False) -> object:
    """The layer prepared by the plugin's own backend `prepare`, from synthetic checkpoint data
    (zero codes, unit scales, seeded rotations and MXFP4 blocks: the same layout on every run)."""
    from paro_kernels.triton import mx_repack

    n, k, g = sum(layer.sizes), layer.k, layer.group_size
    runs = mx_repack.random_runs(k, layer.sizes, g) if layer.method != "nvfp4_mxfp4" else None
    if layer.method == "paroquant":
        from . import triton_backend

        def z(*shape: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        hi: dict[str, Any] = {}
        if layer.bits == 5:
            hi = {"qweight_hi": z(k, n // 32, dtype=torch.int32),
                  "qzeros_hi": z(k // g, n // 32, dtype=torch.int32)}  # fmt: skip
        return triton_backend.prepare(
            z(k, n // 8, dtype=torch.int32), z(k // g, n // 8, dtype=torch.int32),
            torch.ones(k // g, n, dtype=torch.float16, device=device), runs or [], g,
            torch.bfloat16, layer.bits, **hi,
        )  # fmt: skip
    from . import mx_triton_backend

    w, s = mx_repack.random_checkpoint(n, k, device=device)
    if wide:  # one column spanning 199 binades: no operand kind folds it exactly
        s[0, :2] = torch.tensor([1, 200], dtype=torch.uint8)
    return mx_triton_backend.prepare(w, s, runs, g if runs else 0, torch.bfloat16)


def preps(layer: Layer, device: str = "cpu") -> list[object]:
    """Every prepared form whose data picks other kernels: for MXFP4 the folded GEMM and the
    per-block one (chosen per weight by its exponent span, `mx_repack.MxWeight.fold_ok`)."""
    if layer.method == "paroquant":
        return [_prep(layer, device)]
    return [_prep(layer, device), _prep(layer, device, wide=True)]


def layer_calls(
    layer: Layer, prep: object, knobs: Mapping[str, str], buckets: Iterable[int]
) -> list[Callable[[Callable[[torch.Tensor], torch.Tensor]], object]]:
    """One call per M: the backend's apply on a fake [M, K] bf16 input (bias as the layer has)."""
    from paro_kernels.triton.precompile import fake_like

    from . import activations

    def call(m: int) -> Callable[[Callable[[torch.Tensor], torch.Tensor]], object]:
        def run(fake: Callable[[torch.Tensor], torch.Tensor]) -> object:
            p = fake_like(prep, fake)
            x = fake(torch.empty(0).new_empty((m, layer.k), dtype=torch.bfloat16, device="meta"))
            n = sum(layer.sizes)
            b = fake(torch.empty(n, dtype=torch.bfloat16, device="meta")) if layer.bias else None
            if layer.method == "paroquant":
                from . import triton_backend

                act = activations.act_config(knobs, m, layer.group_size)
                return triton_backend.apply(p, x, b, act)
            from . import mx_triton_backend

            return mx_triton_backend.apply(p, x, b, knobs["PARO_ACT_FORMAT"])

        return run

    return [call(m) for m in buckets]


@dataclass(frozen=True)
class Plan:
    """What one served model needs compiled: its layers, knobs and M buckets."""

    name: str
    layers: tuple[Layer, ...]
    knobs: Mapping[str, str]
    ms: tuple[int, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Plan:
        """A plan from its JSON form (`paroctl image build` writes these)."""
        from .knobs import read_env

        layers = tuple(
            Layer(d["method"], tuple(d["sizes"]), d["k"], d.get("bits", 4),
                  d.get("group_size", 128), d.get("bias", False))
            for d in data["layers"]
        )  # fmt: skip
        knobs = read_env({k: str(v) for k, v in data.get("knobs", {}).items()})
        buckets = tuple(data.get("ms") or ms(data["max_capture"], data["chunk"]))
        return cls(data["name"], layers, knobs, buckets)

    def calls(self) -> list[Callable[[Callable[[torch.Tensor], torch.Tensor]], object]]:
        """Every call of the walk, layer by layer."""
        out = []
        for layer in dict.fromkeys(self.layers):
            for prep in preps(layer):
                out += layer_calls(layer, prep, self.knobs, self.ms)
        return out


# --------------------------------------------------------------------------- runtime


def shipped_dir(target: str | None = None, root: Path = SHIPPED_ROOT) -> Path:
    """The shipped cache of `target` (the root, all targets, when None)."""
    return root / (target or "")


def activate(root: Path = SHIPPED_ROOT) -> None:
    """Point Triton at the shipped cache (if this image has one); safe without a GPU."""
    if not root.is_dir():
        return
    try:
        from paro_kernels.triton import precompile
    except ImportError:  # no triton in this environment
        return
    targets = [p for p in root.iterdir() if p.is_dir()]
    precompile.activate(targets[0] if len(targets) == 1 else _this_target(root))


def _this_target(root: Path) -> Path | None:
    from triton.runtime.driver import driver

    try:
        t = driver.active.get_current_target()
    except RuntimeError:
        return None
    name = t.arch if t.backend == "hip" else f"sm{t.arch}"
    return root / str(name)


# This process's Triton layers, one prepared layer per distinct shape and data-picked variant
# (the probe's inputs).
LAYERS: dict[tuple[Layer, tuple[bool, ...]], object] = {}
KNOBS: dict[str, str] = {}
NONE_FIELD = "kernels=precompiled:0 jit:0"


def _variant(prep: object) -> tuple[bool, ...]:
    """What in a prepared layer's data picks kernels: the MXFP4 weight's fold per operand kind
    (the one data-dependent choice of the launcher today; `preps` builds both)."""
    w = getattr(prep, "weight", None)
    fold_ok = getattr(w, "fold_ok", None)
    return tuple(bool(fold_ok(opk)) for opk in (0, 1, 2)) if callable(fold_ok) else ()


def record(layer: Layer, prep: object, knobs: Mapping[str, str]) -> None:
    """Note a layer prepared for the Triton kernels (the first of each shape/variant is kept)."""
    LAYERS.setdefault((layer, _variant(prep)), prep)
    KNOBS.update(knobs)


def marker_field() -> str:
    """`kernels=precompiled:N jit:M` for this process's Triton layers (module doc).

    N + M = the distinct kernel specializations those layers need at this serve's M buckets;
    N were found in the shipped cache, M were not (compiled now, into the writable cache).
    `kernels=unknown` when the probe itself failed (logged): a profile expecting jit:0 fails.
    """
    if not LAYERS:
        return NONE_FIELD
    try:
        captures, chunk = _serve_buckets()
        res = probe(LAYERS, KNOBS, ms(0, chunk, captures))
    except Exception:
        log.exception("paro-vllm: kernel cache probe failed")
        return "kernels=unknown"
    return f"kernels=precompiled:{res.count('shipped')} jit:{len(res.keys) - res.count('shipped')}"


def probe(
    layers: Mapping[tuple[Layer, tuple[bool, ...]], object],
    knobs: Mapping[str, str],
    buckets: list[int],
    chip: Any = None,
    shipped: Path | None = None,
    cache_dir: Path | None = None,
) -> Any:
    """Walk the layers under the stand-in (for this process's GPU unless `chip` is given) with
    the active shipped and writable caches unless given; a `precompile.WalkResult`."""
    import triton
    from paro_kernels.triton import precompile

    if chip is None:
        from triton.runtime.driver import driver

        t = driver.active.get_current_target()
        name = t.arch if t.backend == "hip" else f"sm{t.arch}"
        dev = torch.cuda.current_device()
        chip = precompile.Chip(
            str(name), t, torch.cuda.get_device_properties(dev).multi_processor_count
        )
    calls = [c for (la, _), prep in layers.items() for c in layer_calls(la, prep, knobs, buckets)]
    if shipped is None and precompile._SHIPPED:
        shipped = precompile._SHIPPED[0]
    return precompile.walk(chip, calls, cache_dir or Path(triton.knobs.cache.dir), shipped)


def _serve_buckets() -> tuple[list[int], int]:
    """(graph capture sizes, prefill chunk) of this vLLM serve (eager: no captures)."""
    try:
        from vllm.config import get_current_vllm_config

        cfg = get_current_vllm_config()
        sizes = list(cfg.compilation_config.cudagraph_capture_sizes or [])
        eager = cfg.model_config is not None and cfg.model_config.enforce_eager
        return ([] if eager else sizes), int(cfg.scheduler_config.max_num_batched_tokens)
    except Exception:  # no vLLM config in this process (a test): the box's defaults
        return capture_sizes(128), 8192


# --------------------------------------------------------------------------- CLI (image build)


def build(plans: list[Plan], target: str, out: Path) -> dict[str, Any]:
    """Compile every plan's kernels for `target` into out/; write the manifest; a summary."""
    from paro_kernels.triton import precompile

    chip = precompile.CHIPS[target]
    out.mkdir(parents=True, exist_ok=True)
    calls = [c for p in plans for c in p.calls()]
    res = precompile.walk(chip, calls, out)
    precompile.write_manifest(out, chip, res, {"plans": [p.name for p in plans]})
    entries = [e for e in precompile.inventory(out) if e.key in res.keys]
    summary: dict[str, Any] = {"target": target, "keys": len(res.keys),
                               "compiled": res.count("compiled"),
                               "seconds": round(res.seconds, 1)}  # fmt: skip
    if any(e.vgprs > 0 for e in entries):  # AMDGCN: what each kernel costs the SIMD
        usage: dict[str, dict[str, int]] = {}
        for e in entries:
            u = usage.setdefault(e.name, {"max_vgprs": 0, "min_waves": 16, "max_sgpr_spills": 0})
            u["max_vgprs"] = max(u["max_vgprs"], e.vgprs)
            u["min_waves"] = min(u["min_waves"], e.waves_per_simd)
            u["max_sgpr_spills"] = max(u["max_sgpr_spills"], e.sgpr_spills)
        summary["usage"] = usage
    summary["spills"] = precompile.spills(entries)
    return summary


def check(plans: list[Plan], target: str, cache: Path) -> list[str]:
    """The specializations the plans need that `cache` lacks, as 'kernel key' lines."""
    import tempfile

    from paro_kernels.triton import precompile

    chip = precompile.CHIPS[target]
    calls = [c for p in plans for c in p.calls()]
    with tempfile.TemporaryDirectory() as scratch:
        res = precompile.walk(chip, calls, Path(scratch), cache)
    return sorted(f"{res.names[k]} {k}" for k, v in res.keys.items() if v != "shipped")


def _plans(path: Path) -> tuple[list[str], list[Plan]]:
    data = json.loads(path.read_text())
    return list(data.get("targets", [])), [Plan.from_json(d) for d in data["plans"]]


def main(argv: list[str] | None = None) -> int:
    """`build` / `check` / `inventory`, per target of the plan (or --target) under --root."""
    ap = argparse.ArgumentParser(prog="python -m paro_vllm.kernel_cache")
    ap.add_argument("verb", choices=("build", "check", "inventory"))
    ap.add_argument("--plan", type=Path)
    ap.add_argument("--target", action="append", default=[])
    ap.add_argument("--root", type=Path, default=SHIPPED_ROOT)
    a = ap.parse_args(argv)
    from paro_kernels.triton import precompile

    targets, plans = _plans(a.plan) if a.plan else ([], [])
    gaps = 0
    for target in a.target or targets:
        cache = shipped_dir(target, a.root)
        if a.verb == "build":
            summary = build(plans, target, cache)
            print(json.dumps(summary), flush=True)
            # A kernel that spills to memory fails the image build: the budgets were designed
            # (and AOT-checked in CI) spill-free, so this Triton or a new shape broke one.
            for line in summary["spills"]:
                print(f"spills: {line}", file=sys.stderr)
            gaps += len(summary["spills"])
        elif a.verb == "inventory":
            entries = precompile.inventory(cache)
            for e in entries:
                regs = (f" vgprs={e.vgprs} waves={e.waves_per_simd} sgpr_spills={e.sgpr_spills}"
                        f" scratch={e.scratch}" if e.vgprs >= 0 else "")  # fmt: skip
                run = f"warps={e.num_warps} stages={e.num_stages}"
                print(f"{e.name} {e.target} {run}{regs} {e.key}")
            print(f"kernel cache {cache}: {len(entries)} kernels")
        else:
            missing = check(plans, target, cache)
            for g in missing:
                print(f"missing: {g}")
            print(f"kernel cache {cache}: {len(missing)} needed specializations missing")
            gaps += len(missing)
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
