"""Host side of the MXFP4 mma.sync decode GEMV (`mx_gemv_mma_kernels.mx_gemv_mma_kernel`, NVIDIA,
M <= 32): configs by M band, the launch and the M-row chunking beyond it.

Shape contract: that of `mx_gemv.mx_gemv`, with a [P, M <= 32, K] contiguous: paired fp16 (the
MXFP4-PARO prologue's), or plain bf16 / fp16 rows (NVFP4 -> MXFP4: x itself); N a multiple of 4,
plane bounds multiples of 32.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from .._contract import require
from . import launch, mx_gemv
from .gemv_mma import one_wave_split
from .mx_gemm import check_gemm
from .mx_gemv_mma_kernels import ACT_BF16, ACT_F16, ACT_PAIRED, mx_gemv_mma_kernel, pair_fp16_kernel
from .mx_repack import MxWeight, _align, _block_n

# H200 2026-12-04: the mma.sync GEMV (`mx_gemv_mma_kernels.mx_gemv_mma_kernel`, NVIDIA, M <= 16;
# M <= 32 since 2026-12-05, H100)
# on paired fp16 activations (the MXFP4-PARO prologue's `rotate_slices(paired=True)` output),
# or on x itself (NVFP4 -> MXFP4), paired in the kernel. Config as the int4 mma GEMV's: 128
# columns (4 warps, a column quad a thread), the split from one wave of the programs an SM
# (MMA_BANDS, below; sm_90 registers held by `test_aot_mx_gemv_mma_sm90`).
MMA = True


MMA_MIN_M = 1


# H100 2026-12-05: to M = 32 on four activation tiles (MMA_BANDS). H100
# (docs/notebook/kernels-2026-11-29-to-12-06.md,
# benchmarks/results/bench-2026-12-05-h100-mma4.json, same run, us, the 16-row
# chunks as served / four tiles forced at M = 24): MXFP4 qkv
# 32.7 / 22.3, gate_up 67.1 / 52.5, down 38.2 / 26.1, o_proj 20.0 / 14.0, in_proj 37.0 / 25.3;
# MXFP4-PARO 42.3 / 35.4, 73.8 / 57.9, 46.6 / 34.3, 26.6 / 18.4, 45.9 / 35.6 (M = 32 alike:
# the four tiles 1.19-1.50x the chunks on every cell; the 8-bit route 34-153 there).
MMA_MAX_M = 32


MMA_BLOCK_N = 128


# The bands' (unroll, programs an SM for the split, register cap) by their last M. H200
# (docs/notebook/kernels-2026-11-29-to-12-06.md, run 3: gate_up, qkv, down at M = 1
# / 4 / 16, same run, us): M = 1 one block pair an iteration at 10 an SM (48 registers) 26.2 / 12.3
# / 14.9 against two at 6 an SM (72-76) 28.2 / 13.6 / 15.9; M = 2..8 two pairs, 6 an SM (M = 4: one
# pair at 10 an SM within 4% either way); two tiles (M = 9..16) capped at 72 registers, 7 an SM:
# 34.0 / 16.7 / 19.0 against 46.0 / 18.0 / 23.1 uncapped at 6 (64 registers there on Triton 3.6,
# ncu) and 42.9 / 17.9 / 21.3 uncapped at 7. sm_90 register counts (Triton 3.9,
# `test_aot_mx_gemv_mma_sm90`): 48 / 72-76 / 72-77, or 72 capped (16 bytes of stack there).
# H100 2026-12-05: four tiles (M = 17..MMA_TILE_MAX_M: a program's words unpacked once for 32
# rows, 32 mmas a block pair) at 4 programs an SM under a 128-register cap (sm_90, Triton 3.9:
# 127 uncapped on paired fp16, 130 on bf16 rows, which would fit 3; capped 8 bytes of stack).
# Same run, the kernel alone at M = 24 / 32 on bf16 rows: this band best or within 3% on every
# shape but gate_up (8 an SM at the same cap 52.4 / 55.0 against 54.2 / 56.3); uncapped at 3 or 4
# an SM, or capped at 112 / 96 for 5 / 6, 1.02-1.36x slower.
MMA_BANDS = {1: (1, 10, 0), 8: (2, 6, 0), 16: (1, 7, 72), 32: (1, 4, 128)}


MMA_TILE_MAX_M = 32  # the kernel's rows: four 8-row activation tiles


def mma_tiles(m: int) -> int:
    """The MXFP4 mma GEMV's 8-row activation tiles at M rows: 1, 2 or 4."""
    return 1 if m <= 8 else 2 if m <= 16 else 4


