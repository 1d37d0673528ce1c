"""Host side of the mma.sync decode GEMV (`gemv_mma_kernels.gemv_mma_kernel`, NVIDIA): up to
MMA_CHUNK_MAX_M rows, served where `route`'s bands say, the records or sliced-blocks prologue
at pair shift 0, fp32 accumulation on the matrix unit.

Shape contract: that of `route.w4a16_linear`; G a multiple of 32, partition bounds on the
32-column grid (`mma_ok`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .._contract import require
from . import gemv_dot, gemv_fma, launch
from .gemv_mma_kernels import gemv_mma_kernel
from .prologue import rotate_givens_paired, rotate_slices
from .weights import Prepared

# H200 2026-12-04: the mma.sync GEMV (`gemv_mma_kernels.gemv_mma_kernel`, NVIDIA, M <= 16; int4, and
# int5 from 2026-12-04) on the paired prologue's output at pair shift 0 (fp32
# accumulation: no range scaling). One column quad a gid (4 lanes): block_n = 32 num_warps
# columns (num_warps follows block_n). Config (H200 2026-12-04,
# docs/notebook/kernels-2026-11-29-to-12-06.md, run 2, the op on every 27B shape at M = 1, 2, 4, 8,
# same run): 128 columns (4 warps), ~8 programs an SM (56 registers: 9 fit) best or within 4% on 15
# of 20 cells; 64 columns / 2 warps / 16 an SM within 1 us everywhere (o_proj M = 1 9.59 us against
# 10.16, in_proj M = 2 16.03 / 15.09); 12 an SM 1.0-4.3 us slower on gate_up / down. The split:
# below.
MMA_MAX_M = 16  # the 2026-12-04 rows, 8 a tile: 2 tiles past M = 8 (4 past 16: MMA_TILE_MAX_M)


MMA_CONFIG = dict(block_n=128)


# H200 2026-12-04: the split from the grid's one wave, not a programs-per-SM target: the
# largest split-K whose programs all fit the SMs' resident slots at once (SMs x MMA_FIT:
# programs of 4 warps an SM that the registers allow, by (activation tiles, bits); sm_90,
# Triton 3.6 and 3.9: 56 / 71 / 96 / 97 registers, 64 for int5 at M = 1;
# `test_aot_gemv_mma_sm90` holds the table to the compiled counts). A grid past the slots ran a
# partial second wave: H200 2026-12-04 (docs/notebook/kernels-2026-11-29-to-12-06.md, run 1, same
# run, us): int5 gate_up M = 1..8 at 816 programs (one wave of 7 an SM) 29.0-31.8 against 1088 (1.18
# waves) 33.0-35.7; int4 past M = 8 (5 fit) at 5 an SM: qkv 20.5 / 22.4 against 23.5 / 25.5 (1.19
# waves), in_proj 21.0 / 22.5 against 24.9 / 27.2, o_proj 14.6 / 16.1 against 16.8 / 19.3,
# but gate_up 45.0 / 47.0 (680 programs: 20 in a second wave, 8 groups each) against 35.9 /
# 37.4 (1088).
MMA_FIT = {(1, 4): 9, (1, 5): 7, (2, 4): 5, (2, 5): 4, (4, 4): 3, (4, 5): 3}


# (four tiles, H100 2026-12-05: 168 / 166 registers uncapped, sm_90 Triton 3.9; 128 costs 16 /
# 120 bytes of stack for a fourth program an SM: the bench's MMA_GRID[4] times both.)
# H200 2026-12-04: a register cap (ptxas maxnreg) by (activation tiles, bits), with the programs
# an SM it buys for the split (absent: uncapped, MMA_FIT), as the MXFP4 mma GEMV's cap
# (`mx_gemv_mma.MMA_BANDS`). H200 2026-12-04 (docs/notebook/kernels-2026-11-29-to-12-06.md, run 1,
# same run, us, as shipped -> capped): int5 two tiles at 80 registers, 6 an SM (Triton 3.6: 80 + 88
# bytes of stack, from 100): gate_up M = 16 45.9 -> 41.4, qkv / down / in_proj within 1% (25.2 /
# 27.3 / 26.2). Not capped: int4 two tiles (80 / 72 / 64: equal or up to 1.29x slower), int4 and
# int5 one tile (int5 at 64 / 56: within 3% at 64, 1.1x slower at 56).
MMA_CAP: dict[tuple[int, int], tuple[int, int]] = {(2, 5): (80, 6)}


# The mma GEMV's prologue: the Givens records (in GIVENS_ROWS-row programs) to the records' 32
# rows on every layer, the sliced blocks past them (MMA_BLOCKS_MIN_M on layers of at most
# MMA_BLOCKS_MAX_WEIGHTS weights, o_proj; MMA_BLOCKS_ALL_MIN_M on the rest). H100 2026-12-06,
# `decide_gvrows` on benchmarks/results/bench-2026-12-06-h100-gvrows.json (same run, the op,
# records in 4-row programs / blocks in 16-row ones, us): M = 32 qkv + gate_up + down + in_proj
# 137.0 / 141.6, o_proj 15.7 / 16.2; M = 16 and 24 the records on every shape (o_proj 12.4 / 13.1,
# 14.4 / 15.1). Before, one records program for all rows lost to the blocks from 9 rows on
# o_proj (H200 2026-12-04) and from 17 on the rest (H100 2026-12-05,
# bench-2026-12-05-h100-int4-mma4.json; re-derived in tests/kernels/test_decide_gvrows.py).
MMA_BLOCKS_MIN_M = 33


MMA_BLOCKS_MAX_WEIGHTS = gemv_dot.GEMV3_SMALL_WEIGHTS


MMA_BLOCKS_ALL_MIN_M = 33


def mma_blocks(m: int, weights: int) -> bool:
    """Whether the mma GEMV's paired prologue at M rows of a layer of `weights` weights is the
    sliced blocks (else the Givens records, where the layer has them)."""
    small = weights <= MMA_BLOCKS_MAX_WEIGHTS
    return m >= MMA_BLOCKS_ALL_MIN_M or (m >= MMA_BLOCKS_MIN_M and small)


# H100 2026-12-05: four tiles (M = 17..MMA_TILE_MAX_M: a program's words unpacked once for
# 32 rows) built; the dispatch serves them only where measured (route.MMA_GEMV_MAX_M).
MMA_TILE_MAX_M = 32
# Past 32 rows, 32-row chunks of four tiles on the grid's third axis (`gemv_mma_kernel`'s
# CHUNKED), all in one wave with the split sized for them: a weight word leaves DRAM about once
# for all chunks. The dispatch serves them only where measured (route.MMA_GEMV_MAX_M).
MMA_CHUNK_MAX_M = 64


def mma_tiles(m: int) -> int:
    """The mma GEMV's 8-row activation tiles at M rows (a chunk's past 32 rows): 1, 2 or 4."""
    return 1 if m <= 8 else 2 if m <= 16 else 4


def mma_chunks(m: int) -> int:
    """The mma GEMV's 32-row chunks at M rows (1 up to MMA_TILE_MAX_M)."""
    return -(-m // MMA_TILE_MAX_M)


def one_wave_split(tiles: int, ngroups: int, slots: int) -> int:
    """The split-K of `tiles` column tiles over `ngroups` groups: the most splits whose programs
    fit `slots` at once (1 where the tiles alone do not), trimmed to the splits that get
    groups."""
    split = max(1, min(ngroups, slots // tiles))
    per = -(-ngroups // split)
    return -(-ngroups // per)


def mma_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
               bits: int = 4, **kw: int) -> launch.GemvConfig:  # fmt: skip
    """The mma GEMV's tile and split for an N x K layer at M (MMA_CONFIG, overridden by kw:
    block_n, and programs_per_sm for the 2026-12-04 split toward that many programs an SM;
    without it `one_wave_split` at `mma_fit` programs an SM of `bits`, or kw fit)."""
    c = {**MMA_CONFIG, **kw}
    require(c["block_n"] in (32, 64, 128, 256, 512), "block_n", "32 x (1, 2, 4, 8 or 16)",
            c["block_n"])  # fmt: skip
    require(mma_ok(bounds), "partition bounds", "multiples of 32 (an mma's 32 columns)", bounds)
    cfg = gemv_fma.gemv2_config(m, n, k, g, bounds, sms, num_warps=c["block_n"] // 32,
                                 block_n=c["block_n"],
                                 programs_per_sm=c.get("programs_per_sm", 8))  # fmt: skip
    # a column a thread (narrower tiles at partition bounds: fewer warps)
    cfg = replace(cfg, num_warps=cfg.block_n // 32)
    if "programs_per_sm" in c:
        return cfg
    fit = c.get("fit") or mma_fit(m, bits)
    fit = fit * 128 // cfg.block_n  # registers a program scale with T
    programs = -(-n // cfg.block_n) * mma_chunks(m)  # a split's programs: tiles x chunks
    return replace(cfg, split_k=one_wave_split(programs, k // g, sms * fit))


def mma_fit(m: int, bits: int = 4) -> int:
    """Programs of 4 warps an SM that the mma GEMV's registers allow at M rows (capped where
    MMA_CAP caps them)."""
    cap = MMA_CAP.get((mma_tiles(m), bits))
    return cap[1] if cap else MMA_FIT[(mma_tiles(m), bits)]


def mma_maxnreg(m: int, bits: int = 4) -> int:
    """The mma GEMV's register cap at M rows (0: none)."""
    cap = MMA_CAP.get((mma_tiles(m), bits))
    return cap[0] if cap else 0


def mma_ok(bounds: tuple[int, ...]) -> bool:
    """Whether the mma GEMV takes a layer with these partition bounds: every mma's 32 columns
    (8 column quads) read one partition's activations."""
    return all(b % 32 == 0 for b in bounds)


def gemv_mma(
    xr: torch.Tensor,
    w: Prepared,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    maxnreg: int | None = None,
) -> torch.Tensor:
    """The mma GEMV on the paired prologue output xr [P, M <= 64, K] fp16 (pair shift 0)
    -> y [M, N] out_dtype; `w.qweight_hi` [K/32, N]: int5 (I8 PG ZPE) weights' fifth bits;
    `maxnreg`: a register cap (0: none; default `mma_maxnreg`)."""

    qweight, scales, zeros = w.qweight, w.scales, w.zeros
    bounds, group_size = w.bounds, w.group_size
    qweight_hi = w.qweight_hi
    _, m, k = xr.shape
    n = qweight.shape[1]
    g = group_size
    require(m <= MMA_CHUNK_MAX_M, "x rows", f"<= {MMA_CHUNK_MAX_M} for the mma GEMV", m)
    require(g % 32 == 0 and k % g == 0, "group_size", "a multiple of 32 dividing K", (g, k))
    require(xr.dtype == torch.float16, "xr", "fp16 pairs", xr.dtype)
    bits = 4 if qweight_hi is None else 5
    cfg = config or mma_config(m, n, k, g, bounds, launch.sm_count(xr.device), bits)
    t = cfg.block_n
    require(t == 32 * cfg.num_warps, "config", "block_n = 32 num_warps (a column a thread)",
            cfg)  # fmt: skip
    if qweight_hi is not None:
        require(tuple(qweight_hi.shape) == (k // 32, n) and qweight_hi.dtype == torch.int32,
                "qweight_hi", f"int32 [{k // 32}, {n}] (K / 32 fifth-bit words a column)",
                (tuple(qweight_hi.shape), qweight_hi.dtype))  # fmt: skip
    chunks = mma_chunks(m)
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, cfg, out_dtype, xr.device, chunks)
    b = (*bounds, n, n)[:2]
    asm = not launch.is_hip() and not launch.interpreted()
    cap = mma_maxnreg(m, bits) if maxnreg is None else maxnreg
    gemv_mma_kernel[(tiles, cfg.split_k, chunks)](
        xr.view(torch.int32), qweight, scales, zeros, bias if bias is not None else scales,
        ws, cnt, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=g, T=t, SPLIT_K=cfg.split_k, ASM=asm, NT=mma_tiles(m),
        HI=qweight_hi is not None, qh_ptr=qweight_hi, CHUNKED=chunks > 1,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"maxnreg": cap} if cap and asm else {}),
    )  # fmt: skip
    return out


def gemv_mma_linear(
    w: Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: launch.GemvConfig | None = None,
    prologue: str = "",
    maxnreg: int | None = None,
) -> torch.Tensor:
    """The decode linear on the mma GEMV: the paired prologue at pair shift 0 + `gemv_mma`,
    y [M, N] in x.dtype; `w.qweight_hi`: int5. `prologue`: "givens", the records kernel on
    `w.gv_idx` / `w.gv_coef` (the blocks where `w` has no records), or "slice", the sliced
    blocks; default the records, but the blocks where `mma_blocks` says.
    `maxnreg`: `gemv_mma`'s."""
    require(prologue in ("", "givens", "slice"), "prologue", ("givens", "slice"), prologue)
    gv_idx, gv_coef = w.gv_idx, w.gv_coef
    m, k = x.shape
    kind = prologue or ("slice" if mma_blocks(m, w.qweight.shape[1] * k) else "givens")
    if gv_idx is not None and gv_coef is not None and kind == "givens":
        xr = rotate_givens_paired(x, gv_idx, gv_coef, w.group_size, 0)
    else:
        xr, _ = rotate_slices(x, w.rot_hi, w.rot_lo, w.group_size, paired=True, pair_shift=0)
    return gemv_mma(xr, w, x.dtype, bias, config, maxnreg)
