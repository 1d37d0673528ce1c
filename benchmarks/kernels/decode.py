"""Decode sweep: the matrix-unit GEMV (`gemv_dot`), the HFMA2 GEMV (`gemv_fma`) and the mma.sync
GEMV (`gemv_mma`) against the shipped decode paths and the peers, in one run.

    python -m benchmarks.kernels.decode --out DIR/decode.json [--shapes qkv,gate_up]
        [--ms 1,16] [--stage1 qkv,gate_up] [--top 3] [--budget-s 300] [--jobs 12]

Stage 1: the GEMV alone (its fp16 prologue output made once) over the config grid on the
--stage1 shapes at each M; the --top configs by summed time go on. Stage 2, per (shape, M):
cuBLAS bf16, `torch._weight_int4pack_mm` (g128), ours as served (`route.linear`'s
dispatch), the new GEMV as served with each prologue (`prologue.PROLOGUES`) at the best
stage-1 config, the top configs with the shipped prologue, and the prologues alone. Timing as
`time_us` (CUDA-graph replays over weight copies past 4x L2); % HBM against 4.3 TB/s.

    python -m benchmarks.kernels.decode --ab ...           the forced paths per cell
    python -m benchmarks.kernels.decode --h2 grid|around|pdl|int5|waves|confirm|gv|gvpdl|mma \
        |mma5|gvrows ...

`--h2`: per cell the peers, the op as served, the FMA op forced (the "before"), the HFMA2 op at
each variant of the named grid (`grid`: H2_GRID, `around`: H2_AROUND, `pdl`: H2_PDL), the two
GEMVs and prologues alone; `int5`: int5 as served against its HFMA2 variant and int4 as served;
`waves` / `confirm`: grids of whole waves (`H2_WAVES`), the shipped per-(bits, M) configs
(`H2_CONFIRM`), each against the prologue op; `gv` / `gvpdl`, `mma` / `mma5`, `gvrows`: the
comments above their grids. The H200 runs of 2026-12-04 set the HFMA2 and mma configs (the
notebook, docs/notebook/kernels-2026-11-29-to-12-06.md, has their tables).
"""

from __future__ import annotations

import argparse
import dataclasses
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
    bounds,
    cand_rows,
    decode_cells,
    decode_preps,
    int5_served,
    peer_rows,
    precompile_pool,
    random_prep,
    row,
    time_or_nan,
)
from benchmarks.kernels.decode_mma import h2_gvrows, h2_mma, h2_mma5

GRID: list[dict[str, int]] = [
    dict(block_n=bn, num_warps=w, programs_per_sm=pps, gpi=gpi, num_stages=st)
    for (bn, w), (st, gpi), pps in itertools.product(
        ((64, 4), (128, 8), (128, 4), (256, 8)),
        ((1, 1), (2, 1), (3, 1), (4, 1), (1, 2), (2, 2)),
        (4, 8),
    )
]  # fmt: skip


def _compile_one(job: tuple[str, int, dict[str, int]]) -> str:
    """`precompile_pool` worker: one launch of the GEMV at a (shape, M, config), which
    fills Triton's disk cache."""
    from paro_kernels.triton import gemv_dot

    name, m, kw = job
    _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
    p = random_prep(n, k, sizes, 4, torch.device("cuda"))
    xr = torch.zeros(len(sizes), m, k, device="cuda", dtype=torch.float16)
    cfg = gemv_dot.gemv3_config(m, n, k, G, bounds(sizes), 132, **kw)
    try:
        gemv_dot.gemv3_w4a16(xr, p, torch.bfloat16, None, cfg)
        torch.cuda.synchronize()
        return ""
    except Exception as e:
        return f"{name} {m} {kw}: {type(e).__name__} {str(e)[:200]}"


