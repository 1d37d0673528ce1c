"""GPU benchmark of the Triton ParoQuant linear against cuBLAS bf16 on real layer shapes.

    python -m paro_kernels.bench --out bench.json [--ms 1,2,4,8,16,64,2048] [--reps 30] [--sweep]

Per (shape, M): the full op (prologue + GEMM), the prologue and the GEMM alone (at decode also the
op and prologue with the Givens-layer prologue, shipped off), and cuBLAS bf16
(`torch.matmul` on a dense [K, N] weight) in the same run. Timing: CUDA events around each call,
warm-up first, median of `reps`; every call reads a different copy of the weights, and the copies
together exceed the L2 several times, so weights are DRAM-fed (as the seed log's --bench2 did).
Roofline: max(bytes / HBM, flops / matrix peak), both measured in the same run (a large
device-to-device copy; an 8192^3 bf16 matmul); the datasheet leads are 4.8 TB/s and 990 TFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

L2_BYTES = 60 * 2**20
# Roofline ceilings measured on this H200 kind (issue 6, KINDS.md): a device copy counting read +
# write, and an 8192^3 bf16 matmul on random data. The run measures them again and reports both.
HBM_PEAK = 4.3e12
BF16_PEAK = 790e12
# Qwen3.8-27B per-rank linear shapes at TP=2 (issue 6 / seed log): name, N, K, partitions.
SHAPES: list[tuple[str, int, int, list[int]]] = [
    ("qkv", 7168, 5120, [6144, 512, 512]),
    ("o_proj", 5120, 3072, [5120]),
    ("gate_up", 17408, 5120, [8704, 8704]),
    ("down", 5120, 8704, [5120]),
    ("in_proj", 8192, 5120, [6144, 2048]),
    ("out_proj", 5120, 3072, [5120]),
]


@dataclass
class Row:
    """One benchmark cell."""

    shape: str
    m: int
    n: int
    k: int
    parts: int
    config: str
    us_op: float
    us_op_givens: float
    us_prologue: float
    us_prologue_givens: float
    us_gemm: float
    us_gemm_zp_rowsum: float
    us_cublas: float
    us_gemm_best: float
    config_best: str
    gbs: float
    tflops: float
    roofline: float
    speedup_vs_cublas: float


def _time(fns: list[Callable[[], object]], reps: int, warmup: int = 3) -> float:
    """Median microseconds of one call: CUDA-graph replays of calls cycling through `fns`.

    A graph holds at least 16 calls, one weight copy after another, so host launch overhead
    (tens of microseconds per Triton launch from Python) stays out and the weights come from DRAM.
    """
    for fn in fns:
        fn()  # compile and autotune-free warm-up outside the capture
    per_graph = len(fns) * -(-16 // len(fns))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            fns[i % len(fns)]()
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_graph)
    return statistics.median(times)


def measure_peaks() -> tuple[float, float]:
    """(HBM bytes/s of a 2 GiB device copy counting read + write, bf16 matmul FLOP/s)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = _time([lambda: dst.copy_(src)], 20, 3)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us_mm = _time([lambda: a @ b], 10, 3)
    return 2 * 2**30 / (us * 1e-6), 2 * 8192**3 / (us_mm * 1e-6)


