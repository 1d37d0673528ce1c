"""MXFP4 decode bench: the MXFP4 decode GEMV (`mx_gemv`) against the MXFP4 GEMM it replaces at
M <= 4, the int4 W4A16 op as served, and the peers, in one run.

    python -m benchmarks.kernels.mx_decode --out DIR/mx.json [--shapes qkv,gate_up]
        [--ms 1,2,4] [--sweep qkv,gate_up] [--budget-s 300]

Sweep: the GEMV alone (NVFP4 -> MXFP4, one plane) over block_n x warps x programs per SM on the
--sweep shapes at each M; the best config by summed time goes on. Then per (shape, M): cuBLAS
bf16, `torch._weight_int4pack_mm` (g128), the int4 W4A16 op as served (`route.linear`, the
Givens tables present), MXFP4 and MXFP4-PARO as served (`mx_route.mx_linear`, W4A8 act), the GEMM
forced (`path="gemm"`, W4A8 and A16) and the GEMV at the best sweep config; each GEMV output is
checked against an fp64 reference of the dequantized weight. Timing as `time_us` (CUDA-graph
replays over weight copies past 4x L2); % HBM = format-minimal bytes over 4.3 TB/s.

--old MODULE: a previous tree's `mx_gemv_kernel` (e.g. `git show
REV:kernels/paro_kernels/triton/mx_gemv_kernels.py > kernels/paro_kernels/triton/_mx_old.py`;
before the kernels were cut by role the file was `mx_decode_kernels.py`, e.g. at 3d7c87d) timed
in the sweep at each of its configs beside this tree's, outputs compared. --int5-ms: int5
decode rows (`int5_cells`: as served, the A8 kernels forced, int4 W4A16 as served); with
--int5-old MODULE also as served on a previous tree's `gemv3_w4a16_kernel` (e.g. `git show
REV:kernels/paro_kernels/triton/gemv_dot_kernels.py > .../triton/_dk_old.py`; `decode_kernels.py`
before the cut, e.g. at ccbd255), and with --int5-sweep the GEMV at INT5_SWEEP's configs. --mma:
only `mma_cells`
at --ms (no sweep): MXFP4 and MXFP4-PARO as served on the mma GEMV against the paths they took
before, int4 as served and cuBLAS, and the mma GEMV alone at MMA_GRID's configs. --prefill:
only `prefill_cells` at --ms: MXFP4 and MXFP4-PARO as served, on the GEMM and on the dequant
path, the dequant alone, int4 as served and cuBLAS, the 8-bit vendor GEMM route, `dequant8` alone
and the folded rotated dequant.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from paro_kernels.mx import rel_rms

from benchmarks.kernels.common import (
    SHAPES,
    G,
    bytes_w4,
    copies,
    decode_cells,
    int4pack,
    mx_gemv_old,
    mx_preps,
    precompile_pool,
    random_prep,
    time_or_nan,
    time_us,
    with_givens,
)


def _mx_bytes(n: int, k: int, m: int, planes: int = 1) -> int:
    """e2m1 codes + e8m0 scales + activations once per plane (bf16) + bf16 output."""
    return n * k // 2 + n * k // 32 + planes * 2 * m * k + 2 * m * n


def _row(name: str, m: int, variant: str, us: float, nbytes: int, **kw: Any) -> dict[str, Any]:
    r = {"shape": name, "m": m, "variant": variant, "us": us,
         "hbm_pct_4p3": nbytes / 4.3e12 / (us * 1e-6) * 100, **kw}  # fmt: skip
    extra = "".join(f" {key} {v}" for key, v in kw.items())
    print(f"{name} M={m} {variant}: {us:.2f} us {r['hbm_pct_4p3']:.0f}% HBM{extra}", flush=True)
    return r


def _shape_preps(made: dict[tuple[str, bool], list[Any]], name: str, n: int, k: int,
                 sizes: tuple[int, ...], rot: bool, dev: torch.device) -> list[Any]:  # fmt: skip
    """`mx_preps` once a shape (both variants kept for its cells; the previous shape's
    dropped)."""
    if (name, rot) not in made:
        for key in [key for key in made if key[0] != name]:
            del made[key]
        torch.cuda.empty_cache()
        made[(name, rot)] = mx_preps(n, k, sizes, rot, dev)
    return made[(name, rot)]


def _gemv(p: Any, a: torch.Tensor, cfg: Any) -> object:
    from paro_kernels.triton import mx_gemv

    return mx_gemv.mx_gemv(a, p.weight, p.bounds, torch.bfloat16, None, cfg)


def _compile_one(job: tuple[str, int, dict[str, Any]]) -> str:
    """`precompile_pool` worker: one launch of the GEMV at a (shape, M, config), which
    fills Triton's disk cache."""
    from paro_kernels.triton import mx_gemv, mx_repack

    name, m, kw = job
    kw = dict(kw)
    old = kw.pop("old", "")  # the --old module's kernel instead
    _, n, k, _ = next(s for s in SHAPES if s[0] == name)
    p = mx_repack.prepare(*mx_repack.random_checkpoint(n, k), None, 0, "cuda")
    a = torch.zeros(1, m, k, device="cuda", dtype=torch.bfloat16)
    try:
        cfg = mx_gemv.gemv_config(m, n, k, (), 132, **kw)
        if old:
            import importlib

            mx_gemv_old(importlib.import_module(old).mx_gemv_kernel, p, a, cfg)
        else:
            _gemv(p, a, cfg)
        torch.cuda.synchronize()
        return ""
    except Exception as e:
        return f"{name} {m} {kw}: {type(e).__name__} {str(e)[:200]}"