def stage1(shapes: list[str], ms: list[int], reps: int) -> list[dict[str, Any]]:
    """The GEMV alone over GRID."""
    from paro_kernels.triton import gemv_dot, prologue

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = decode_preps(n, k, sizes, dev)
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            p0 = preps[0]
            xr = prologue.prologue16(x, p0.rot_hi, p0.rot_lo, G, None, None, "slice")
            for kw in GRID:
                cfg = gemv_dot.gemv3_config(m, n, k, G, bounds(sizes), 132, **kw)
                fns = [functools.partial(gemv_dot.gemv3_w4a16, xr, p, torch.bfloat16, None, cfg)
                       for p in preps]  # fmt: skip
                out.append(row(name, m, n, k, "gemv3-alone " + str(kw), time_or_nan(fns, reps),
                                cfg=dataclasses.asdict(cfg), kw=kw))  # fmt: skip
    return out


def top_configs(rows: list[dict[str, Any]], top: int) -> list[dict[str, int]]:
    """The `top` GRID entries by time summed over stage 1's cells (each cell normalized by its
    best, so a long shape does not decide alone)."""
    best: dict[tuple[str, int], float] = {}
    for r in rows:
        key = (r["shape"], r["m"])
        if r["us"] == r["us"]:
            best[key] = min(best.get(key, float("inf")), r["us"])
    score: dict[str, float] = {}
    for r in rows:
        v = r["us"] / best[(r["shape"], r["m"])] if r["us"] == r["us"] else 10.0
        score[json.dumps(r["kw"])] = score.get(json.dumps(r["kw"]), 0.0) + v
    return [json.loads(s) for s in sorted(score, key=score.__getitem__)[:top]]