def mma_chunks(m: int) -> int:
    """The MXFP4 mma GEMV's 32-row chunks at M rows (grid axis 2; 1 up to MMA_TILE_MAX_M)."""
    return -(-m // MMA_TILE_MAX_M)


def mma_band(m: int) -> tuple[int, int, int]:
    """(unroll, programs an SM, register cap or 0) of the mma GEMV at M rows."""
    return next(v for top, v in sorted(MMA_BANDS.items()) if m <= top)


def mma_ok(m: int, n: int, bounds: tuple[int, ...], hip: bool) -> bool:
    """Whether the mma GEMV serves an M-row call of an N-column layer on this platform: NVIDIA
    compiled code (the interpreter keeps the other kernels; its own test runs this one), M in
    [MMA_MIN_M, MMA_MAX_M], N a multiple of 4 (the scales' 4-byte loads) and every plane
    boundary a multiple of 32 (an mma's 32 columns read one plane's activations)."""
    return (MMA and not hip and not launch.interpreted() and MMA_MIN_M <= m <= MMA_MAX_M
            and n % 4 == 0 and all(b % 32 == 0 for b in bounds))  # fmt: skip


# H100 2026-12-05: past MMA_MAX_M rows, to MMA_CHUNK_MAX_M, the mma GEMV in MMA_MAX_M-row
# chunks, each chunk its own call (`mx_route.mx_linear`, path "chunks"; the last chunk takes the
# path of its own rows). Built at 16-row chunks from the parts' times (the MXFP4 GEMM's 64-row
# tiles and the 8-bit route served M = 17..32 about 4x slower a call than the mma GEMV at 16);
# timed on 2026-12-05 (the H100 run above, us, at M = 24: the chunks as served / the
# 8-bit route forced): MXFP4 qkv 32.7 / 67.7, gate_up 67.1 / 141.7, down 38.2 / 87.2, o_proj
# 20.0 / 34.9, in_proj 37.0 / 72.8; MXFP4-PARO 42.3 / 103.5, 73.8 / 152.8, 46.6 / 90.8, 26.6 /
# 37.2, 45.9 / 91.3. With the four tiles the chunks are 32 rows: to M = 64 two calls cost, from
# the four tiles' times, 0.40-0.86x the 8-bit route's (MXFP4-PARO o_proj at 64: 39.1 / 38.4,
# a tie); the composed call at 33..64 is timed by the same run's second step.
# Decode numerics: the chunks take 16-bit activations, as the mma GEMV does.
MMA_CHUNK_MAX_M = 64
# H100 2026-12-06: the chunks in one launch (`mx_gemv_mma_kernel`'s CHUNKED: all in one wave, a
# weight word from DRAM about once for both) instead of a call each. H100
# (benchmarks/results/bench-2026-12-06-h100-mx-chunks.json, `mx_decode --mma`, same run, us, a
# call each / one launch, M = 48 and 64): MXFP4 qkv 40.6 / 39.2 and 46.5 / 40.8, o_proj 26.1 /
# 20.8 and 29.8 / 22.0, gate_up 88.9 / 95.0 and 109.0 / 98.5, down 46.8 / 43.8 and 53.6 / 45.2,
# in_proj 46.2 / 39.3 and 51.4 / 41.0; MXFP4-PARO 1.11-1.31x on every shape but gate_up at 48
# (99.3 / 98.4).
CHUNKS_ONE_LAUNCH = True


def chunks_ok(m: int, n: int, bounds: tuple[int, ...], hip: bool) -> bool:
    """Whether an M-row call is served in MMA_MAX_M-row chunks on the mma GEMV: M past the mma
    GEMV's rows, to MMA_CHUNK_MAX_M, where the mma GEMV takes the layer's full chunks."""
    return MMA_MAX_M < m <= MMA_CHUNK_MAX_M and mma_ok(MMA_MAX_M, n, bounds, hip)


def mma_config(m: int, n: int, k: int, bounds: tuple[int, ...], sms: int, block_n: int = 0,
               split_k: int = 0, unroll: int = 0, fit: int = 0) -> mx_gemv.GemvConfig:  # fmt: skip
    """The mma GEMV's tile (block_n columns = 32 num_warps threads, a column quad for each gid's
    4 lanes; narrower at plane boundaries) and split (`gemv_mma.one_wave_split` over steps
    of `unroll` block pairs; `fit`: programs an SM for it; defaults: MMA_BANDS)."""

    require(1 <= m <= MMA_CHUNK_MAX_M, "x rows", f"1..{MMA_CHUNK_MAX_M} for the MXFP4 mma GEMV",
            m)  # fmt: skip
    bn = _block_n(block_n or MMA_BLOCK_N, _align(bounds))
    require(bn in (32, 64, 128, 256, 512), "block_n", "32 x (1, 2, 4, 8 or 16)", bn)
    nt = mma_tiles(m)
    band_u, band_fit, _ = mma_band(min(m, MMA_TILE_MAX_M))
    u = unroll or band_u
    tiles = -(-n // bn) * mma_chunks(m)  # a split's programs: column tiles x row chunks
    pairs = -(-k // 64)
    steps = -(-pairs // u)
    slots = (fit or band_fit) * 128 // bn
    split = split_k or one_wave_split(tiles, steps, sms * slots)
    return mx_gemv.GemvConfig(nt * 8, bn, split, bn // 32, u)


def pair_fp16(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] bf16 / fp16 -> [1, M, K] fp16 (saturated) in the paired layout the mma GEMVs
    read: position 8 r + 2 j + h holds channel 8 r + j + 4 h."""

    m, k = x.shape
    require(k % 8 == 0 and x.stride(1) == 1, "x", "K a multiple of 8, unit stride", x.shape)
    out = torch.empty(1, m, k, dtype=torch.float16, device=x.device)
    pair_fp16_kernel[(m, -(-k // 1024))](x, out, k, x.stride(0), BLOCK=1024, num_warps=4)
    return out


def mx_gemv_mma(
    a: torch.Tensor,
    w: MxWeight,
    bounds: tuple[int, ...],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: mx_gemv.GemvConfig | None = None,
    paired: bool = True,
    maxnreg: int | None = None,
) -> torch.Tensor:
    """y [M, N] = A_p W^T (+ bias) per plane p for M <= 64 rows (past 32 in 32-row chunks, one
    launch) of activations a [P, M, K]:
    paired fp16 (`pair_fp16`, or the paired prologue at pair shift 0), or with paired=False
    plain bf16 / fp16 rows, paired in the kernel. `maxnreg`: a register cap (0: none; default:
    the band's, `mma_band`)."""

    check_gemm(a, None, w, bounds, bias)
    dts = (torch.float16,) if paired else (torch.bfloat16, torch.float16)
    require(a.dtype in dts and a.is_contiguous(), "a",
            "contiguous paired fp16" if paired else "contiguous bf16 / fp16 rows",
            (a.dtype, a.stride()))  # fmt: skip
    act = ACT_PAIRED if paired else ACT_BF16 if a.dtype == torch.bfloat16 else ACT_F16
    _, m, k = a.shape
    if maxnreg is None:
        maxnreg = mma_band(min(m, MMA_TILE_MAX_M))[2]
    n = w.n
    require(n % 4 == 0, "N", "a multiple of 4 for the mma GEMV", n)
    require(all(b % 32 == 0 for b in bounds), "bounds", "multiples of 32", bounds)
    cfg = config or mma_config(m, n, k, bounds, launch.sm_count(a.device))
    chunks = mma_chunks(m)
    require(min(m, MMA_TILE_MAX_M) <= cfg.block_m, "x rows", f"<= {cfg.block_m} a chunk for "
            "this config", m)  # fmt: skip
    asm = not launch.is_hip() and not launch.interpreted()
    # the int4 GEMVs' buffers: the split-K workspace and tickets zero on entry, left zero
    out, ws, cnt, tiles = launch.gemv_buffers(m, n, cast(Any, cfg), out_dtype, a.device, chunks)
    b = (*bounds, n, n)[:2]
    sc = w.sc.view(torch.int32) if asm else w.sc
    mx_gemv_mma_kernel[(tiles, cfg.split_k, chunks)](
        a.view(torch.int32), w.qw.view(torch.int32), sc, bias if bias is not None else w.sc,
        ws, cnt, out, m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, T=cfg.block_n, SPLIT_K=cfg.split_k, ASM=asm,
        NT=cfg.block_m // 8, U=cfg.unroll, ACT=act, CHUNKED=chunks > 1,
        num_warps=cfg.num_warps, num_stages=1,
        **({"maxnreg": maxnreg} if maxnreg and asm else {}),
    )  # fmt: skip
    return out
