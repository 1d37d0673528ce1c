"""Decode sweeps of the mma.sync GEMV (`gemv_mma`), run by `benchmarks.kernels.decode --h2
mma|mma5|gvrows`: its configs on int4 and int5 against the paths served before, and the Givens
records prologue in row blocks against the sliced blocks prologue (`decide_gvrows` reads the
gvrows run). Timing as `common.time_us`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.kernels.common import (
    G,
    cand_rows,
    decode_cells,
    int5_served,
    peer_rows,
    row,
    time_or_nan,
)
from benchmarks.kernels.decide_gvrows import BLOCKS, RECORDS


def _served(x: torch.Tensor, p: Any) -> object:
    """int4 as served: `route.linear`'s M-band dispatch on layer p."""
    from paro_kernels.triton import route

    return route.linear(p, x)


# `--h2 mma`: the mma.sync GEMV (`gemv_mma.gemv_mma_linear`: the records prologue at pair
# shift 0 + `gemv_mma`) at each config, against int4 as served, per cell. On the H200
# (2026-12-04) it swept 6-7 configs, then the one-wave split (`gemv_mma.one_wave_split`,
# shipped: no programs_per_sm) at 4 and 2 warps against 8 programs an SM, then register caps
# (`gemv_mma.MMA_CAP`: maxnreg, with the programs an SM the split counts on, fit), by
# activation tiles ({} = as shipped); the four-tile row (M = 17..32) ran on the H100
# (2026-12-05, results/bench-2026-12-05-h100-int4-mma4.json).
MMA_GRID: dict[int, list[dict[str, int]]] = {
    1: [{}, dict(maxnreg=48, fit=10)],
    2: [{}, dict(maxnreg=80, fit=6), dict(maxnreg=72, fit=7), dict(maxnreg=64, fit=8)],
    4: [{}, dict(maxnreg=128, fit=4), dict(maxnreg=0, fit=2)],
}