def _copies(nbytes: int) -> int:
    return max(2, -(-4 * L2_BYTES // nbytes))


def _candidates(m: int, picked: object, sweep: bool) -> list[object]:
    """Extra GEMM configs tried per decode cell (--sweep), to steer `pick_config`."""
    from paro_kernels.triton.host import DECODE_MAX_M, Config

    if not sweep or m > DECODE_MAX_M:
        return []
    cands = [
        Config(16, bn, split, 8 if bn == 256 else 4, 4, rowsum=rowsum)
        for bn in (64, 128, 256)
        for split in (4, 8, 16)
        for rowsum in (False, True)
    ]
    cands += [Config(16, 128, 8, 4, 6, rowsum=True), Config(16, 128, 8, 8, 4, rowsum=True)]
    return [c for c in cands if c != picked]


def _givens(p: int, k: int, g: int, krot: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random Givens tables (the layout `host.givens_tables` builds) on the GPU."""
    from paro_kernels.triton import host

    runs = []
    for _ in range(p):
        pairs = torch.stack([torch.randperm(g) for _ in range(krot * (k // g))]).view(krot, k)
        theta = torch.rand(krot, k // 2) * 6.28 - 3.14
        runs.append((0, 0, pairs.to(torch.int16), theta, torch.rand(1, k) + 0.5))
    gi, gc = host.givens_tables(runs, g)  # type: ignore[misc]
    return gi.cuda(), gc.cuda()


def bench_cell(
    name: str,
    n: int,
    k: int,
    sizes: list[int],
    m: int,
    peaks: tuple[float, float],
    reps: int,
    sweep: bool = False,
) -> Row:
    """Time one (shape, M) cell: Triton op, its two launches, and cuBLAS bf16."""
    from paro_kernels.triton import host

    g, dev, p = 128, "cuda", len(sizes)
    bounds = tuple(sum(sizes[:i]) for i in range(1, p))
    w_bytes = k * n // 2 + (k // g) * n * 3
    preps = []
    gv = _givens(p, k, g)
    for _ in range(_copies(w_bytes)):
        rot = torch.randn(p, k // g, g, g, device=dev).to(torch.bfloat16) * 0.1
        gi, gc = gv[0].clone(), gv[1].clone()  # one copy per weight copy: DRAM-fed as well
        preps.append(
            host.Prepared(
                rot, rot * 0.01,
                torch.randint(-(2**31), 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32),
                (torch.rand(k // g, n, device=dev) * 0.01).half(),
                torch.randint(0, 16, (k // g, n), device=dev, dtype=torch.uint8),
                bounds, g, gi, gc,
            )
        )  # fmt: skip
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    cfg = host.pick_config(
        m, n, k, g, bounds, torch.cuda.get_device_properties(0).multi_processor_count
    )
    us_op = _time([lambda q=q: host.linear(q, x) for q in preps], reps)
    givens = m <= host.DECODE_MAX_M
    us_op_givens = us_op
    if givens:  # the same op with the Givens prologue forced (shipped off: GIVENS_MAX_M)
        us_op_givens = _time(
            [
                lambda q=q: host.w4a16_linear(
                    x,
                    q.rot_hi,
                    q.rot_lo,
                    q.qweight,
                    q.scales,
                    q.zeros,
                    bounds,
                    g,
                    None,
                    q.gv_idx,
                    q.gv_coef,
                    host.DECODE_MAX_M,
                )
                for q in preps
            ],
            reps,
        )
    us_blocks = _time(  # the folded-block prologue the op ships
        [lambda q=q: host.rotate_scale(x, q.rot_hi, q.rot_lo, g) for q in preps], reps
    )
    us_givens = us_blocks
    if givens:
        us_givens = _time(
            [
                lambda q=q: host.rotate_scale(x, q.rot_hi, q.rot_lo, g, q.gv_idx, q.gv_coef)
                for q in preps
            ],
            reps,
        )
    xr, rs = host.rotate_scale(x, preps[0].rot_hi, preps[0].rot_lo, g)
    us_gemm = _time(
        [
            lambda q=q: host.w4a16_gemm(
                xr, rs, q.qweight, q.scales, q.zeros, bounds, g, torch.bfloat16, None, cfg
            )
            for q in preps
        ],
        reps,
    )
    best_us, best_cfg = us_gemm, cfg
    for cand in _candidates(m, cfg, sweep):
        us = _time(
            [
                lambda q=q, c=cand: host.w4a16_gemm(
                    xr, rs, q.qweight, q.scales, q.zeros, bounds, g, torch.bfloat16, None, c
                )
                for q in preps
            ],
            reps,
        )
        if us < best_us:
            best_us, best_cfg = us, cand
    us_zprs = _time(  # the zero point as a row-sum correction (the W4A8 structure)
        [
            lambda q=q: host.w4a16_gemm(
                xr, rs, q.qweight, q.scales, q.zeros, bounds, g, torch.bfloat16, None, cfg, True
            )
            for q in preps
        ],
        reps,
    )
    del preps
    wd = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(_copies(2 * k * n))]
    us_cublas = _time([lambda w=w: x @ w for w in wd], reps)
    del wd
    flops = 2.0 * m * n * k
    # + the rotation parameters the op reads: both folded-block halves
    rot_bytes = 2 * 2 * p * k * g
    nbytes = w_bytes + 2 * m * k + 2 * m * n + rot_bytes
    floor_s = max(nbytes / HBM_PEAK, flops / BF16_PEAK)
    return Row(
        name, m, n, k, p, str(cfg), us_op, us_op_givens, us_blocks, us_givens, us_gemm, us_zprs,
        us_cublas,
        best_us, str(best_cfg), nbytes / (us_op * 1e-6) / 1e9, flops / (us_op * 1e-6) / 1e12,
        floor_s / (us_op * 1e-6), us_cublas / us_op,
    )  # fmt: skip


def _short(cfg: str) -> str:
    """Config(block_m=16, block_n=128, split_k=8, ...) -> 16x128 s8 w4 st4 rs."""
    import re

    v = dict(re.findall(r"(\w+)=(\w+)", cfg))
    if not v:
        return cfg
    tail = (" rs" if v.get("rowsum") == "True" else "") + (
        " pl" if v.get("planes") == "True" else ""
    )
    return (
        f"{v['block_m']}x{v['block_n']} s{v['split_k']} w{v['num_warps']} st{v['num_stages']}{tail}"
    )


def table(rows: list[Row], peaks: tuple[float, float], device: str) -> str:
    """Markdown table of the rows."""
    out = [
        f"device: {device}; roofline ceilings HBM {HBM_PEAK / 1e12:.1f} TB/s, bf16 "
        f"{BF16_PEAK / 1e12:.0f} TFLOP/s; measured in this run: HBM {peaks[0] / 1e12:.2f} TB/s "
        f"(copy, R+W), bf16 {peaks[1] / 1e12:.0f} TFLOP/s (8192^3 matmul)",
        "",
        "| shape | M | N | K | P | op us | op (Givens) us | prologue us | prologue Givens us | "
        "gemm us | "
        "gemm zp-rowsum us | cuBLAS bf16 us | GB/s | TFLOP/s | HBM roofline | vs cuBLAS | "
        "best gemm us (sweep) | config (picked; best) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.shape} | {r.m} | {r.n} | {r.k} | {r.parts} | {r.us_op:.1f} | "
            f"{r.us_op_givens:.1f} | "
            f"{r.us_prologue:.1f} | {r.us_prologue_givens:.1f} | {r.us_gemm:.1f} | "
            f"{r.us_gemm_zp_rowsum:.1f} | {r.us_cublas:.1f} | {r.gbs:.0f} | "
            f"{r.tflops:.1f} | {r.roofline:.0%} | {r.speedup_vs_cublas:.2f}x | "
            f"{r.us_gemm_best:.1f} | {_short(r.config)}; {_short(r.config_best)} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write JSON (and print the markdown table)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--ms", default="1,2,4,8,16,64,2048")
    ap.add_argument("--sweep", action="store_true", help="time extra decode GEMM configs")
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    peaks = measure_peaks()
    device = torch.cuda.get_device_name(0)
    rows = []
    wanted = args.shapes.split(",")
    for name, n, k, sizes in SHAPES:
        if name not in wanted:
            continue
        for m in (int(v) for v in args.ms.split(",")):
            rows.append(bench_cell(name, n, k, sizes, m, peaks, args.reps, args.sweep))
            print(table(rows[-1:], peaks, device).splitlines()[-1], flush=True)
    md = table(rows, peaks, device)
    print(md)
    with open(args.out, "w") as f:
        json.dump(
            {"device": device, "peaks": peaks, "rows": [asdict(r) for r in rows]}, f, indent=1
        )
    with open(args.out.removesuffix(".json") + ".md", "w") as f:
        f.write(md + "\n")


if __name__ == "__main__":
    main()
