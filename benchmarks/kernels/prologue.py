"""The decode prologues alone, by launch config and M, beside the mma GEMV alone and the op as
served, in one run: what the rotation costs in the decode band and which launch serves it best.

    python -m benchmarks.kernels.prologue --out DIR/prologue.json [--shapes qkv,gate_up]
        [--ms 16,32,64] [--reps 20] [--budget-s 200]

Per (shape, M), on the 27B TP=2 shapes (random int4 layers with Givens records): the op as
served (`route.linear`), the mma GEMV alone on a ready prologue output, the sliced blocks
prologue paired at pair shift 0 (the mma GEMVs' input) at each launch of SLICES, the Givens
records prologue at each row block of GIVENS_ROWS (M <= 32), then the mma op on the sliced
prologue at the cell's fastest launch and as shipped (`prologue.PROLOGUE_SLICE`,
`PROLOGUE_SLICE_WARPS`, `PROLOGUE_ROWS`). Timing as `time_us`
(CUDA-graph replays over weight copies past 4x L2).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.kernels.common import (
    SHAPES,
    G,
    bytes_w4,
    copies,
    cycling,
    random_prep,
    time_us,
    with_givens,
)

SLICES: list[dict[str, int]] = [
    dict(slice_=s, num_warps=w, rows=r)
    for s, w, r in itertools.product((32, 64, 128), (4, 8), (0, 16, 32))
]
GIVENS_ROWS = (0, 4, 8, 16)


def _time(fns: list[Callable[[], object]], reps: int) -> float:
    try:
        return time_us(cycling(fns), reps)
    except Exception as e:  # a launch the kernel refuses: a row with no time, said why
        print("error", type(e).__name__, str(e)[:300], flush=True)
        return float("nan")


def cell(name: str, n: int, k: int, sizes: tuple[int, ...], m: int,
         reps: int) -> list[dict[str, Any]]:  # fmt: skip
    """Every row of one (shape, M) cell."""
    from paro_kernels.triton import gemv_mma, prologue, route

    dev = torch.device("cuda")
    preps = [with_givens(random_prep(n, k, sizes, 4, dev), k, len(sizes), dev)
             for _ in range(copies(bytes_w4(n, k, m)))]  # fmt: skip
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    rows: list[dict[str, Any]] = []

    def add(variant: str, us: float, **kw: Any) -> None:
        rows.append({"shape": name, "m": m, "variant": variant, "us": us, **kw})
        print(f"{name} M={m} {variant}: {us:.2f} us", flush=True)

    add("op as served", _time([functools.partial(route.linear, p, x) for p in preps], reps))
    xr = prologue.rotate_slices(x, preps[0].rot_hi, preps[0].rot_lo, G, paired=True,
                                pair_shift=0)[0]  # fmt: skip
    add("mma alone", _time([functools.partial(gemv_mma.gemv_mma, xr, p, x.dtype)
                            for p in preps], reps))  # fmt: skip
    timed = []
    for kw in SLICES:
        if kw["rows"] >= m:
            continue
        fns = [functools.partial(prologue.rotate_slices, x, p.rot_hi, p.rot_lo, G, paired=True,
                                 pair_shift=0, **kw) for p in preps]  # fmt: skip
        us = _time(fns, reps)
        timed.append((us, kw))
        add("slices " + " ".join(f"{a}={b}" for a, b in kw.items()), us, config=kw)
    for r in GIVENS_ROWS if m <= 32 else ():
        add(f"givens rows={r}", _time([functools.partial(
            prologue.rotate_givens_paired, x, p.gv_idx, p.gv_coef, G, 0, rows=r)
            for p in preps], reps))  # fmt: skip
    best = min((t for t in timed if t[0] == t[0]), default=None, key=lambda t: t[0])
    if best is not None:
        keep = prologue.PROLOGUE_SLICE, prologue.PROLOGUE_SLICE_WARPS, prologue.PROLOGUE_ROWS
        cfg = best[1]
        # a graph capture runs the Python once, with the setting in force
        prologue.PROLOGUE_SLICE, prologue.PROLOGUE_SLICE_WARPS = cfg["slice_"], cfg["num_warps"]
        prologue.PROLOGUE_ROWS = cfg["rows"]
        try:
            fns = [functools.partial(gemv_mma.gemv_mma_linear, p, x, prologue="slice")
                   for p in preps]  # fmt: skip
            add("mma op, fastest slices", _time(fns, reps), config=cfg)
        finally:
            prologue.PROLOGUE_SLICE, prologue.PROLOGUE_SLICE_WARPS, prologue.PROLOGUE_ROWS = keep
        fns = [functools.partial(gemv_mma.gemv_mma_linear, p, x, prologue="slice") for p in preps]
        add("mma op, slices as shipped", _time(fns, reps))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="prologue.json")
    ap.add_argument("--shapes", default="qkv,o_proj,gate_up,down,in_proj")
    ap.add_argument("--ms", default="16,32,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=0, help="start no cell after this long")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "triton": __import__("triton").__version__, "rows": [], "not_run": [],
        "command": " ".join(["python -m benchmarks.kernels.prologue", *argv]),
    }  # fmt: skip
    shapes, ms = args.shapes.split(","), [int(v) for v in args.ms.split(",")]
    for m, (name, n, k, sizes) in itertools.product(ms, [s for s in SHAPES if s[0] in shapes]):
        if args.budget_s and time.monotonic() - t0 > args.budget_s:
            meta["not_run"].append(f"{name}@{m}")
            continue
        meta["rows"] += cell(name, n, k, sizes, m, args.reps)
        with open(args.out, "w") as f:
            json.dump(meta, f, indent=1)
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