def h2_mma(shapes: list[str], ms: list[int], reps: int, t0: float,
           budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: cuBLAS, int4pack, int4 as served, the path served before (forced),
    the mma op at each MMA_GRID config (`rel` against as served: both on the layer's records at
    M <= 2 and from the mma GEMV's band on; registers as compiled), then the
    mma GEMV alone (MMA_CONFIG), the HFMA2 GEMV alone (M <= 2) and the records prologue alone."""
    from paro_kernels.triton import gemv_fma, gemv_mma, gemv_mma_kernels, prologue

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, p4, _ in decode_cells(shapes, ms, t0, budget, not_run):
        out += peer_rows(name, m, n, k, x, reps)
        cands: dict[str, Callable[[Any], object]] = {
            "int4 as served": functools.partial(_served, x),
            # the path that served before the mma GEMV, forced (M = 3..4: the FMA GEMV's
            # 4-row form then, removed on 2026-12-05; the tile kernels here)
            "int4 before": functools.partial(_before, x, _path_before(m)),
        }
        for kw in MMA_GRID[gemv_mma.mma_tiles(m)]:
            cands[f"int4 mma {kw}"] = functools.partial(_mma_op, x, _mma_cfg(m, n, k, p4, kw),
                                                        maxnreg=kw.get("maxnreg", 0))  # fmt: skip
        # the blocks prologue (sliced, paired, shift 0) instead of the records
        cands[BLOCKS] = functools.partial(_mma_op, x, None, blocks=True)
        out += cand_rows(name, m, n, k, cands, p4, reps, gemv_mma_kernels.gemv_mma_kernel)
        p0 = p4[0]
        out.append(_mma_alone(name, m, n, k, x, p4, reps))
        if m <= 2:
            xh = prologue.rotate_givens_paired(x, p0.gv_idx, p0.gv_coef, G)
            fns = [functools.partial(gemv_fma.gemv_h2, xh, p, torch.bfloat16) for p in p4]
            out.append(row(name, m, n, k, "int4 h2 alone", time_or_nan(fns, reps)))
        fns = [functools.partial(prologue.rotate_givens_paired, x, p.gv_idx, p.gv_coef, G,
                                 0) for p in p4]  # fmt: skip
        out.append(row(name, m, n, k, "givens prologue alone", time_or_nan(fns, reps)))
    return out, not_run


# `--h2 mma5`: int5 (I8 PG ZPE) on the mma GEMV (`gemv_mma` on a bits-5 layer) at
# each config, against int5 as served and the path that served int5 before (the HFMA2 op at
# M <= 2, the matrix-unit GEMV to 16), and int4 as served (the int5 / int4 goal: 1.24x).
MMA5_GRID: dict[int, list[dict[str, int]]] = {
    1: [{}, dict(maxnreg=64, fit=8), dict(maxnreg=56, fit=9)],
    2: [{}, dict(maxnreg=80, fit=6), dict(maxnreg=72, fit=7)],
    4: [{}, dict(maxnreg=128, fit=4)],
}


def _int5_before(x: torch.Tensor, p: Any) -> object:
    """The path that served int5 before the mma GEMV, forced: the HFMA2 op at M <= 2,
    else the matrix-unit GEMV (both on the layer's records)."""
    from paro_kernels.triton import gemv_dot, gemv_fma

    if x.shape[0] <= 2:
        return gemv_fma.gemv_h2_linear(p, x)
    return gemv_dot.gemv3_linear(p, x)


def h2_mma5(shapes: list[str], ms: list[int], reps: int, t0: float,
            budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: int4 as served, int5 as served, int5 before (forced), the int5 mma
    op at each MMA5_GRID config (`rel` against int5 as served; registers as compiled), then the
    int5 mma GEMV alone (the shipped config)."""
    from paro_kernels.triton import gemv_mma, gemv_mma_kernels

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, p4, p5 in decode_cells(shapes, ms, t0, budget, not_run, int5=True):
        fns = [functools.partial(_served, x, p) for p in p4]
        out.append(row(name, m, n, k, "int4 as served", time_or_nan(fns, reps)))
        cands: dict[str, Callable[[Any], object]] = {
            "int5 as served": functools.partial(int5_served, x=x),
        }
        if m <= gemv_mma.MMA_MAX_M:  # past 16 rows that GEMV never served int5
            cands["int5 before"] = functools.partial(_int5_before, x)
        for kw in MMA5_GRID[gemv_mma.mma_tiles(m)]:
            cands[f"int5 mma {kw}"] = functools.partial(_mma_op, x,
                                                        _mma_cfg(m, n, k, p4, kw, 5),
                                                        maxnreg=kw.get("maxnreg", 0))  # fmt: skip
        out += cand_rows(name, m, n, k, cands, p5, reps, gemv_mma_kernels.gemv_mma_kernel)
        xr = _mma_input(x, p5[0])
        fns = [functools.partial(gemv_mma.gemv_mma, xr, p, torch.bfloat16) for p in p5]
        out.append(row(name, m, n, k, "int5 mma alone", time_or_nan(fns, reps)))
    return out, not_run


# `--h2 gvrows`: the records prologue in row blocks
# (`prologue.GIVENS_ROWS`: rows a program; 0 = all M in one, as before) under the int4 mma op
# and alone, against the sliced blocks prologue, per cell.
GV_ROWS = (0, 4, 8, 16)


def _with_rows(rows: int, fn: Callable[[Any], object], p: Any) -> object:
    """fn(p) with the records prologue at `rows` rows a program (restored after: a graph
    capture runs this Python once, with the setting in force)."""
    from paro_kernels.triton import prologue

    keep, prologue.GIVENS_ROWS = prologue.GIVENS_ROWS, rows
    try:
        return fn(p)
    finally:
        prologue.GIVENS_ROWS = keep


def h2_gvrows(shapes: list[str], ms: list[int], reps: int, t0: float,
              budget: float) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """Per cell, same run: cuBLAS, int4pack, int4 as served, the int4 mma op (shipped config)
    on the records prologue at each GV_ROWS and on the blocks prologue (`rel` against as
    served), then each prologue alone and the mma GEMV alone."""
    from paro_kernels.triton import gemv_mma_kernels, prologue

    out: list[dict[str, Any]] = []
    not_run: list[str] = []
    for name, n, k, m, x, p4, _ in decode_cells(shapes, ms, t0, budget, not_run):
        out += peer_rows(name, m, n, k, x, reps)
        cands: dict[str, Callable[[Any], object]] = {
            "int4 as served": functools.partial(_served, x),
        }
        for r in GV_ROWS:
            cands[RECORDS.format(r)] = functools.partial(
                _with_rows, r, functools.partial(_mma_op, x, None)
            )
        cands[BLOCKS] = functools.partial(_mma_op, x, None, blocks=True)
        out += cand_rows(name, m, n, k, cands, p4, reps, gemv_mma_kernels.gemv_mma_kernel)
        for r in GV_ROWS:
            fns = [functools.partial(prologue.rotate_givens_paired, x, p.gv_idx, p.gv_coef, G,
                                     0, rows=r) for p in p4]  # fmt: skip
            out.append(
                row(name, m, n, k, f"records prologue alone rows {r}", time_or_nan(fns, reps))
            )
        fns = [functools.partial(prologue.rotate_slices, x, p.rot_hi, p.rot_lo, G,
                                 paired=True, pair_shift=0) for p in p4]  # fmt: skip
        out.append(row(name, m, n, k, "blocks prologue alone", time_or_nan(fns, reps)))
        out.append(_mma_alone(name, m, n, k, x, p4, reps))
    return out, not_run


def _mma_alone(name: str, m: int, n: int, k: int, x: torch.Tensor, p4: list[Any],
               reps: int) -> dict[str, Any]:  # fmt: skip
    """The int4 mma GEMV alone (shipped config) on the records prologue's output, made once."""
    from paro_kernels.triton import gemv_mma

    xr = _mma_input(x, p4[0])
    fns = [functools.partial(gemv_mma.gemv_mma, xr, p, torch.bfloat16) for p in p4]
    return row(name, m, n, k, "int4 mma alone", time_or_nan(fns, reps))


def _mma_input(x: torch.Tensor, p: Any) -> torch.Tensor:
    """The mma GEMV's input on layer p: the records prologue's output, past the 32 rows it
    takes the sliced blocks prologue's."""
    from paro_kernels.triton import gemv_mma, prologue

    if x.shape[0] <= gemv_mma.MMA_TILE_MAX_M:
        return prologue.rotate_givens_paired(x, p.gv_idx, p.gv_coef, G, 0)
    return prologue.rotate_slices(x, p.rot_hi, p.rot_lo, G, paired=True, pair_shift=0)[0]


def _path_before(m: int) -> str:
    """The int4 path that served M rows before the mma GEMV: the FMA GEMV, the tile kernels
    (M <= 8), the matrix-unit GEMV (to 16); past the mma GEMV's rows the tile kernels that
    serve them now (the mma GEMV's four tiles against them)."""
    from paro_kernels.triton import gemv_fma, gemv_mma

    if m <= gemv_fma.GEMV2_MAX_M:
        return "gemv"
    if m <= 8 or m > gemv_mma.MMA_MAX_M:
        return "mma"
    return "gemv3"


def _before(x: torch.Tensor, path: str, p: Any) -> object:
    """`route.linear` on layer p with `path` forced (with the layer's records)."""
    from paro_kernels.triton import route

    return route.linear(p, x, path=path)


def _mma_cfg(m: int, n: int, k: int, preps: list[Any], kw: dict[str, int], bits: int = 4) -> Any:
    """The mma GEMV's config at a grid entry (its launch keys dropped; {}: as shipped)."""
    from paro_kernels.triton import gemv_mma

    if not kw:
        return None
    cfg = {a: v for a, v in kw.items() if a != "maxnreg"}
    return gemv_mma.mma_config(m, n, k, G, preps[0].bounds, 132, bits, **cfg)


def _mma_op(x: torch.Tensor, cfg: Any, p: Any, blocks: bool = False,
            maxnreg: int | None = None) -> object:  # fmt: skip
    """The mma op on layer p at config cfg (None: the shipped one) and register cap (None: the
    shipped one): the records prologue, or with `blocks` (and past the records' 32 rows) the
    sliced blocks one."""
    from paro_kernels.triton import gemv_mma

    blocks = blocks or x.shape[0] > gemv_mma.MMA_TILE_MAX_M
    return gemv_mma.gemv_mma_linear(p, x, None, cfg, "slice" if blocks else "givens", maxnreg)
