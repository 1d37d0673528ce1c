"""Run inside a paroctl image: will vLLM find the plugin, its methods and its kernels?

The last build step runs it (with the values the labels will carry), and `paroctl image doctor`
runs it in a throwaway container of a built image (with the values its labels carry), before a
boot that can take 40 minutes finds the same thing out. It does what vLLM does at start: imports
vLLM, loads the general plugins through vLLM's own loader, looks the methods up in vLLM's registry,
imports the kernels. Exit 0 when all agree, 1 naming the first mismatch (all are listed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import sys
from collections.abc import Callable

# The methods paro-vllm registers; nvfp4_mxfp4 claims NVFP4 checkpoints by overriding vLLM's
# choice, so its class must define override_quantization_method itself.
METHODS = ("paroquant", "paroquant_mxfp4", "nvfp4_mxfp4")
OVERRIDE = "nvfp4_mxfp4"
PROVENANCE = "/opt/paroctl/provenance.json"
KERNEL_PLAN = "/opt/paroctl/kernel-plan.json"  # written by the build (rocm/cuda images)


def _release(version: str) -> str:
    # A local tag (+cpu, +rocm7.0 ...) is the same release.
    return version.split("+")[0]


def _tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in _release(version).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def versions(report: dict[str, object]) -> list[str]:
    """torch / vLLM / Triton as imported (not as pip metadata says)."""
    import torch
    import vllm

    report["torch"], report["vllm"] = torch.__version__, vllm.__version__
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    for dist in ("paro-vllm", "paro-kernels"):
        try:
            report[dist] = md.version(dist)
        except md.PackageNotFoundError:
            report[dist] = None
    return []


def plugins(report: dict[str, object]) -> list[str]:
    """vLLM's own plugin loader, then its quantization registry."""
    from vllm.model_executor.layers import quantization as q
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    registered = list(q.QUANTIZATION_METHODS)
    report["methods"] = [m for m in registered if m in METHODS]
    out = []
    for method in METHODS:
        if method not in registered:
            out.append(f"quantization method {method} is not registered after the plugins loaded")
            continue
        cls = q.get_quantization_config(method)
        if not cls.__module__.startswith("paro_vllm."):
            out.append(f"quantization method {method} is {cls.__module__}.{cls.__name__}")
        elif method == OVERRIDE and "override_quantization_method" not in vars(cls):
            out.append(f"{method} ({cls.__name__}) does not override vLLM's method choice")
    return out


def kernels(report: dict[str, object], triton_needed: bool) -> list[str]:
    """The kernels' reference ops always; their Triton ops where the kind serves with Triton."""
    modules = ["paro_kernels", "paro_kernels.reference", "paro_kernels.torch_ops"]
    if triton_needed:
        modules += ["paro_kernels.triton.ops", "paro_kernels.triton.mx_ops"]
    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any import failure is the finding
            out.append(f"{name} does not import: {type(exc).__name__}: {exc}")
    report["kernels"] = modules
    return out


def kernel_cache(report: dict[str, object], plan_path: str, root: str = "") -> list[str]:
    """The shipped kernel cache per target: inventory, and every config the build's walk needed.

    The build's manifest lists each specialization the launcher picked at the plan's shapes and
    M buckets; one absent from the cache, or a cache keyed on another Triton, is a problem.
    """
    try:
        with open(plan_path) as handle:
            targets = json.load(handle).get("targets", [])
    except FileNotFoundError:
        return []  # a kind without Triton kernels (cpu)
    from pathlib import Path

    from paro_kernels.triton import precompile
    from paro_vllm import kernel_cache as kc

    out, inv = [], {}
    for target in targets:
        cache = kc.shipped_dir(target, Path(root) if root else kc.SHIPPED_ROOT)
        entries = precompile.inventory(cache)
        names: dict[str, int] = {}
        for e in entries:
            names[e.name] = names.get(e.name, 0) + 1
        manifest = precompile.read_manifest(Path(cache))
        needed = manifest.get("keys", {})
        inv[target] = {"kernels": len(entries), "by_name": names, "needed": len(needed)}
        print(f"paroctl doctor: kernel cache {target}: {len(entries)} kernels {names}", flush=True)
        if not manifest:
            out.append(f"kernel cache {cache}: no manifest (the build step did not run)")
            continue
        if manifest.get("triton_key") != precompile.triton_key_sha():
            built = manifest.get("triton")
            out.append(
                f"kernel cache {target} was built by another Triton build ({built}): "
                "every kernel would compile at boot"
            )
        gaps = precompile.missing(Path(cache), needed)
        if gaps:
            out.append(
                f"kernel cache {target} lacks {len(gaps)} of the {len(needed)} launcher configs "
                f"it needs, first {needed[gaps[0]]} {gaps[0]}"
            )
    report["kernel_cache"] = inv
    return out


def expectations(args: argparse.Namespace, report: dict[str, object]) -> list[str]:
    """What was found against what the labels claim."""
    out = []
    pairs = [
        ("vllm", args.vllm),
        ("paro-vllm", args.plugin),
        ("paro-kernels", args.kernels),
        ("torch", args.torch),
    ]
    for name, want in pairs:
        have = report.get(name)
        if want and (have is None or _release(str(have)) != _release(want)):
            out.append(f"{name} is {have}, the image label says {want}")
    triton = report.get("triton")
    if args.triton_min and (triton is None or _tuple(str(triton)) < _tuple(args.triton_min)):
        out.append(f"triton is {triton}, the kernels need >= {args.triton_min}")
    series = args.triton_series
    if series and (triton is None or _tuple(str(triton))[:2] != _tuple(series)[:2]):
        out.append(
            f"triton is {triton}, the kernels were checked on Triton {series}.* (CI's AOT checks"
            f" for this GPU; the kernel cache is built with the image's Triton): use a base with"
            f" Triton {series}"
        )
    try:
        with open(PROVENANCE) as handle:
            recorded = json.load(handle).get("source_sha")
    except (OSError, ValueError) as exc:
        recorded = f"unreadable ({exc})"
    report["source"] = recorded
    if args.source_sha and recorded != args.source_sha:
        out.append(f"{PROVENANCE} records source {recorded}, the label says {args.source_sha}")
    return out


def main() -> int:
    """Check, print the findings as one JSON line, and name the first mismatch."""
    parser = argparse.ArgumentParser(description=__doc__)
    flags = ("--vllm", "--plugin", "--kernels", "--torch", "--triton-min", "--triton-series")
    for flag in (*flags, "--source-sha"):
        parser.add_argument(flag, default="")
    parser.add_argument("--kernel-plan", default=KERNEL_PLAN)
    parser.add_argument("--kernel-cache-root", default="")
    args = parser.parse_args()
    report: dict[str, object] = {}
    steps: list[Callable[[], list[str]]] = [
        lambda: versions(report),
        lambda: plugins(report),
        lambda: kernels(report, bool(args.triton_min or args.triton_series)),
        lambda: expectations(args, report),
        lambda: kernel_cache(report, args.kernel_plan, args.kernel_cache_root),
    ]
    problems: list[str] = []
    for step in steps:
        try:
            problems += step()
        except Exception as exc:  # vLLM itself failing to import is a finding, not a crash
            problems.append(f"{type(exc).__name__}: {exc}")
            break
    report["problems"] = problems
    print("paroctl doctor: " + json.dumps(report, sort_keys=True), flush=True)
    if problems:
        print(f"paroctl doctor: first mismatch: {problems[0]}", file=sys.stderr)
        return 1
    print("paroctl doctor: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
