"""A whole decode step's linears: one rank of Qwen3.8-27B at TP=2, every format, one CUDA graph.

    python -m benchmarks.kernels.step --out DIR/step.json [--ms 1,4,8,16] [--formats F,..]
        [--reps 10] [--budget-s 150]
    TRITON_INTERPRET=1 python -m benchmarks.kernels.step --tiny --out /tmp/step.json   # CPU

The rank: 64 layers, full attention every 4th (16: qkv + o_proj), Gated DeltaNet linear
attention in the other 48 (in_proj + out_proj), gate_up + down in every layer: 256 linears, each
with its real per-rank shape and partition count from `common.SHAPES` (in_proj's two rotation runs
and qkv's three, gate_up's two; out_proj's [5120, 3072] is the GDN value width 48 x 128 / 2, the
same as o_proj's K). The 48 `in_proj_ba` gate projections stay bf16 in every served variant
(N = 48 a rank; the seed log) and are not counted here: the step is the quantized linears.

Per format, random weights prepared as served (`repack.prepare` / `mx_repack.prepare` on a random
checkpoint, once a distinct shape, then each layer its own copy of the tensors, so the step reads
every layer's weights from DRAM as a model does), every call through the router as served
(`route.linear`, `route.linear_a8` with per-group activation scales in the decode band,
`mx_route.mx_linear`), prologues included; beside it the same step in cuBLAS bf16 (`F.linear`,
weights [N, K]) and in Marlin (int4 g128 fp16, its no-hint build at these M). Timing: the 256
calls captured in one CUDA graph, its replays timed with CUDA events, the median (`time_us`).
Ratios: x bf16 = bf16 step / this step, x Marlin = Marlin step / this step (above 1 is faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from benchmarks.kernels.common import SHAPES, G, time_us

LAYERS = 64
FULL_ATTENTION_EVERY = 4  # layers 3, 7, ..., 63 (Qwen3-Next's full_attention_interval)
# in priority order (a budget cuts the tail): the baselines, the int4 rank's three formats,
# MXFP4, then int5 (the slowest to prepare)
FORMATS = ("bf16", "marlin", "w4a16", "w4a8-int8", "w4a8-fp8", "mxfp4", "mxfp4-paro", "int5")
INT4_FORMATS = ("w4a16", "w4a8-int8", "w4a8-fp8")  # one prepared rank serves all three
Shape = tuple[str, int, int, tuple[int, ...]]


def rank_linears(layers: int = LAYERS) -> list[Shape]:
    """(name, N, K, partition sizes) of every quantized linear of one rank, in layer order."""
    shape = {s[0]: s for s in SHAPES}
    out = []
    for i in range(layers):
        full = i % FULL_ATTENTION_EVERY == FULL_ATTENTION_EVERY - 1
        out += [shape["qkv" if full else "in_proj"], shape["o_proj" if full else "out_proj"],
                shape["gate_up"], shape["down"]]  # fmt: skip
    return out


def tiny(s: Shape) -> Shape:
    """A shape cut for the CPU interpreter: N and partitions / 16, K to 256 (384 for down)."""
    name, n, k, sizes = s
    return name, n // 16, 384 if k == 8704 else 256, tuple(p // 16 for p in sizes)


def summary(lins: list[Shape]) -> dict[str, Any]:
    """Counts per linear name and the rank's weight count."""
    counts: dict[str, int] = {}
    for name, *_ in lins:
        counts[name] = counts.get(name, 0) + 1
    return {"linears": len(lins), "counts": counts, "params": sum(n * k for _, n, k, _ in lins)}