def sweep(shapes: list[str], ms: list[int], reps: int, old: str = "") -> list[dict[str, Any]]:
    """The GEMV alone at every SWEEP config (one plane, bf16 activations); with `old` (a module
    holding a previous tree's kernel) that kernel too at each config it has (no prefetch), its
    output checked against this tree's."""
    import importlib

    from paro_kernels.triton import mx_gemv

    kern = importlib.import_module(old).mx_gemv_kernel if old else None

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, _ = next(s for s in SHAPES if s[0] == name)
        preps = mx_preps(n, k, (n,), False, dev)
        for m in ms:
            a = torch.randn(1, m, k, device=dev, dtype=torch.bfloat16)
            for kw in mx_gemv.sweep_configs():
                cfg = mx_gemv.gemv_config(m, n, k, (), 132, **kw)
                us = time_or_nan([functools.partial(_gemv, p, a, cfg) for p in preps], reps)
                out.append(_row(name, m, f"gemv {kw}", us, _mx_bytes(n, k, m), cfg=kw))
                if kern is not None and not kw.get("prefetch"):
                    fns = [functools.partial(mx_gemv_old, kern, p, a, cfg) for p in preps]
                    y_old, y_new = fns[0](), _gemv(preps[0], a, cfg)
                    d = (y_old.float() - y_new.float()).abs().max()  # type: ignore[attr-defined]
                    out.append(_row(name, m, f"old gemv {kw}", time_or_nan(fns, reps),
                                    _mx_bytes(n, k, m), cfg=kw, old=True,
                                    max_diff=float(d)))  # fmt: skip
        del preps
        torch.cuda.empty_cache()
    return out


def best_config(rows: list[dict[str, Any]], m: int) -> dict[str, Any]:
    """The sweep config with the least summed time over the swept shapes at M = m."""
    tot: dict[str, float] = {}
    for r in rows:
        if r["m"] == m and not r.get("old"):
            key = json.dumps(r["cfg"], sort_keys=True)
            tot[key] = tot.get(key, 0.0) + r["us"]
    good = {key: v for key, v in tot.items() if v == v}
    return json.loads(min(good, key=good.__getitem__)) if good else {}


def _ref_err(y: torch.Tensor, a: torch.Tensor, p: Any) -> float:
    """Frobenius relative error of y against fp64 A_p W^T of the dequantized weight."""
    w = p.weight
    wd = _dequant(p).double()
    bounds = (0, *p.bounds, w.n)
    r = torch.empty(a.shape[1], w.n, dtype=torch.float64, device=a.device)
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        r[:, lo:hi] = a[i].double() @ wd[lo:hi].t()
    return float((y.double() - r).norm() / r.norm())


