"""Benchmark (not a test): the host side of a GPU kernel test under xdist, at a number of worker
processes and torch threads each, to show what oversubscribing the cores costs.

Each process repeats what `test_path_matches_fp64_reference` does on the CPU before and after
its launches: draw a merged K = 2304, N = [2048, 256] ParoQuant layer, `repack.prepare` it (on the
CPU here), and compute the fp64 reference at M = 17. It prints seconds an iteration per process.
The GPU suite runs one worker a core; torch defaults to one thread a core in each of them.

    PYTHONPATH=kernels:tests/kernels python3 tests/kernels/bench_host_threads.py --procs 2 --threads 2
    PYTHONPATH=kernels:tests/kernels python3 tests/kernels/bench_host_threads.py --procs 2 --threads 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time


def _work(threads: int, iters: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    import torch
    from _triton_cases import merged_layer, packed, reference, runs
    from paro_kernels.triton import repack

    torch.set_num_threads(threads)
    k, sizes, g = 2304, [2048, 256], 128
    start = time.perf_counter()
    for i in range(iters):
        parts = merged_layer(k, sizes, g, seed=k + i, bias=True)
        repack.prepare(*packed(parts), runs(parts), g, device="cpu")
        reference(torch.randn(17, k).to(torch.bfloat16), parts, g)
    out.put((time.perf_counter() - start) / iters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads a process")
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_work, args=(a.threads, a.iters, out)) for _ in range(a.procs)]
    for p in procs:
        p.start()
    times = sorted(out.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"{a.procs} processes x {a.threads} threads: "
          + ", ".join(f"{t:.2f}" for t in times) + " s an iteration")  # fmt: skip


if __name__ == "__main__":
    main()