def _awq_layer(n: int, k: int, sizes: tuple[int, ...], bits: int, dev: torch.device) -> Any:
    """A random AWQ checkpoint layer (int4, or int5 with its fifth-bit planes) with random z-lab
    rotations per partition, through `repack.prepare` as the plugin loads it."""
    from paro_kernels.triton import mx_repack, repack

    gen = torch.Generator().manual_seed(n * 7 + k)

    def words(*shape: int) -> torch.Tensor:
        return torch.randint(-(2**31), 2**31 - 1, shape, generator=gen, dtype=torch.int32)

    scales = (torch.rand(k // G, n, generator=gen) * 0.01 + 1e-3).half()
    hi = (words(k, n // 32), words(k // G, n // 32)) if bits == 5 else (None, None)
    return repack.prepare(words(k, n // 8), words(k // G, n // 8), scales,
                          mx_repack.random_runs(k, sizes), G, torch.bfloat16, dev, bits,
                          *hi)  # fmt: skip


def _own_copy(p: Any) -> Any:
    """The layer with its own copy of every tensor (another address: no L2 reuse across layers)."""
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    return dataclasses.replace(p, **{
        k: (v.clone() if isinstance(v, torch.Tensor) else _own_copy(v)
            if dataclasses.is_dataclass(v) else v) for k, v in fields.items()})  # fmt: skip


def _per_shape(lins: list[Shape], make: Callable[[Shape], Any]) -> Iterator[tuple[Shape, Any]]:
    """Each linear with its own copy of one layer made once a distinct (N, K, partitions) by
    `make` (o_proj and out_proj share theirs)."""
    made: dict[tuple[Any, ...], Any] = {}
    for s in lins:
        if s[1:] not in made:
            made[s[1:]] = make(s)
            yield s, made[s[1:]]
        else:
            yield s, _own_copy(made[s[1:]])


def _inputs(lins: list[Shape], m: int, dtype: torch.dtype, dev: torch.device) -> dict[int, Any]:
    return {k: torch.randn(m, k, device=dev, dtype=dtype) for k in {s[2] for s in lins}}


def build_step(fmt: str, lins: list[Shape], dev: torch.device,
               int_preps: dict[int, list[Any]]) -> Callable[[int], list[Any]]:  # fmt: skip
    """The format's rank (weights made now; int4 / int5 layers kept in `int_preps` by bits, for
    the formats that share them) -> a function of M giving the step's calls."""
    from paro_kernels.triton import mx_repack, mx_route, route

    if fmt == "bf16":
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _, n, k, _ in lins]

        def bf16(m: int) -> list[Any]:
            xs = _inputs(lins, m, torch.bfloat16, dev)
            f = torch.nn.functional.linear
            return [functools.partial(f, xs[w.shape[1]], w) for w in ws]

        return bf16
    if fmt == "marlin":
        from benchmarks.kernels import marlin

        ext = marlin.load(marlin.build_for(16))
        for n, k in {(s[1], s[2]) for s in lins}:  # the build's output, once a shape, vs fp32
            rel = marlin.Cell(n, k, 16, 1).check()
            if not marlin.Cell.ok(rel):
                raise RuntimeError(f"Marlin {n}x{k} M=16: rel {rel:.2e} > {marlin.REL_BOUND}")
        packs = [(s[2], b.clone(), sc.clone()) for s in lins
                 for b, sc, _ in [marlin.packed(s[1], s[2])]]  # fmt: skip
        work = {n: marlin.workspace(n, dev) for _, n, _, _ in lins}

        def mar(m: int) -> list[Any]:
            if marlin.build_for(m) != marlin.build_for(16):
                raise ValueError(f"M={m}: the step's Marlin is its no-hint build (M <= 64)")
            xs = _inputs(lins, m, torch.float16, dev)
            return [functools.partial(marlin.mul, ext, xs[k], b, sc, work[sc.shape[1]])
                    for k, b, sc in packs]  # fmt: skip

        return mar
    if fmt.startswith("mxfp4"):
        rot = fmt == "mxfp4-paro"

        def make_mx(s: Shape) -> Any:
            _, n, k, sizes = s
            runs = mx_repack.random_runs(k, sizes) if rot else None
            return mx_repack.prepare(*mx_repack.random_checkpoint(n, k, seed=n + k), runs, G, dev)

        mx = [p for _, p in _per_shape(lins, make_mx)]

        def mxs(m: int) -> list[Any]:
            xs = _inputs(lins, m, torch.bfloat16, dev)
            return [functools.partial(mx_route.mx_linear, p, xs[p.weight.k], None, "fp8")
                    for p in mx]  # fmt: skip

        return mxs
    bits = 5 if fmt == "int5" else 4
    if bits not in int_preps:
        make = functools.partial(_awq_layer, bits=bits, dev=dev)
        int_preps[bits] = [p for _, p in _per_shape(lins, lambda s: make(s[1], s[2], s[3]))]
    return functools.partial(_int_calls, int_preps[bits], lins, dev, route, fmt)


def _int_calls(preps: list[Any], lins: list[Shape], dev: torch.device, route: Any, fmt: str,
               m: int) -> list[Any]:  # fmt: skip
    """The int4 / int5 step's calls: W4A16 on `route.linear`; W4A8 and int5 (W5A8 I8 PG ZPE)
    on `route.linear_a8` with per-group scales (the decode band's, `act_config`)."""
    xs = _inputs(lins, m, torch.bfloat16, dev)
    if fmt == "w4a16":
        return [
            functools.partial(route.linear, p, xs[s[2]]) for p, s in zip(preps, lins, strict=True)
        ]
    act, zpe = ("int8", True) if fmt == "int5" else (fmt.removeprefix("w4a8-"), False)
    return [functools.partial(route.linear_a8, p, xs[s[2]], None, act, "group", zpe)
            for p, s in zip(preps, lins, strict=True)]  # fmt: skip


def step_fn(calls: list[Any]) -> Callable[[], object]:
    """One closure running the whole step (what the graph captures)."""

    def run() -> object:
        for c in calls:
            c()
        return None

    return run


def weight_bytes(fmt: str, lins: list[Shape]) -> int:
    """Format-minimal weight bytes of the step (codes + scales (+ zeros)), rotations left out."""
    per = {"bf16": 16, "marlin": 4, "w4a16": 4, "w4a8-int8": 4, "w4a8-fp8": 4, "int5": 5,
           "mxfp4": 4, "mxfp4-paro": 4}[fmt]  # fmt: skip
    side = {"bf16": 0.0, "marlin": 2 / G, "mxfp4": 1 / 32, "mxfp4-paro": 1 / 32}.get(fmt, 3 / G)
    return int(sum(n * k * (per / 8 + side) for _, n, k, _ in lins))


def run(fmts: list[str], ms: list[int], reps: int, lins: list[Shape], dev: torch.device,
        budget: float, t0: float, out: str, meta: dict[str, Any]) -> None:  # fmt: skip
    """Each format's rank built, timed at every M (or run once on the CPU), freed; JSON after
    each format."""
    int_preps: dict[int, list[Any]] = {}
    pending = [f for f in fmts if f in INT4_FORMATS]
    for fmt in fmts:
        if budget and time.monotonic() - t0 > budget:
            meta["not_run"] += [f"{fmt}@{m}" for m in ms]
            continue
        t = time.monotonic()
        make: Callable[[int], list[Any]] | None = None
        try:
            make = build_step(fmt, lins, dev, int_preps)
            built = time.monotonic() - t
            for m in ms:
                meta["rows"].append(_one(fmt, m, make, reps, dev, built, lins))
                _print(meta["rows"][-1], meta["rows"])
        except Exception as e:  # one broken format must not lose the others
            meta["rows"].append({"format": fmt, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(f"step {fmt}: {meta['rows'][-1]['error']}", flush=True)
        if fmt in pending:
            pending.remove(fmt)
        if not pending:  # the int4 rank is done with; int5's after its one format
            int_preps.clear()
        make = None  # the format's weights go with its closures
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        _dump(out, meta)


def _one(fmt: str, m: int, make: Callable[[int], list[Any]], reps: int, dev: torch.device,
         built: float, lins: list[Shape]) -> dict[str, Any]:  # fmt: skip
    calls = make(m)
    assert len(calls) == len(lins), (fmt, len(calls), len(lins))
    row: dict[str, Any] = {"format": fmt, "m": m, "calls": len(calls), "build_s": round(built, 1),
                           "weight_bytes": weight_bytes(fmt, lins)}  # fmt: skip
    if fmt == "marlin":
        from benchmarks.kernels import marlin

        row["build"] = marlin.build_for(m)
    if dev.type != "cuda":  # the CPU check: every call runs once, output shapes as the layer's
        outs = [c() for c in calls]
        row["out_shapes_ok"] = all(
            tuple(o.shape) == (m, s[1]) for o, s in zip(outs, lins, strict=True)
        )
        row["finite"] = all(bool(torch.isfinite(o.float()).all()) for o in outs)
        return row
    try:
        row["us"] = time_us(step_fn(calls), reps)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _print(r: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    ratios(rows)
    if "us" in r:
        print(f"step {r['format']} M={r['m']}: {r['us'] / 1e3:.3f} ms  x{r['x_bf16']:.2f} bf16  "
              f"x{r['x_marlin']:.2f} Marlin", flush=True)  # fmt: skip
    else:
        print(f"step {r['format']} M={r['m']}: {r}", flush=True)


def ratios(rows: list[dict[str, Any]], copy_bw: float = 0.0) -> None:
    """x bf16 and x Marlin of every timed row (NaN where that step is not timed at that M), and
    the fraction of the copy roofline its weight bytes reach (with the measured copy bandwidth)."""
    base = {(r["format"], r["m"]): r["us"] for r in rows if "us" in r}
    nan = float("nan")
    for r in rows:
        if "us" in r:
            r["x_bf16"] = base.get(("bf16", r["m"]), nan) / r["us"]
            r["x_marlin"] = base.get(("marlin", r["m"]), nan) / r["us"]
            if copy_bw:
                r["roofline"] = r["weight_bytes"] / copy_bw / (r["us"] * 1e-6)


def table(rows: list[dict[str, Any]], ms: list[int]) -> str:
    """Markdown: ms per step (x bf16, x Marlin) per format and M."""
    out = ["| format | " + " | ".join(f"M = {m}" for m in ms) + " |",
           "|---|" + "---|" * len(ms)]  # fmt: skip
    for fmt in dict.fromkeys(r["format"] for r in rows):
        cells = []
        for m in ms:
            r = next((r for r in rows if r["format"] == fmt and r.get("m", m) == m), None)
            if r is None or "us" not in r:
                cells.append("-" if r is None else "ran on CPU" if "finite" in r else "error")
            else:
                roof = f", {r['roofline']:.0%} roofline" if "roofline" in r else ""
                cells.append(f"{r['us'] / 1e3:.3f} ms ({r['x_bf16']:.2f}x bf16, "
                             f"{r['x_marlin']:.2f}x Marlin{roof})")  # fmt: skip
        out.append(f"| {fmt} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _dump(path: str, meta: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(meta, f, indent=1)


def main(argv: list[str] | None = None) -> None:
    """Build each format's rank, time its step at every M, write JSON + print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="step.json")
    ap.add_argument("--ms", default="1,4,8,16")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=0, help="start no format after this long")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="CPU check: 4 layers at cut shapes, each call once (TRITON_INTERPRET=1)",
    )
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.monotonic()
    fmts, ms = args.formats.split(","), [int(v) for v in args.ms.split(",")]
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        ap.error(f"--formats: unknown {bad}; known: {', '.join(FORMATS)}")
    lins = rank_linears()
    meta: dict[str, Any] = {"command": " ".join(["python -m benchmarks.kernels.step", *argv]),
                            "rank": summary(lins), "rows": [], "not_run": []}  # fmt: skip
    dev = torch.device("cuda")
    if args.tiny:
        lins, dev = [tiny(s) for s in rank_linears(FULL_ATTENTION_EVERY)], torch.device("cpu")
        fmts = [f for f in fmts if f != "marlin"]  # a CUDA extension: nothing to run here
        meta["tiny"] = summary(lins)
    else:
        from benchmarks.kernels.common import measure_peaks

        meta["copy_bw"] = measure_peaks()[0]
        meta.update(device=torch.cuda.get_device_name(0), torch=torch.__version__,
                    triton=__import__("triton").__version__)  # fmt: skip
    print(f"step: {meta['rank']}", flush=True)
    run(fmts, ms, args.reps, lins, dev, args.budget_s, t0, args.out, meta)
    ratios(meta["rows"], meta.get("copy_bw", 0.0))
    _dump(args.out, meta)
    print(table(meta["rows"], ms), flush=True)
    if meta["not_run"]:
        print(f"budget: not run {' '.join(meta['not_run'])}", flush=True)


if __name__ == "__main__":
    main()