def _dequant(p: Any) -> torch.Tensor:
    """[N, K] fp32 of the repacked weight (the kernel layout read back in torch)."""
    from paro_kernels.formats import e2m1_decode

    w = p.weight
    n, kp2 = w.qw.shape
    q = w.qw.view(n, kp2 // 32, 32)
    codes = torch.stack([q & 15, q >> 4], 2).reshape(n, -1)[:, : w.k]  # [N, K] 0..15
    codes = e2m1_decode(codes.cpu()).to(q.device, torch.float32)
    e = w.sc[: w.k // 32].t().to(torch.int32)  # [N, K/32]
    scale = torch.where(e > 0, torch.exp2((e - 127).float()), 0.0)
    return codes * scale.repeat_interleave(32, 1)


def _peers(name: str, m: int, x: torch.Tensor, n: int, i4: list[Any], reps: int,
           with_int4pack: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """The cell's peers, same run: cuBLAS bf16, (int4pack,) the int4 W4A16 op as served on the
    shape's layer copies `i4` (`common.decode_cells`' int4 layers)."""
    from paro_kernels.triton import route

    k, dev = x.shape[1], x.device
    wd = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies(2 * k * n))]
    cub = time_or_nan([functools.partial(torch.matmul, x, w) for w in wd], reps)
    rows = [_row(name, m, "cublas-bf16", cub, 2 * n * k + 2 * m * (k + n))]
    del wd
    if with_int4pack:
        rows.append(_row(name, m, "int4pack", time_us(int4pack(n, k, m, dev), reps),
                         bytes_w4(n, k, m)))  # fmt: skip
    rows.append(_row(name, m, "w4a16-int4 as served",
                     time_or_nan([functools.partial(route.linear, p, x) for p in i4], reps),
                     bytes_w4(n, k, m)))  # fmt: skip
    return rows


def cells(shapes: list[str], ms: list[int], reps: int, best: dict[int, dict[str, Any]],
          t0: float, budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per (shape, M), same run: cuBLAS, int4pack, int4 W4A16 as served, MXFP4 / MXFP4-PARO as
    served, the GEMM forced, the GEMV at the best sweep config."""
    from paro_kernels.triton import mx_gemm, mx_gemv, mx_repack, mx_route

    dev = torch.device("cuda")
    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    made: dict[tuple[str, bool], list[Any]] = {}
    for name, n, k, m, x, i4, _ in decode_cells(shapes, ms, t0, budget, not_run):
        sizes = next(s for s in SHAPES if s[0] == name)[3]
        out += _peers(name, m, x, n, i4, reps, with_int4pack=True)
        for rot in (False, True):
            label = "mxfp4-paro" if rot else "mxfp4"
            preps = _shape_preps(made, name, n, k, sizes, rot, dev)
            nbm = _mx_bytes(n, k, m, len(sizes) if rot else 1)
            paths: tuple[tuple[mx_repack.ActMode, str | None], ...] = (
                ("fp8", None), ("fp8", "gemm"), ("a16", "gemm"))  # fmt: skip
            for act, path in paths:
                fns = [functools.partial(mx_route.mx_linear, p, x, None, act, path)
                       for p in preps]  # fmt: skip
                out.append(_row(name, m, f"{label} {act} {path or 'as served'}",
                                time_or_nan(fns, reps), nbm))  # fmt: skip
            if best.get(m):
                (a,) = mx_gemm.activations(preps[0], x, "a16")
                cfg = mx_gemv.gemv_config(m, n, k, preps[0].bounds, 132, **best[m])
                err = _ref_err(_gemv(preps[0], a, cfg), a, preps[0])
                fns = [functools.partial(_gemv, p, a, cfg) for p in preps]
                out.append(_row(name, m, f"{label} gemv alone {best[m]}",
                                time_or_nan(fns, reps), nbm, rel=f"{err:.1e}"))  # fmt: skip
    return out, not_run


MMA_GRID: list[dict[str, int]] = [
    {}, {"block_n": 64}, {"unroll": 1, "fit": 10, "maxnreg": 0},
    {"unroll": 2, "fit": 6, "maxnreg": 0}, {"unroll": 1, "fit": 7, "maxnreg": 72},
    {"fit": 7, "maxnreg": 0}, {"fit": 8, "maxnreg": 64},
]  # fmt: skip
# Four tiles (M = 17..32; H100, 2026-12-05, results/bench-2026-12-05-h100-mma4.json):
# around the band's (unroll 1, 4 an SM, cap 128).
MMA_GRID4: list[dict[str, int]] = [
    {}, {"fit": 4, "maxnreg": 0}, {"fit": 3, "maxnreg": 0}, {"fit": 5, "maxnreg": 112},
    {"fit": 6, "maxnreg": 96}, {"unroll": 2, "fit": 3, "maxnreg": 0}, {"fit": 8, "maxnreg": 128},
]  # fmt: skip


def _mma(p: Any, a: torch.Tensor, cfg: Any, paired: bool = False,
         maxnreg: int | None = None) -> object:  # fmt: skip
    from paro_kernels.triton import mx_gemv_mma

    return mx_gemv_mma.mx_gemv_mma(a, p.weight, p.bounds, torch.bfloat16, None, cfg, paired,
                                   maxnreg)  # fmt: skip


def _mx_cells(shapes: list[str], ms: list[int], reps: int, t0: float, budget: float,
              not_run: list[str],
              out: list[dict[str, Any]]) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """`common.decode_cells` for the MXFP4 benches: per cell the peers' rows into `out` (cuBLAS,
    int4 as served), then (shape, N, K, M, x, rotated, label, layer copies, format-minimal
    bytes) for NVFP4 -> MXFP4 and for MXFP4-PARO (copies made once a shape)."""
    dev = torch.device("cuda")
    made: dict[tuple[str, bool], list[Any]] = {}
    for name, n, k, m, x, i4, _ in decode_cells(shapes, ms, t0, budget, not_run):
        sizes = next(s for s in SHAPES if s[0] == name)[3]
        out += _peers(name, m, x, n, i4, reps)
        for rot in (False, True):
            preps = _shape_preps(made, name, n, k, sizes, rot, dev)
            yield (name, n, k, m, x, rot, "mxfp4-paro" if rot else "mxfp4", preps,
                   _mx_bytes(n, k, m, len(sizes) if rot else 1))  # fmt: skip


def _path_rows(name: str, m: int, x: torch.Tensor, label: str, preps: list[Any], nbm: int,
               paths: tuple[str | None, ...], reps: int) -> list[dict[str, Any]]:  # fmt: skip
    """`mx_linear` on the layer copies with each path forced (None: as served), one row each."""
    from paro_kernels.triton import mx_route

    return [_row(name, m, f"{label} {path or 'as served'}",
                 time_or_nan([functools.partial(mx_route.mx_linear, p, x, None, "fp8", path)
                     for p in preps], reps), nbm) for path in paths]  # fmt: skip


def _chunks_one_launch(p: Any, x: torch.Tensor) -> object:
    """`mx_linear` on the decode chunks with CHUNKS_ONE_LAUNCH on (restored after: a graph
    capture runs this Python once, with the setting in force)."""
    from paro_kernels.triton import mx_gemv_mma, mx_route

    keep, mx_gemv_mma.CHUNKS_ONE_LAUNCH = mx_gemv_mma.CHUNKS_ONE_LAUNCH, True
    try:
        return mx_route.mx_linear(p, x, None, "fp8", "chunks")
    finally:
        mx_gemv_mma.CHUNKS_ONE_LAUNCH = keep


def mma_cells(shapes: list[str], ms: list[int], reps: int, t0: float, budget: float,
              grid: int = len(MMA_GRID)) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per (shape, M), same run: cuBLAS, the int4 W4A16 op as served, MXFP4
    and MXFP4-PARO as served (the mma GEMV from MMA_MIN_M), the paths they took before (the FMA
    GEMV to M = 4, the A16 GEMM past it) forced, and the mma GEMV alone at MMA_GRID's configs
    (its output against fp64; the first `grid` of them, 0: none)."""
    from paro_kernels.triton import mx_gemv, mx_gemv_mma

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, rot, label, preps, nbm in _mx_cells(shapes, ms, reps, t0, budget,
                                                               not_run, out):  # fmt: skip
        before = "gemv" if m <= mx_gemv.GEMV_MAX_M else "gemm"
        tiles = m <= mx_gemv_mma.MMA_TILE_MAX_M
        paths: tuple[str | None, ...] = (None, before)
        if m > 16:  # the four tiles, the chunks, the 8-bit route and the GEMM (served before)
            paths = (None, *(("mma",) if tiles else ()), "chunks", "w8", "gemm")
        out += _path_rows(name, m, x, label, preps, nbm, paths, reps)
        if not tiles:  # the chunks in one launch (`mx_gemv_mma.CHUNKS_ONE_LAUNCH`)
            fns = [functools.partial(_chunks_one_launch, p, x) for p in preps]
            out.append(_row(name, m, f"{label} chunks one launch", time_or_nan(fns, reps), nbm))
        if not rot and grid and tiles:  # the plain bf16 rows as served; paired at the default
            a16 = x.unsqueeze(0)
            pa = mx_gemv_mma.pair_fp16(x)
            cfgs = (MMA_GRID4 if mx_gemv_mma.mma_tiles(m) == 4 else MMA_GRID)[:grid]
            for kw, paired in [*((kw, False) for kw in cfgs), ({}, True)]:
                kc = {key: v for key, v in kw.items() if key != "maxnreg"}
                cfg = mx_gemv_mma.mma_config(m, n, k, preps[0].bounds, 132, **kc)
                a, mr = (pa if paired else a16), kw.get("maxnreg")
                err = _ref_err(_mma(preps[0], a, cfg, paired, mr), a16, preps[0])
                fns = [functools.partial(_mma, p, a, cfg, paired, mr) for p in preps]
                out.append(_row(name, m, f"{label} mma alone {kw}{' paired' * paired}",
                                time_or_nan(fns, reps), nbm, split=cfg.split_k,
                                rel=f"{err:.1e}"))  # fmt: skip
    return out, not_run


# int5 GEMV configs timed beside the served one (--int5-sweep): block_n, warps, programs per
# SM, groups per iteration, stages. A first H200 run (2026-12-03) swept the int4 configs'
# neighbourhood; these sweep around its winner, (64, 4, 8, 1, 3) = gemv_dot.GEMV3_INT5, beside
# the int4 config that served int5 before (128, 4, 8, 1, 3).
INT5_SWEEP = [(128, 4, 8, 1, 3), (64, 4, 8, 1, 3), (64, 4, 16, 1, 3), (64, 4, 12, 1, 3),
              (64, 4, 8, 1, 4), (64, 2, 8, 1, 3), (32, 4, 8, 1, 3), (32, 2, 16, 1, 3)]  # fmt: skip


def int5_cells(
    shapes: list[str], ms: list[int], reps: int, old: str = "", sweep: bool = False
) -> list[dict[str, Any]]:
    """int5 (W5A8 I8 PG ZPE) decode, same run: as served (`route.linear_a8`, int8 group, the
    zero-point epilogue: the matrix-unit GEMV at M <= 16 on NVIDIA), with `old` the same op on
    a previous tree's GEMV kernel, the A8 kernels forced (`rotate_quant` + `w4a8_gemm`), the
    int4 W4A16 op as served, and (`sweep`) the GEMV at INT5_SWEEP's configs."""
    from paro_kernels.triton import gemm, gemv_dot, launch, prologue, route

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        i5 = [with_givens(random_prep(n, k, sizes, 5, dev), k, len(sizes), dev)
              for _ in range(copies(bytes_w4(n, k, 0) * 5 // 4))]  # fmt: skip
        i4 = [with_givens(random_prep(n, k, sizes, 4, dev), k, len(sizes), dev)
              for _ in range(copies(bytes_w4(n, k, 0)))]  # fmt: skip
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            nb5 = bytes_w4(n, k, m) + k * n // 8

            def a8(p: Any, x: torch.Tensor = x) -> object:
                q, asc, rs = prologue.rotate_quant(x, p.rot_hi, p.rot_lo, G, "int8", "group")
                return gemm.w4a8_gemm(q, asc, rs, p, x.dtype, zp_epilogue=True)

            taken = route.a8_route(m, G, True, False, "int8") or "a8"
            served = [functools.partial(route.linear_a8, p, x, None, "int8", "group", True)
                      for p in i5]  # fmt: skip
            out.append(_row(name, m, f"int5 as served ({taken})", time_or_nan(served, reps), nb5))
            if old and taken == "gemv3":
                # gemv_dot launching a previous tree's gemv3 kernel (module `old`); gemv_dot
                # holds the kernel by value, so the patch goes there
                prev = importlib.import_module(old).gemv3_w4a16_kernel
                with mock.patch.object(gemv_dot, "gemv3_w4a16_kernel", prev):
                    out.append(
                        _row(name, m, "int5 as served, old gemv3", time_or_nan(served, reps), nb5)
                    )
            for cfg in INT5_SWEEP if sweep else []:
                bn, w, pps, gpi, st = cfg
                c = gemv_dot.gemv3_config(m, n, k, G, i5[0].bounds, launch.sm_count(dev), bn, w,
                                          pps, gpi, st)  # fmt: skip
                fns = [functools.partial(gemv_dot.gemv3_linear, p, x, config=c) for p in i5]
                out.append(_row(name, m, "int5 gemv3", time_or_nan(fns, reps), nb5, cfg=list(cfg)))
            a8_fns = [functools.partial(a8, p) for p in i5]
            out.append(_row(name, m, "int5 a8 forced", time_or_nan(a8_fns, reps), nb5))
            out.append(_row(name, m, "w4a16-int4 as served",
                            time_or_nan([functools.partial(route.linear, p, x) for p in i4], reps),
                            bytes_w4(n, k, m)))  # fmt: skip
        del i5, i4
        torch.cuda.empty_cache()
    return out


def prefill_cells(shapes: list[str], ms: list[int], reps: int, t0: float,
                  budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per (shape, M), same run: cuBLAS, int4 W4A16 as served, MXFP4 and MXFP4-PARO as served,
    on the GEMM (W4A8 fp8, forced) and on the dequant path (forced), and `mx_dequant` alone (the
    layer to bf16, the rotation folded in for PARO); the 8-bit vendor GEMM route (`path="w8"`;
    its output against the GEMM's fp8 mode, the same operands), `dequant8` alone, and for
    MXFP4-PARO the dequant with the block scales folded (DEQUANT_FOLD on: the path and the
    kernel alone; its W' against the per-block form's).
    At M <= 64 the decode chunks forced too (`path="chunks"`); at M <= MMA_TILE_MAX_M the mma
    GEMV's four tiles forced (`path="mma"`)."""
    from paro_kernels.triton import mx_gemm, mx_gemv_mma, mx_route

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, rot, label, preps, nbm in _mx_cells(shapes, ms, reps, t0, budget,
                                                               not_run, out):  # fmt: skip
        paths: tuple[str | None, ...] = (None, "gemm", "dequant")
        paths += ("chunks",) if m <= 64 else ()
        paths += ("mma",) if m <= mx_gemv_mma.MMA_TILE_MAX_M else ()
        out += _path_rows(name, m, x, label, preps, nbm, paths, reps)
        p0 = preps[0]
        y8, yg = (mx_route.mx_linear(p0, x, None, "fp8", path) for path in ("w8", "gemm"))
        err = f"{rel_rms(y8, yg):.1e}"
        for row in _path_rows(name, m, x, label, preps, nbm, ("w8",), reps):
            out.append({**row, "rel_vs_gemm": err})
        # bytes: codes + scales read, W' written (bf16; e4m3 + a scale a column)
        read = n * k // 2 + n * k // 32
        fns = [functools.partial(mx_gemm.mx_dequant, p, torch.bfloat16) for p in preps]
        out.append(
            _row(name, m, f"{label} dequant alone", time_or_nan(fns, reps), read + 2 * n * k)
        )
        fns8 = [functools.partial(mx_gemm.dequant8, p) for p in preps]
        out.append(
            _row(name, m, f"{label} dequant8 alone", time_or_nan(fns8, reps), read + n * k + 4 * n)
        )
        if rot:
            block = mx_gemm.mx_dequant(p0, torch.bfloat16, fold=False).clone()
            ferr = f"{rel_rms(mx_gemm.mx_dequant(p0, torch.bfloat16, fold=True), block):.1e}"
            with mock.patch.object(mx_gemm, "DEQUANT_FOLD", True):
                rows = _path_rows(name, m, x, f"{label} fold", preps, nbm, ("dequant",), reps)
                rows.append(_row(name, m, f"{label} fold dequant alone", time_or_nan(fns, reps),
                                 read + 2 * n * k))  # fmt: skip
            out += [{**r, "w_rel_vs_block": ferr} for r in rows]
    return out, not_run


def main(argv: list[str] | None = None) -> None:
    """Sweep, then the cells; JSON written after each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="mx.json")
    ap.add_argument("--shapes", default="qkv,o_proj,gate_up,down,in_proj")
    ap.add_argument("--ms", default="1,2,4")
    ap.add_argument("--sweep", default="qkv,gate_up")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--jobs", type=int, default=12, help="compile processes before the sweep")
    ap.add_argument("--old", default="", help="module of a previous tree's GEMV kernel to A/B")
    ap.add_argument("--int5-ms", default="", help="int5 decode rows at these M (int5_cells)")
    ap.add_argument("--int5-shapes", default="qkv,o_proj,gate_up,down,in_proj")
    ap.add_argument("--int5-old", default="", help="module of a previous tree's gemv3 kernel")
    ap.add_argument("--int5-sweep", action="store_true", help="int5 GEMV configs (INT5_SWEEP)")
    ap.add_argument("--mma", action="store_true", help="only mma_cells at --ms")
    ap.add_argument("--mma-grid", type=int, default=len(MMA_GRID), help="MMA_GRID configs timed")
    ap.add_argument("--prefill", action="store_true", help="only prefill_cells at --ms")
    argv = sys.argv[1:] if argv is None else argv  # recorded in the JSON
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.monotonic()
    ms = [int(v) for v in args.ms.split(",")]
    meta: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                            "triton": __import__("triton").__version__,
                            "command": " ".join(["python -m benchmarks.kernels.mx_decode",
                                                 *(argv or [])])}  # fmt: skip
    if args.mma or args.prefill:
        shapes = list(filter(None, args.shapes.split(",")))
        if args.prefill:
            meta["cells"], meta["not_run"] = prefill_cells(shapes, ms, args.reps, t0,
                                                           args.budget_s)  # fmt: skip
        else:
            meta["cells"], meta["not_run"] = mma_cells(shapes, ms, args.reps, t0, args.budget_s,
                                                       args.mma_grid)  # fmt: skip
        with open(args.out, "w") as f:
            json.dump(meta, f, indent=1)
        return
    sw = list(filter(None, args.sweep.split(",")))
    if args.jobs > 1 and sw:
        from paro_kernels.triton import mx_gemv

        jobs = [(nm, m, kw) for nm in sw for m in ms for kw in mx_gemv.sweep_configs()]
        if args.old:
            jobs += [(nm, m, {**kw, "old": args.old}) for nm, m, kw in jobs
                     if not kw["prefetch"]]  # fmt: skip
        precompile_pool(_compile_one, jobs, args.jobs)
    meta["sweep"] = sweep(sw, ms, args.reps, args.old) if sw else []
    meta["best"] = {m: best_config(meta["sweep"], m) for m in ms}
    print("best configs", meta["best"], flush=True)
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)
    if args.int5_ms:
        meta["int5"] = int5_cells(args.int5_shapes.split(","),
                                  [int(v) for v in args.int5_ms.split(",")], args.reps,
                                  args.int5_old, args.int5_sweep)  # fmt: skip
        with open(args.out, "w") as f:
            json.dump(meta, f, indent=1)
    meta["cells"], meta["not_run"] = cells(list(filter(None, args.shapes.split(","))), ms,
                                           args.reps, meta["best"], t0, args.budget_s)  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
