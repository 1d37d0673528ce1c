"""What the kernel benches share: the layer shapes, the DRAM-fed CUDA-graph timer, the weight
copies that defeat the L2, random prepared layers (int4 / int5 / MXFP4, with Givens records) and
the peers every bench puts beside its own cells (cuBLAS bf16 through `time_or_nan`,
`torch._weight_int4pack_mm`).

Timing: CUDA-graph replays of calls that cycle through weight copies together past 4x the L2
(DRAM-fed), CUDA events, median of `reps` after warm-up (`time_us`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
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


def time_us(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
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
    us = time_us(lambda: dst.copy_(src), 20)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us_mm = time_us(lambda: a @ b, 10)
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


def weight_bytes(n: int, k: int, bits: int) -> int:
    """Packed codes + fp16 scales + u8 zeros."""
    return k * n * bits // 8 + (k // G) * n * 3


def bounds(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sum(sizes[:i]) for i in range(1, len(sizes)))


def random_prep(n: int, k: int, sizes: tuple[int, ...], bits: int, dev: torch.device) -> Any:
    """A random `Prepared` layer on the GPU (the kernels' layout; values need not be a model)."""
    from paro_kernels.triton import repack

    p = len(sizes)
    rot = torch.randn(p, k // G, G, G, device=dev).to(torch.bfloat16) * 0.1
    qh = None
    if bits == 5:
        qh = torch.randint(-(2**31), 2**31 - 1, (k // 32, n), device=dev, dtype=torch.int32)
    return repack.Prepared(
        rot, rot * 0.01,
        torch.randint(-(2**31), 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32),
        (torch.rand(k // G, n, device=dev) * 0.01).half(),
        torch.randint(0, 1 << bits, (k // G, n), device=dev, dtype=torch.uint8),
        bounds(sizes), G, bits=bits, qweight_hi=qh,
    )  # fmt: skip


def goal_first_cells(
    shapes: list[str], ms: list[int]
) -> list[tuple[str, int, int, tuple[int, ...], int]]:
    """The cells in priority order: the goal cells (27B shapes at M 1, 16, 2048, 8192) first,
    then the rest of the 27B grid, then the 8B set, so a time budget cuts the least useful."""
    goal_ms = (1, 16, 2048, 8192)
    cells = [(nm, n, k, sz, m) for nm, n, k, sz in SHAPES if nm in shapes for m in ms]

    def prio(c: tuple[str, int, int, tuple[int, ...], int]) -> int:
        eight = c[0].startswith("8b-")
        return 2 * eight + (0 if c[4] in goal_ms else 1)

    return sorted(cells, key=prio)


def bytes_w4(n: int, k: int, m: int, act: int = 2) -> int:
    """Format-minimal bytes: int4 codes + fp16 scales + u8 zeros + x + y."""
    return k * n // 2 + (k // G) * n * 3 + act * m * k + 2 * m * n


def with_givens(p: Any, k: int, parts: int, dev: torch.device, krot: int = 8) -> Any:
    """The layer with random Givens tables (partner within the group, cos/sin of an angle)."""
    idx = torch.stack([torch.randperm(G) for _ in range(parts * krot * (k // G))])
    idx = idx.view(parts, krot, k).to(torch.int32).to(dev)
    coef = torch.rand(parts, 2 * krot + 1, k, device=dev)
    return dataclasses.replace(p, gv_idx=idx.contiguous(), gv_coef=coef.contiguous())


def int4pack(n: int, k: int, m: int, dev: torch.device) -> Callable[[], object]:
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    fns = []
    for _ in range(copies(bytes_w4(n, k, 0))):
        w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=dev)
        packed = torch._convert_weight_to_int4pack(w, 8)
        sz = torch.rand(k // G, n, 2, device=dev).to(torch.bfloat16)
        fns.append(functools.partial(torch._weight_int4pack_mm, x, packed, G, sz))
    return cycling(fns)


def decode_preps(n: int, k: int, sizes: tuple[int, ...], dev: torch.device) -> list[Any]:
    return [with_givens(random_prep(n, k, sizes, 4, dev), k, len(sizes), dev)
            for _ in range(copies(bytes_w4(n, k, 0)))]  # fmt: skip


def time_or_nan(fns: Sequence[Callable[[], object]], reps: int) -> float:
    try:
        return time_us(cycling(fns), reps)
    except Exception as e:  # one broken candidate must not lose the run
        print("error", type(e).__name__, str(e)[:300], flush=True)
        return float("nan")


def decode_cells(shapes: list[str], ms: list[int], t0: float, budget: float, not_run: list[str],
                 int5: bool = False) -> Iterator[tuple[str, int, int, int, torch.Tensor, list[Any],
                                                  list[Any]]]:  # fmt: skip
    """The bench's cells in order, (shape, N, K, M, x, int4 layers, int5 layers or []), until
    the budget (later cells go to `not_run`): the layer copies made once a shape (with the
    Givens records), the allocator's cache emptied after each cell."""
    dev = torch.device("cuda")
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        p4 = decode_preps(n, k, sizes, dev)
        copies5 = copies(bytes_w4(n, k, 0) * 5 // 4) if int5 else 0
        p5 = [with_givens(random_prep(n, k, sizes, 5, dev), k, len(sizes), dev)
              for _ in range(copies5)]  # fmt: skip
        for m in ms:
            if budget and time.monotonic() - t0 > budget:
                not_run.append(f"{name}@{m}")
                continue
            yield name, n, k, m, torch.randn(m, k, device=dev, dtype=torch.bfloat16), p4, p5
            torch.cuda.empty_cache()


def mx_preps(n: int, k: int, sizes: tuple[int, ...], rot: bool, dev: torch.device) -> list[Any]:
    from paro_kernels.triton import mx_repack

    preps = [mx_repack.prepare(*mx_repack.random_checkpoint(n, k, seed=i), None, 0, dev)
             for i in range(copies(n * k // 2))]  # fmt: skip
    if rot:
        r0 = mx_repack.prepare(*mx_repack.random_checkpoint(n, k), mx_repack.random_runs(k, sizes),
                               G, dev)  # fmt: skip
        preps = [dataclasses.replace(r0, weight=p.weight) for p in preps]
    return preps


def mx_gemv_old(kern: Any, p: Any, a: torch.Tensor, cfg: Any) -> object:
    """A previous tree's `mx_gemv_kernel` (--old: no BF16 / PF arguments) at cfg, one plane, bf16
    out, split-K on the shared zeroed buffers as `mx_gemv.mx_gemv` launches it."""
    from paro_kernels.triton import launch

    _, m, k = a.shape
    w = p.weight
    out = torch.empty(m, w.n, dtype=torch.bfloat16, device=a.device)
    tiles = -(-w.n // cfg.block_n)
    ws = launch.scratch("gemv_ws", m * w.n, torch.float32, a.device)
    cnt = launch.scratch("gemv_cnt", tiles, torch.int32, a.device)
    kern[(tiles, cfg.split_k)](
        a, w.qw.view(torch.int32), w.sc, w.sc, ws, cnt, out, m, w.n, k, a.stride(1), w.n, w.n,
        HAS_BIAS=False, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SPLIT_K=cfg.split_k, ASM=True,
        U=cfg.unroll, num_warps=cfg.num_warps, num_stages=1,
    )  # fmt: skip
    return out


def row(name: str, m: int, n: int, k: int, variant: str, us: float, **kw: Any) -> dict[str, Any]:
    nb = bytes_w4(n, k, m)
    r = {"shape": name, "m": m, "variant": variant, "us": us,
         "hbm_pct_4p3": nb / 4.3e12 / (us * 1e-6) * 100, **kw}  # fmt: skip
    extra = f" rel {kw['rel']:.1e}" if "rel" in kw else ""
    extra += f" [{kw['regs']}]" if kw.get("regs") else ""
    print(f"{name} M={m} {variant}: {us:.2f} us {r['hbm_pct_4p3']:.0f}% HBM{extra}", flush=True)
    return r


def peer_rows(name: str, m: int, n: int, k: int, x: torch.Tensor,
               reps: int) -> list[dict[str, Any]]:  # fmt: skip
    """cuBLAS bf16 (over weight copies past 4x L2) and int4pack on one cell."""
    wd = [torch.randn(k, n, device=x.device, dtype=torch.bfloat16)
          for _ in range(copies(2 * k * n))]  # fmt: skip
    fns = [functools.partial(torch.matmul, x, w) for w in wd]
    rows = [row(name, m, n, k, "cublas-bf16", time_or_nan(fns, reps))]
    del wd
    rows.append(row(name, m, n, k, "int4pack", time_us(int4pack(n, k, m, x.device), reps)))
    return rows


def kernel_regs(fn: Any) -> list[str]:
    """Registers and spills of each compiled variant of a Triton kernel (its launch cache)."""
    out = []
    for cache in getattr(fn, "device_caches", {}).values():
        for key, kern in cache[0].items():
            out.append(f"{fn.__name__} ...{str(key)[-300:-200]}: {kern.n_regs} regs, "
                       f"{kern.n_spills} spills")  # fmt: skip
    return out


def cand_rows(name: str, m: int, n: int, k: int, cands: dict[str, Callable[[Any], object]],
               preps: list[Any], reps: int, kernel: Any) -> list[dict[str, Any]]:  # fmt: skip
    """One row per candidate on the cell: its time over the layer copies, `rel` against the
    first candidate's output, and the registers / spills of the `kernel` variants it compiled."""
    rows, ref = [], None
    for label, fn in cands.items():
        seen = set(kernel_regs(kernel))
        y = fn(preps[0]).float()  # type: ignore[attr-defined]
        regs = [r.split(": ")[-1] for r in kernel_regs(kernel) if r not in seen]
        ref = y if ref is None else ref
        us = time_or_nan([functools.partial(fn, p) for p in preps], reps)
        rows.append(row(name, m, n, k, label, us, regs=";".join(regs),
                         rel=float((y - ref).norm() / ref.norm())))  # fmt: skip
    return rows


def int5_served(p: Any, x: torch.Tensor) -> object:
    """int5 (W5A8, I8 PG ZPE) as served: `route.linear_a8`'s route."""
    from paro_kernels.triton import route

    return route.linear_a8(p, x, None, "int8", "group", True)
