"""MXFP4 kernel benchmarks: the bench registry's MXFP4 variants, a CUDA-graph timer, a quick
sweep of the GEMM's configs against cuBLAS bf16, and random MXFP4 checkpoints and rotations for
benches and tests.

    python -m benchmarks.kernels.mx [OUT.json]   (the main table, then the config sweep)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch
from paro_kernels.triton import aot
from paro_kernels.triton.launch import sm_count
from paro_kernels.triton.mx_gemm import (
    activations,
    fp8_quant,
    mx_gemm,
    pick_config,
)
from paro_kernels.triton.mx_repack import (
    DECODE_MAX_M,
    L2_BYTES,
    MX_BLOCK,
    ActMode,
    Config,
    Prepared,
    prepare,
    random_checkpoint,
    random_runs,
)
from paro_kernels.triton.mx_route import mx_linear

# --------------------------------------------------------------------------- bench registry


def _variant_bytes(act_bytes: int, rot: bool) -> Callable[[int, int, tuple[int, ...], int], int]:
    def fewest(n: int, k: int, parts: tuple[int, ...], m: int) -> int:
        planes = len(parts) if rot else 1
        # weights + e8m0 scales + activations read once per plane + bf16 output
        return n * k // 2 + n * k // MX_BLOCK + planes * m * k * act_bytes + 2 * m * n

    return fewest


def _build(act: ActMode, rot: bool) -> Callable[..., Callable[[], object]]:
    def build(
        n: int, k: int, parts: tuple[int, ...], m: int, device: torch.device
    ) -> Callable[[], object]:
        # Enough weight copies to exceed the L2 three times; each call reads the next one.
        copies = max(2, -(-3 * L2_BYTES // (n * k // 2)))
        preps = [prepare(*random_checkpoint(n, k, seed=i), None, 0, device) for i in range(copies)]
        if rot:
            r0 = prepare(*random_checkpoint(n, k), random_runs(k, parts), 128, device)
            preps = [dataclasses.replace(r0, weight=p.weight) for p in preps]
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        step = iter(range(1 << 62))
        return lambda: mx_linear(preps[next(step) % copies], x, None, act)

    return build


def bench_variants() -> list[object]:
    """The MXFP4 entries of the shared bench registry (`paro_kernels.bench.Variant`)."""
    from benchmarks.kernels import bench

    variant = bench.Variant
    return [
        variant("mxfp4_w4a8", _build("fp8", False), _variant_bytes(1, False), "fp8", _aot("fp8")),
        variant("mxfp4_w4a16", _build("a16", False), _variant_bytes(2, False), "bf16", _aot("a16")),
        variant("mxfp4_paro_w4a8", _build("fp8", True), _variant_bytes(1, True), "fp8", None),
    ]


def _aot(act: ActMode) -> Callable[[int, int, tuple[int, ...], int], list[object]]:
    def reports(n: int, k: int, parts: tuple[int, ...], m: int) -> list[object]:
        return [aot.compile_mx_gemm("gfx1201", m, n, k, act)]

    return reports


# --------------------------------------------------------------------------- quick timing

# (name, N, K, partitions): the Qwen3.8-27B TP=2 shapes of the lead's brief.
QUICK_SHAPES = [("qkv", 7168, 5120, (6144, 512, 512)), ("gate_up", 17408, 5120, (8704, 8704)),
                ("down", 5120, 8704, (5120,))]  # fmt: skip


def _graph_time(fns: list[Callable[[], object]], reps: int = 30) -> float:
    """Median microseconds per call over `reps` CUDA-graph replays of >= 16 calls cycling `fns`."""
    for fn in fns:
        fn()  # compile outside the capture
    calls = len(fns) * -(-16 // len(fns))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        t0 = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        t1 = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        t0.record()
        graph.replay()
        t1.record()
        t1.synchronize()
        times.append(t0.elapsed_time(t1) * 1000 / calls)
    return float(sorted(times)[len(times) // 2])


def quick_bench(ms: tuple[int, ...] = (1, 16, 2048), sweep: bool = True) -> list[dict[str, object]]:
    """Time the MXFP4 paths against cuBLAS bf16 on QUICK_SHAPES (weights DRAM-fed: every call
    reads another copy; the copies together exceed the L2 three times). Prints each row."""
    dev = torch.device("cuda")
    rows: list[dict[str, object]] = []
    for name, n, k, parts in QUICK_SHAPES:
        copies_mx = max(2, -(-3 * L2_BYTES // (n * k // 2)))
        copies_bf = max(2, -(-3 * L2_BYTES // (n * k * 2)))
        ckpt = [random_checkpoint(n, k, seed=i) for i in range(copies_mx)]
        preps = [prepare(w, s, None, 0, dev) for w, s in ckpt]
        r0 = prepare(*ckpt[0], random_runs(k, parts), 128, dev)
        rot = [dataclasses.replace(r0, weight=p.weight) for p in preps]
        dense = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies_bf)]
        for m in ms:
            row = _time_cell(m, preps, rot, dense, sweep)
            torch.cuda.synchronize()
            rows.append({"shape": name, "n": n, "k": k, "m": m, **row})
            print(rows[-1], flush=True)
    return rows


def _time_cell(
    m: int, preps: list[Prepared], rot: list[Prepared], dense: list[torch.Tensor], sweep: bool
) -> dict[str, object]:
    """One (shape, M) cell of `quick_bench`: microseconds per call of each path.

    sweep=False: every path; sweep=True: the picked GEMM config, cuBLAS and `_sweep_configs`.
    """
    k, n = dense[0].shape
    x = torch.randn(m, k, device=dense[0].device, dtype=torch.bfloat16)
    q, s = fp8_quant(x)
    a8, s8, a16 = q.unsqueeze(0), s.unsqueeze(0), x.unsqueeze(0)
    bf = torch.bfloat16

    def each(fn: Callable[[Prepared], object], ps: list[Prepared]) -> list[Callable[[], object]]:
        return [functools.partial(fn, p) for p in ps]

    def gemm8(p: Prepared, cfg: Config | None = None, fold: bool | None = None) -> object:
        return mx_gemm(a8, s8, p.weight, (), bf, None, cfg, fold)

    def paro8_fused(p: Prepared) -> object:
        a, sc = activations(p, x, "fp8", True)
        return mx_gemm(a, sc, p.weight, p.bounds, bf)

    t: dict[str, list[Callable[[], object]]] = {
        "cublas_bf16": [functools.partial(torch.matmul, x, d) for d in dense],
        "w4a8_gemm": each(gemm8, preps),
    }
    if not sweep:
        t["w4a8_op"] = each(functools.partial(mx_linear, x=x, act="fp8"), preps)
        t["w4a8_gemm_perblock"] = each(functools.partial(gemm8, fold=False), preps)
        t["w4a16_gemm"] = each(lambda p: mx_gemm(a16, None, p.weight, (), bf), preps)
        t["fp8_quant"] = [functools.partial(fp8_quant, x)]
        t["paro_w4a8_op"] = each(functools.partial(mx_linear, x=x, act="fp8"), rot)
        t["paro_w4a8_op_fused_prologue"] = each(paro8_fused, rot)
        t["paro_w4a16_op"] = each(functools.partial(mx_linear, x=x, act="a16"), rot)
    else:
        for cfg in _sweep_configs(m):
            t[f"w4a8_gemm {_short(cfg)}"] = each(functools.partial(gemm8, cfg=cfg), preps)
    row: dict[str, object] = {key: round(_graph_time(fns), 2) for key, fns in t.items()}
    row["config"] = _short(pick_config(m, n, k, (), 0, sm_count(x.device)))
    us_gemm, us_cublas = float(row["w4a8_gemm"]), float(row["cublas_bf16"])  # type: ignore[arg-type]
    row["w4a8_gemm_GBs"] = round((n * k // 2 + n * k // MX_BLOCK) / (us_gemm * 1e3), 1)
    row["w4a8_gemm_vs_cublas"] = round(us_cublas / us_gemm, 2)
    if not sweep:
        row["w4a8_op_vs_cublas"] = round(us_cublas / float(row["w4a8_op"]), 2)  # type: ignore[arg-type]
    return row


def _short(cfg: Config) -> str:
    return f"{cfg.block_m}x{cfg.block_n}s{cfg.split_k}w{cfg.num_warps}st{cfg.num_stages}"


def _sweep_configs(m: int) -> list[Config]:
    """A few alternatives to the picked config, to learn from the one GPU run we get."""
    if m <= DECODE_MAX_M:
        return [Config(16, 64, 16, 4, 4), Config(16, 128, 8, 4, 4), Config(16, 256, 8, 8, 3)]
    return [Config(128, 256, 1, 8, 3), Config(128, 128, 1, 4, 4), Config(64, 128, 1, 4, 4),
            Config(128, 128, 1, 8, 4)]  # fmt: skip


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="JSON written after the main table and the sweep")
    dump = ap.parse_args().out
    out = {"main": quick_bench(sweep=False)}
    if dump:
        with open(dump, "w") as f:
            json.dump(out, f, indent=1)
    out["sweep"] = quick_bench(sweep=True)
    if dump:
        with open(dump, "w") as f:
            json.dump(out, f, indent=1)