def stage2(shapes: list[str], ms: list[int], reps: int, cfgs: list[dict[str, int]],
           t0: float, budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell: the peers, ours as served, the new GEMV per prologue and per top config."""
    from paro_kernels.triton import gemv_dot, prologue, route

    dev = torch.device("cuda")
    out, not_run = [], []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = decode_preps(n, k, sizes, dev)
        for m in ms:
            if budget and time.monotonic() - t0 > budget:
                not_run.append(f"{name}@{m}")
                continue
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            out += peer_rows(name, m, n, k, x, reps)
            served = "ours-as-served (" + route.band(m) + ")"
            fns = [functools.partial(route.linear, p, x) for p in preps]
            out.append(row(name, m, n, k, served, time_or_nan(fns, reps)))
            for i, kw in enumerate(cfgs):
                cfg = gemv_dot.gemv3_config(m, n, k, G, bounds(sizes), 132, **kw)
                for pro in prologue.PROLOGUES if i == 0 else (prologue.GEMV3_PROLOGUE,):
                    fns = [functools.partial(gemv_dot.gemv3_linear, p, x, None, pro, cfg)
                           for p in preps]  # fmt: skip
                    out.append(row(name, m, n, k, f"gemv3 {pro} {kw}", time_or_nan(fns, reps),
                                    cfg=dataclasses.asdict(cfg)))  # fmt: skip
            for pro in prologue.PROLOGUES:
                fns = [functools.partial(prologue.prologue16, x, p.rot_hi, p.rot_lo, G,
                       p.gv_idx, p.gv_coef, pro) for p in preps]  # fmt: skip
                out.append(row(name, m, n, k, f"prologue {pro}", time_or_nan(fns, reps)))
            torch.cuda.empty_cache()
    return out, not_run


# `--ab`'s candidates: the stage-1 bests of the H200 run of 2026-12-02 (qkv M = 1 / 16 and
# gate_up M = 1)
AB_CFGS = {"a": dict(block_n=128, num_warps=4, programs_per_sm=8, gpi=1, num_stages=3),
           "b": dict(block_n=64, num_warps=4, programs_per_sm=4, gpi=2, num_stages=2)}  # fmt: skip


def _gemv2(p: Any, x: torch.Tensor, fused: bool, pdl: bool) -> object:
    """The FMA GEMV (sliced prologue), or with `fused` the Givens-inside one; never the HFMA2."""
    from paro_kernels.triton import gemv_fma

    return gemv_fma.gemv_w4a16(p, x, None, fused=fused, pdl=pdl, h2=False)


def _mma(p: Any, x: torch.Tensor) -> object:
    from paro_kernels.triton import route

    return route.linear(p, x, path="mma")


def _gemv3(p: Any, x: torch.Tensor, cfg: Any, pdl: bool) -> object:
    from paro_kernels.triton import gemv_dot

    return gemv_dot.gemv3_linear(p, x, None, "slice", cfg, pdl)


def ab(shapes: list[str], ms: list[int], reps: int, t0: float,
       budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: cuBLAS, int4pack, the shipped paths forced (FMA GEMV with the sliced
    prologue, with and without PDL, the Givens-inside GEMV; the tile kernels) and the new GEMV
    (with and without PDL, two configs)."""
    from paro_kernels.triton import gemv_dot

    dev = torch.device("cuda")
    out, not_run = [], []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = decode_preps(n, k, sizes, dev)
        for m in ms:
            if budget and time.monotonic() - t0 > budget:
                not_run.append(f"{name}@{m}")
                continue
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            out += peer_rows(name, m, n, k, x, reps)
            cands: dict[str, Callable[[Any], object]] = {}
            if m <= 2:
                for fused, pdl in ((False, False), (False, True), (True, False)):
                    cands[f"gemv2 fused={fused} pdl={pdl}"] = functools.partial(
                        _gemv2, x=x, fused=fused, pdl=pdl
                    )
            else:
                cands["mma"] = functools.partial(_mma, x=x)
            for label, kw in AB_CFGS.items():
                cfg = gemv_dot.gemv3_config(m, n, k, G, bounds(sizes), 132, **kw)
                for pdl in (True, False) if label == "a" else (True,):
                    cands[f"gemv3 {label} pdl={pdl}"] = functools.partial(
                        _gemv3, x=x, cfg=cfg, pdl=pdl
                    )
            ref = None
            for label, fn in cands.items():
                y = fn(preps[0]).float()  # type: ignore[attr-defined]
                ref = y if ref is None else ref
                err = float((y - ref).norm() / ref.norm())  # against the first (shipped) path
                out.append(
                    row(
                        name,
                        m,
                        n,
                        k,
                        label,
                        time_or_nan([functools.partial(fn, p) for p in preps], reps),
                        rel=err,
                    )
                )
            torch.cuda.empty_cache()
    return out, not_run


# `--h2 grid`: the HFMA2 GEMV's configs (`gemv_fma.gemv2_config` keywords; kw 0: its M default)
H2_GRID: list[dict[str, int]] = [
    dict(block_n=bn, num_warps=w, kw=kw, programs_per_sm=pps)
    for (bn, w), kw, pps in itertools.product(((512, 4), (256, 2)), (0, 16), (8, 16))
] + [dict(block_n=1024, num_warps=8, kw=0, programs_per_sm=8)]  # fmt: skip


# `--h2 around`: around the shipped config (`gemv_fma.H2_CONFIG`): fewer, fatter programs (2 / 4 per
# SM) with deeper pipelining, a register cap (occupancy: 127 registers hold 4 programs of 4
# warps per SM, and 560-680 programs ran 1.06-1.29 waves), the prologue in 16 / 32 channels a
# program (the grid run's ncu, H200 2026-12-04: 7.6% achieved occupancy, one 32 KB load per
# program).
H2_AROUND: list[dict[str, int]] = [
    {},
    dict(programs_per_sm=4), dict(programs_per_sm=4, num_stages=4),
    dict(programs_per_sm=2, num_stages=4), dict(num_stages=4),
    dict(maxnreg=96), dict(maxnreg=80),
    dict(slice=32), dict(slice=32, pwarps=2), dict(slice=16, pwarps=2), dict(slice=16, pwarps=1),
]  # fmt: skip
# `--h2 pdl`: the prologue -> GEMV pair launched programmatically dependent (the GEMV's L2 prefetch
# of its words overlapping the prologue), and the prologue on one fp16 block per group (hi + lo
# rounded once: half its bytes; a Prepared field it would need, hence measured first).
H2_PDL: list[dict[str, int]] = [
    {}, dict(pdl=1), dict(one=1), dict(one=1, pdl=1), dict(programs_per_sm=4),
]  # fmt: skip
_LAUNCH = ("maxnreg", "slice", "pwarps", "pdl", "one")
_ROT16: dict[int, torch.Tensor] = {}  # id(prep) -> its fp16 blocks (H2_PDL's `one`)


def _h2_cfg(name: str, m: int, kw: dict[str, int]) -> Any:
    from paro_kernels.triton import gemv_fma

    _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
    kw = {**gemv_fma.H2_CONFIG, **kw} if "block_n" not in kw else kw
    args: dict[str, Any] = {a: v for a, v in kw.items() if v and a not in _LAUNCH}
    return gemv_fma.gemv2_config(m, n, k, G, bounds(sizes), 132, **args)


def _compile_h2(job: tuple[str, int, dict[str, int]]) -> str:
    """`precompile_pool` worker: one launch of the HFMA2 GEMV at a (shape, M, config)."""
    from paro_kernels.triton import gemv_fma

    name, m, kw = job
    _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
    p = random_prep(n, k, sizes, 4, torch.device("cuda"))
    xr = torch.zeros(len(sizes), m, k, device="cuda", dtype=torch.float16)
    try:
        gemv_fma.gemv_h2(xr, p, torch.bfloat16, None, _h2_cfg(name, m, kw), kw.get("maxnreg", 0))
        torch.cuda.synchronize()
        return ""
    except Exception as e:
        return f"{name} {m} {kw}: {type(e).__name__} {str(e)[:200]}"


def _blocks(p: Any, **kw: Any) -> Any:
    """Layer p without its Givens records (the HFMA2 op then runs the sliced blocks prologue,
    as these cells measured before the ops read the records from the layer), kw replaced."""
    return dataclasses.replace(p, gv_idx=None, gv_coef=None, **kw)


def _h2_call(what: str, x: torch.Tensor, arg: Any, p: Any) -> object:
    """One of the h2 bench's calls on layer p (`arg`: a config, the prologue outputs, or
    None)."""
    from paro_kernels.triton import gemv_fma, prologue, route

    if what == "served":
        return route.linear(p, x)
    if what == "h2":
        cfg, kw = arg
        hi = _ROT16[id(p)] if kw.get("one") else p.rot_hi
        w = _blocks(p, rot_hi=hi)  # the sliced blocks prologue (no records), as measured
        return gemv_fma.gemv_h2_linear(w, x, None, cfg, kw.get("slice", 0), kw.get("pwarps", 0),
                                       kw.get("maxnreg", 0), bool(kw.get("pdl")),
                                       bool(kw.get("one")))  # fmt: skip
    if what == "gemv2 alone":
        (xr32, rs), _ = arg
        return gemv_fma.gemv2_w4a16(xr32, rs, p, torch.bfloat16)
    if what == "h2 alone":
        return gemv_fma.gemv_h2(arg[1], p, torch.bfloat16)
    return prologue.rotate_slices(x, p.rot_hi, p.rot_lo, G, paired=what == "prologue paired")


def h2(shapes: list[str], ms: list[int], reps: int, t0: float, budget: float,
       grid: list[dict[str, int]]) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: cuBLAS, int4pack, the op as served, the FMA GEMV path forced (sliced
    prologue + GEMV, no Givens-inside), the HFMA2 op (paired prologue + GEMV) at every `grid`
    config, and the two GEMVs alone on their prologue outputs (made once)."""
    from paro_kernels.triton import prologue

    dev = torch.device("cuda")
    out, not_run = [], []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = decode_preps(n, k, sizes, dev)
        _ROT16.clear()
        _ROT16.update({id(p): (p.rot_hi.float() + p.rot_lo.float()).half() for p in preps})
        for m in ms:
            if budget and time.monotonic() - t0 > budget:
                not_run.append(f"{name}@{m}")
                continue
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            out += peer_rows(name, m, n, k, x, reps)
            # rel: against the first (the FMA GEMV on the same blocks; the Givens-inside op as
            # served, o_proj, uses the tables' own random rotations)
            cands: dict[str, Callable[[Any], object]] = {
                "gemv2 (FMA, sliced prologue)": functools.partial(_gemv2, x=x, fused=False,
                                                                  pdl=False),
                "as-served": functools.partial(_h2_call, "served", x, None),
            }  # fmt: skip
            for kw in grid:
                cfg = _h2_cfg(name, m, kw)
                cands[f"h2 {kw}"] = functools.partial(_h2_call, "h2", x, (cfg, kw))
            ref = None
            for label, fn in cands.items():
                y = fn(preps[0]).float()  # type: ignore[attr-defined]
                ref = y if ref is None else ref
                us = time_or_nan([functools.partial(fn, p) for p in preps], reps)
                out.append(row(name, m, n, k, label, us, rel=float((y - ref).norm() / ref.norm())))
            p0 = preps[0]
            xrs = (prologue.rotate_slices(x, p0.rot_hi, p0.rot_lo, G),
                   prologue.rotate_slices(x, p0.rot_hi, p0.rot_lo, G, paired=True)[0])  # fmt: skip
            for label in ("gemv2 alone", "h2 alone", "prologue fp32", "prologue paired"):
                fns = [functools.partial(_h2_call, label, x, xrs, p) for p in preps]
                out.append(row(name, m, n, k, label, time_or_nan(fns, reps)))
            torch.cuda.empty_cache()
    return out, not_run


def h2_int5(shapes: list[str], ms: list[int], reps: int, t0: float,
            budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: int5 (I8 PG ZPE weights) as served (the matrix-unit GEMV, 16-bit
    activations), int5 on the HFMA2 GEMV (forced; `route.INT5_H2`), int4 as served."""
    from paro_kernels.triton import gemv_fma, route

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, p4, p5 in decode_cells(shapes, ms, t0, budget, not_run, int5=True):
        y0 = route.linear_a8(p5[0], x, None, "int8", "group", True).float()
        y1 = gemv_fma.gemv_h2_linear(_blocks(p5[0]), x).float()
        rel = float((y1 - y0).norm() / y0.norm())
        served = [functools.partial(route.linear_a8, p, x, None, "int8", "group", True)
                  for p in p5]  # fmt: skip
        forced = [functools.partial(gemv_fma.gemv_h2_linear, _blocks(p), x) for p in p5]
        out.append(row(name, m, n, k, "int5 as served", time_or_nan(served, reps)))
        out.append(row(name, m, n, k, "int5 h2", time_or_nan(forced, reps), rel=rel))
        int4 = [functools.partial(_h2_call, "served", x, None, p) for p in p4]
        out.append(row(name, m, n, k, "int4 as served", time_or_nan(int4, reps)))
    return out, not_run


# (`--h2 rot` / `coop`, the rotation inside the HFMA2 GEMV and its co-resident variant, were
# measured on the H200 on 2026-12-04, not served, and removed on 2026-12-05.)
# `--h2 gv`: the paired prologue from the Givens records
# (`prologue.rotate_givens_paired`) at 1, 2, 4 warps, against the sliced blocks prologue;
# `--h2 gvpdl`: the records prologue as served against 2 warps and with the
# GEMV launched dependent on it (PDL: the GEMV's L2 prefetch overlaps the prologue), and the
# blocks prologue with PDL.
H2_GV: list[dict[str, int]] = [dict(gv=1), dict(gv=2), dict(gv=4)]
H2_GVPDL: list[dict[str, int]] = [
    dict(gv=2), dict(gv=4, pdl=1), dict(gv=1, pdl=1), dict(pdl=1),
]  # fmt: skip
# `--h2 confirm`: the per-(bits, M) configs the H200 runs of 2026-12-04 picked
# (`gemv_fma.H2_BY_BITS_M`, as served) against the first HFMA2 config (H2_CONFIG: 8 programs an
# SM) and around them.
H2_CONFIRM: list[dict[str, int]] = [
    dict(programs_per_sm=8), dict(programs_per_sm=2), dict(programs_per_sm=4),
]  # fmt: skip
H2_CONFIRM5: list[dict[str, int]] = [
    dict(programs_per_sm=8), dict(block_n=256, num_warps=4, kw=16, programs_per_sm=4),
    dict(block_n=256, num_warps=4, kw=16, programs_per_sm=6),
    dict(block_n=256, num_warps=4, kw=16, programs_per_sm=8),
]  # fmt: skip
# `--h2 waves`: the HFMA2 GEMV at 158 registers (int4, Triton 3.6; 255 int5) holds 3 programs an
# SM (2 for int5), and its ~8-per-SM grid ran 1.7 waves (ncu, H200, 2026-12-04):
# grids of one wave (3 per SM), two (6), and narrower int5 tiles (fewer registers a thread).
H2_WAVES: list[dict[str, int]] = [
    dict(programs_per_sm=3), dict(programs_per_sm=6), dict(programs_per_sm=3, kw=8),
    dict(programs_per_sm=4, kw=8),
]  # fmt: skip
H2_WAVES5: list[dict[str, int]] = [
    dict(programs_per_sm=2), dict(programs_per_sm=4),
    dict(block_n=256, num_warps=4, kw=16, programs_per_sm=8),
    dict(block_n=256, num_warps=2, kw=16, programs_per_sm=8), dict(kw=8, programs_per_sm=4),
]  # fmt: skip


def _h2_op(name: str, m: int, x: torch.Tensor, p: Any,
           kw: dict[str, int] | None = None) -> object:  # fmt: skip
    """The HFMA2 op on layer p: the paired prologue (kw["gv"]: the records kernel at that many
    warps; kw["pdl"]: launched dependent) + GEMV at kw's config keys."""
    from paro_kernels.triton import gemv_fma

    kw = kw or {}
    launch = {a: v for a, v in kw.items() if a not in ("gv", "pdl")}
    cfg = _h2_cfg(name, m, launch) if launch else None  # None: the shipped config
    return gemv_fma.gemv_h2_linear(p, x, None, cfg,
                                   prologue="givens" if "gv" in kw else "slice",
                                   prologue_warps=kw.get("gv", 0),
                                   pdl=bool(kw.get("pdl")))  # fmt: skip


def h2_variants(shapes: list[str], ms: list[int], reps: int, t0: float, budget: float,
                grid4: list[dict[str, int]],
                grid5: list[dict[str, int]]) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: cuBLAS, int4pack, int4 as served, the HFMA2 op with its prologue
    (forced, the shipped config), then each `grid4` variant on int4 and `grid5` on int5 (the
    prologue op at that config), and the int4 HFMA2 GEMV alone (`rel`: against the prologue op
    of the same bits; each candidate's registers / spills as compiled)."""
    from paro_kernels.triton import gemv_fma_kernels, prologue

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, p4, p5 in decode_cells(shapes, ms, t0, budget, not_run, int5=True):
        out += peer_rows(name, m, n, k, x, reps)

        op = functools.partial(_h2_op, name, m, x)
        for bits, preps, grid in ((4, p4, grid4), (5, p5, grid5)):
            cands: dict[str, Callable[[Any], object]] = {f"int{bits} h2 prologue": op}
            if bits == 4:
                cands["int4 as served"] = functools.partial(_h2_call, "served", x, None)
            if bits == 5:
                cands["int5 as served"] = functools.partial(int5_served, x=x)
            for kw in grid:
                how = "givens" if "gv" in kw else "prologue"
                cands[f"int{bits} h2 {how} {kw}"] = functools.partial(op, kw=kw)
            out += cand_rows(name, m, n, k, cands, preps, reps,
                              gemv_fma_kernels.gemv_h2_kernel)  # fmt: skip
        xr = prologue.rotate_slices(x, p4[0].rot_hi, p4[0].rot_lo, G, paired=True)[0]
        fns = [functools.partial(_h2_call, "h2 alone", x, (None, xr), p) for p in p4]
        out.append(row(name, m, n, k, "int4 h2 alone", time_or_nan(fns, reps)))
        if grid4 in (H2_GV, H2_GVPDL):  # the two prologues alone
            sl: list[Callable[[], object]] = [
                functools.partial(prologue.rotate_slices, x, p.rot_hi, p.rot_lo, G,
                                  paired=True) for p in p4]  # fmt: skip
            out.append(row(name, m, n, k, "slice prologue alone", time_or_nan(sl, reps)))
            for w in (1, 2, 4):
                fns = [functools.partial(prologue.rotate_givens_paired, x, p.gv_idx,
                                         p.gv_coef, G, num_warps=w) for p in p4]  # fmt: skip
                out.append(
                    row(name, m, n, k, f"givens prologue alone w{w}", time_or_nan(fns, reps))
                )
    return out, not_run


def main(argv: list[str] | None = None) -> None:
    """Stage 1, stage 2; JSON written after each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="decode.json")
    ap.add_argument("--shapes", default="qkv,o_proj,gate_up,down,in_proj")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--stage1", default="qkv,gate_up")
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("--jobs", type=int, default=12, help="compile processes before stage 1")
    ap.add_argument("--ab", action="store_true", help="the forced paths per cell, stop")
    ap.add_argument("--h2", default="", help="the HFMA2 GEMV per cell at the configs of grid "
                    "(H2_GRID), around (H2_AROUND), pdl (H2_PDL); int5: its int5 variant "
                    "against int5 and int4 as served; waves, confirm; gv, gvpdl; the mma GEMV: "
                    "mma, mma5; gvrows (module doc)")  # fmt: skip
    argv = sys.argv[1:] if argv is None else argv  # recorded in the JSON
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.monotonic()
    ms = [int(v) for v in args.ms.split(",")]
    if args.h2:
        if args.h2 == "mma":
            rows, nr = h2_mma(args.shapes.split(","), ms, args.reps, t0, args.budget_s)
        elif args.h2 == "gvrows":
            rows, nr = h2_gvrows(args.shapes.split(","), ms, args.reps, t0, args.budget_s)
        elif args.h2 == "mma5":
            rows, nr = h2_mma5(args.shapes.split(","), ms, args.reps, t0, args.budget_s)
        elif args.h2 == "int5":
            rows, nr = h2_int5(args.shapes.split(","), ms, args.reps, t0, args.budget_s)
        elif args.h2 in ("waves", "confirm", "gv", "gvpdl"):
            g4, g5 = {"gv": (H2_GV, H2_GV), "gvpdl": (H2_GVPDL, H2_GVPDL),
                      "waves": (H2_WAVES, H2_WAVES5),
                      "confirm": (H2_CONFIRM, H2_CONFIRM5)}[args.h2]  # fmt: skip
            rows, nr = h2_variants(args.shapes.split(","), ms, args.reps, t0, args.budget_s,
                                   g4, g5)  # fmt: skip
        else:
            grid = {"grid": H2_GRID, "around": H2_AROUND, "pdl": H2_PDL}[args.h2]
            if args.jobs > 1:
                precompile_pool(_compile_h2, [(nm, m, kw) for nm in args.shapes.split(",")
                                  for m in ms for kw in grid], args.jobs)  # fmt: skip
            rows, nr = h2(args.shapes.split(","), ms, args.reps, t0, args.budget_s, grid)
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "triton": __import__("triton").__version__, "h2": rows, "not_run": nr,
                       "command": " ".join(["python -m benchmarks.kernels.decode",
                                            *(argv or [])])}, f, indent=1)  # fmt: skip
        return
    if args.ab:
        if args.jobs > 1:
            precompile_pool(_compile_one, [(nm, m, kw) for nm in args.shapes.split(",")
                              for m in (1, 16) for kw in AB_CFGS.values()], args.jobs)  # fmt: skip
        rows, nr = ab(args.shapes.split(","), ms, args.reps, t0, args.budget_s)
        with open(args.out, "w") as f:
            json.dump({"ab": rows, "not_run": nr, "command": " ".join(argv or [])}, f, indent=1)
        return
    meta: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                            "triton": __import__("triton").__version__,
                            "command": " ".join(["python -m benchmarks.kernels.decode",
                                                 *(argv or [])])}  # fmt: skip
    s1 = list(filter(None, args.stage1.split(",")))
    if args.jobs > 1:
        precompile_pool(_compile_one, [(nm, m, kw) for nm in s1 for m in ms for kw in GRID],
                          args.jobs)  # fmt: skip
    meta["stage1"] = stage1(s1, ms, args.reps)
    meta["top"] = top_configs(meta["stage1"], args.top) if meta["stage1"] else [{}]
    print("top configs", meta["top"], flush=True)
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)
    meta["stage2"], meta["not_run"] = stage2(args.shapes.split(","), ms, args.reps, meta["top"],
                                             t0, args.budget_s)  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
