"""Host side of the activation prologues: rotate + channel-scale (+ quantize) x into the layout a
GEMM or GEMV reads.

- `rotate_scale`: the folded hi + lo blocks (or the Givens layers) -> xr [P, M, K] fp16 (or fp32
  nibble-scaled) and row sums, for the tile GEMMs and the FMA GEMV;
- `rotate_quant`: the same, quantized to e4m3 / int8 per group or per token, for the W4A8 GEMM
  (q [P, M, K], scales and code sums [P, M, K/G] fp32, exact for int8);
- `rotate_slices`: the sliced decode prologue (G / slice programs a group; fp32, fp16 or the
  HFMA2 / mma GEMVs' paired fp16);
- `rotate_givens_paired`: the decode prologue from the Givens records;
- `prologue16`: the fp16 prologue the matrix-unit GEMV reads, by kind.
"""

from __future__ import annotations

import torch
import triton

from .._contract import require
from . import launch
from .prologue_kernels import (
    givens_paired_kernel,
    givens_rotate_kernel,
    rotate_quant_kernel,
    rotate_scale_kernel,
    rotate_slice_kernel,
)

PROLOGUE_WIDE_M = 256


def prologue_block_m(m: int, token: bool = False, hip: bool | None = None) -> int:
    """Rows per prologue program (see `prologue_warps`).

    Every program reads its groups' G x G blocks (hi + lo: 64 KB at G = 128) from L2, so the
    rows per program set the block traffic: at 32 rows, M = 2048 on qkv read ~0.5 GB of blocks
    (H200 2026-11-29: 124-162 us, 9-17% of HBM). On NVIDIA, 128 rows from M >= 256 (8 warps, no
    spills in the sm_90 build). gfx1201: 32, because 64 spills there (AOT report); per token 32
    as well, on `prologue_cols`' column slices (the whole-block form spilled at 16 rows).
    """
    hip = launch.is_hip() if hip is None else hip
    if m <= launch.DECODE_MAX_M:
        return 16
    if token:
        return 32 if hip or m >= 2048 else 16
    return 128 if not hip and m >= PROLOGUE_WIDE_M else 32


# gfx1201's per-token prologue walks each group's rotation PROLOGUE_TOKEN_COLS output columns at a
# time (`rotate_quant_kernel`'s COLS). AOT report, Triton 3.9, bf16, G = 128 (2026-12-05): the
# whole [G, G] block pair at 16 rows x 4 waves took 256 VGPRs and spilled 2 (12 B of scratch; 8
# waves spilled 9); 32 columns at 32 rows x 8 waves take 184 VGPRs, no spills (8 waves per SIMD),
# at 16 rows 190. 64 columns spilled at 4 waves and took 237 VGPRs at 8; 32 rows x 16 columns
# 178. The slices' loop is a runtime one: unrolled, the compiler hoisted every slice's loads
# and spilled 100-360 VGPRs. Not timed on the box. NVIDIA keeps the whole block (0).
PROLOGUE_TOKEN_COLS = 32


def prologue_cols(token: bool, group_size: int, hip: bool | None = None) -> int:
    """Output columns of the rotation a per-token prologue program takes at a time; 0 = all G."""
    hip = launch.is_hip() if hip is None else hip
    return min(PROLOGUE_TOKEN_COLS, group_size) if token and hip else 0


def prologue_warps(block_m: int, cols: int = 0) -> int:
    """8 warps for the 128-row tile (its fp32 accumulator) and for the column-sliced per-token
    form (`prologue_cols`), else 4."""
    return 8 if block_m >= 128 or cols else 4


def rotate_scale(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    group_size: int,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    nibble_scaled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused rotate + channel-scale prologue: x [M, K] -> (xr [P, M, K] fp16, rs [P, M, K/G]).

    With the Givens tables it applies the pair rotations (and zeroes `workspace` on the way);
    otherwise the folded blocks (and `workspace` must be None). `nibble_scaled` (blocks only):
    xr fp32 with each channel times its nibble's 2^-e (the FMA GEMV's input).
    """

    m, k = x.shape
    p, g = rot_hi.shape[0], group_size
    xr = torch.empty(p, m, k, dtype=torch.float32 if nibble_scaled else torch.float16,
                     device=x.device)  # fmt: skip
    rs = torch.empty(p, m, k // g, dtype=torch.float32, device=x.device)
    block_m = prologue_block_m(m)
    grid = (launch.triton_cdiv(m, block_m), k // g, p)
    if gv_idx is not None and gv_coef is not None:
        require(not nibble_scaled, "nibble_scaled", "False with the Givens tables", True)
        nprog = grid[0] * grid[1] * grid[2]
        numel = 0 if workspace is None else workspace.numel()
        zb = 0 if numel == 0 else max(16, 1 << (launch.triton_cdiv(numel, nprog) - 1).bit_length())
        givens_rotate_kernel[grid](
            x, gv_idx, gv_coef, xr, rs, workspace if workspace is not None else rs,
            m, k, x.stride(0), numel,
            KROT=gv_idx.shape[1], G=g, BLOCK_M=block_m, ZERO_BLOCK=zb, num_warps=4,
        )  # fmt: skip
        return xr, rs
    require(workspace is None, "workspace", "None without the Givens tables", "a tensor")
    rotate_scale_kernel[grid](
        x, rot_hi, rot_lo, xr, rs, m, k, x.stride(0), G=g, BLOCK_M=block_m,
        NIBBLE_SCALED=nibble_scaled, num_warps=prologue_warps(block_m),
    )  # fmt: skip
    return xr, rs


def rotate_quant(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    group_size: int,
    act_format: str,
    act_scale: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused rotate + channel-scale + quantize, one launch: x [M, K] -> (q, scales, code sums).

    q [P, M, K] e4m3/int8, scales and code sums [P, M, K/G] fp32 (contract in the module doc).
    """

    require(act_format in launch.ACT_FORMATS, "act_format", launch.ACT_FORMATS, act_format)
    require(act_scale in launch.ACT_SCALES, "act_scale", launch.ACT_SCALES, act_scale)
    m, k = x.shape
    p, g = rot_hi.shape[0], group_size
    q = torch.empty(p, m, k, dtype=launch.CODE_DTYPES[act_format], device=x.device)
    asc = torch.empty(p, m, k // g, dtype=torch.float32, device=x.device)
    rs = torch.empty_like(asc)
    token = act_scale == "token"
    block_m = prologue_block_m(m, token)
    cols = prologue_cols(token, g)
    grid = (launch.triton_cdiv(m, block_m), 1 if token else k // g, p)
    rotate_quant_kernel[grid](
        x, rot_hi, rot_lo, q, asc, rs, m, k, x.stride(0),
        G=g, BLOCK_M=block_m, INT8=act_format == "int8", TOKEN=token, COLS=cols,
        E4M3_BITS=act_format == "fp8" and e4m3_bits(launch.is_hip()),
        num_warps=prologue_warps(block_m, cols),
    )  # fmt: skip
    return q, asc, rs


# The fp8 kernels build their e4m3 bytes with integer ops where Triton converts to e4m3 in
# software (gfx1201: ~33 instructions a value); NVIDIA keeps the hardware cvt (one PTX cvt per
# two values). The W4A8 GEMM's weights (`_e4m3_exact`, 2026-12-05: 7291 -> 3752
# instructions in the 27B qkv decode build) and the activation quantizers' rounded codes
# (`_e4m3_from_grid`: `rotate_quant_kernel`, `fp8_token_quant_kernel`, H100 2026-12-05).
# The AMDGCN of the loops, not a timing: the box has not run either form.
E4M3_BITS_HIP = True


def e4m3_bits(hip: bool) -> bool:
    """Whether the fp8 kernels build their e4m3 bytes from bits (gfx1201) or convert."""
    return hip and E4M3_BITS_HIP


# The decode prologue (FMA GEMV's input), sliced: G / PROLOGUE_SLICE programs per group.
# Sweep (H200 2026-12-01, run 1, prologue alone, M = 1 / 2): the block kernel qkv
# 5.21 / 8.08, o_proj 4.21 / 9.53, gate_up 4.13 / 3.94, down 3.97 / 3.85, in_proj 4.07 / 3.93 us; 64
# channels, 4 warps 5.02 / 5.30, 3.20 / 9.40, 4.00 / 3.89, 3.54 / 3.77, 3.76 / 3.87 (16 channels
# 4.3-8.2: too little work per program; 32: within noise of 64 but 4 partial sums per group,
# which cost the GEMV 0.1-1.0 us at M = 1). As served (A/B in one run, twice each, M = 1):
# qkv 17.0-17.7 vs 18.6-19.0 us with the block prologue, o_proj 10.1-10.8 vs 10.9-11.3, in_proj
# 18.2-18.3 vs 19.7, down 18.9-19.7 vs 18.7-18.9, gate_up 29.7-30.0 vs 28.7-28.8 (the one loss).
PROLOGUE_SLICE = 64


PROLOGUE_SLICE_WARPS = 4


# H100 2026-12-06: 16 rows a program past 16 rows (grid axis 2 holds each row block's slices; one
# program took all M before). The prologue alone, paired as the mma GEMVs take it, one program
# for all rows / 16-row blocks, us (benchmarks/results/bench-2026-12-06-h100-prologue.json):
# M = 32 qkv 15.7 / 11.4, o_proj 6.8 / 4.4, gate_up 11.6 / 7.0, down 12.0 / 6.8, in_proj 11.7 /
# 7.4; M = 64 24.8 / 16.5, 9.7 / 5.6, 20.9 / 11.5, 19.6 / 10.6, 22.4 / 11.3 (32-row blocks
# 18.1-26.0 at 64: no better than one program). The mma op on it at M = 64: qkv 57.1 / 48.9,
# o_proj 26.7 / 22.8, gate_up 86.2 / 76.4, down 57.8 / 47.8, in_proj 54.1 / 43.4.
PROLOGUE_ROWS = 16


# H200 2026-12-04: the HFMA2 GEMV's prologue from the Givens records (`rotate_givens_paired`),
# warps a program.
GIVENS_PAIRED_WARPS = 4


# Rows a program of it (0: all M rows in one program; the kernel runs a program's rows one after
# another). H100 2026-12-06, `decode --h2 gvrows --ms 16,24,32` decided by `decide_gvrows`
# (benchmarks/results/bench-2026-12-06-h100-gvrows.json, the int4 mma op on the records, same
# run, us, rows 0 / 4): M = 16 qkv 23.9 / 21.6, o_proj 15.2 / 12.4, gate_up 37.9 / 35.4, down
# 25.0 / 22.8, in_proj 23.0 / 20.8; M = 32 37.3 / 27.9, 24.9 / 15.7, 62.9 / 53.6, 36.7 / 28.4,
# 35.2 / 27.2 (geomean 0.80x over the 15 cells, worst 0.94x; rows 8 0.81x, 16 0.89x).
GIVENS_ROWS = 4


def prologue_slice(hip: bool) -> int:
    """Output channels per program of the sliced decode prologue; 0: the block prologue
    (gfx1201 keeps the kernel its AOT budget was measured on)."""
    return 0 if hip else PROLOGUE_SLICE


def rotate_slices(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    group_size: int,
    slice_: int = 0,
    num_warps: int = 0,
    f16: bool = False,
    pdl: bool = False,
    paired: bool = False,
    one: bool = False,
    pair_shift: int = 6,
    rows: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sliced decode prologue: x [M <= 64, K] -> (xr [P, M, K] fp32 nibble-scaled,
    rs [P, M, K/G * G/slice] fp32 partial row sums), as `prologue.rotate_scale(nibble_scaled=True)`
    but with the row sums split per slice (the GEMV's RS); `f16`: xr fp16 as
    `prologue.rotate_scale` writes it, no row sums (rs is xr then); `paired`: fp16 as the HFMA2
    GEMV reads it (/ 2^pair_shift, pairs (8r + j, 8r + j + 4) side by side; `gemv_mma_kernels`);
    `one`: rot_hi holds fp16 blocks (hi + lo rounded once; the 2026-12-04 bench), rot_lo
    unread. `rows`: rows a program (a power of two >= 16; 0: all M in one; default
    PROLOGUE_ROWS)."""

    m, k = x.shape
    require(m <= 64, "x rows", "<= 64 for the sliced prologue", m)
    p, g = rot_hi.shape[0], group_size
    sl = min(slice_ or PROLOGUE_SLICE, g)
    f16 = f16 or paired
    xr = torch.empty(p, m, k, dtype=torch.float16 if f16 else torch.float32, device=x.device)
    rs = xr if f16 else torch.empty(p, m, (k // g) * (g // sl), dtype=torch.float32,
                                    device=x.device)  # fmt: skip
    block_m = max(16, triton.next_power_of_2(m))
    rows = PROLOGUE_ROWS if rows < 0 else rows
    if rows:
        require(rows >= 16 and rows & (rows - 1) == 0, "rows", "0 or a power of two >= 16", rows)
        block_m = min(rows, block_m)
    rotate_slice_kernel[(k // g, p, (g // sl) * -(-m // block_m))](
        x, rot_hi, rot_lo, xr, rs, m, k, x.stride(0), G=g,
        BLOCK_M=block_m, SLICE=sl, F16=f16,
        PDL=pdl, PAIRED=paired, ONE=one, PSCALE=2.0**-pair_shift,
        num_warps=num_warps or PROLOGUE_SLICE_WARPS,
    )  # fmt: skip
    return xr, rs


def rotate_givens_paired(
    x: torch.Tensor,
    gv_idx: torch.Tensor,
    gv_coef: torch.Tensor,
    group_size: int,
    pair_shift: int = 6,
    num_warps: int = 0,
    pdl: bool = False,
    paired: bool = True,
    rows: int = -1,
) -> torch.Tensor:
    """The HFMA2 GEMV's prologue from the Givens records: x [M <= 32, K] -> xr [P, M, K] fp16,
    as `rotate_slices(paired=True)` writes it (`prologue_kernels.givens_paired_kernel`; `pdl`: it
    lets a dependent launch start at once); `paired=False`: as `rotate_slices(f16=True)`, the
    `gemv_dot` GEMV's input (`prologue.prologue16`). `rows`: rows a program (a power of
    two; 0: all M; default GIVENS_ROWS)."""

    m, k = x.shape
    p, krot = gv_idx.shape[0], gv_idx.shape[1]
    g = group_size
    require(m <= 32, "x rows", "<= 32 for the Givens prologue", m)
    require(x.stride(1) == 1, "x", "unit stride along K", x.stride())
    block_m = givens_block_m(m, rows)
    xr = torch.empty(p, m, k, dtype=torch.float16, device=x.device)
    givens_paired_kernel[(k // g, p, -(-m // block_m))](
        x, gv_idx, gv_coef, xr, m, k, x.stride(0), KROT=krot, G=g,
        BLOCK_M=block_m, PSCALE=2.0**-pair_shift, PDL=pdl,
        PAIRED=paired,
        num_warps=num_warps or GIVENS_PAIRED_WARPS,
    )  # fmt: skip
    return xr


def givens_block_m(m: int, rows: int = -1) -> int:
    """Rows a program of the records prologue at M rows: `rows` (a power of two; 0: all M;
    default GIVENS_ROWS), at most M's power of two."""
    rows = GIVENS_ROWS if rows < 0 else rows
    require(rows & (rows - 1) == 0, "rows", "0 or a power of two", rows)
    return min(rows or 32, 1 << max(0, (m - 1).bit_length()))


# "givens" runs the records kernel of 2026-12-04 (H200) since then (not yet measured at M = 3-16;
# the 2026-12-02 numbers above are the old per-layer-round-trip kernel's).
GEMV3_PROLOGUE = "slice"  # "slice" (prologue.rotate_slices) | "block" | "givens"


PROLOGUES = ("slice", "block", "givens")


def prologue16(x: torch.Tensor, rot_hi: torch.Tensor, rot_lo: torch.Tensor, g: int,
               gv_idx: torch.Tensor | None, gv_coef: torch.Tensor | None,
               kind: str = "", pdl: bool = False) -> torch.Tensor:  # fmt: skip
    """x [M <= 16, K] -> xr [P, M, K] fp16, the rotated, channel-scaled activations (`pdl`:
    the sliced kernel lets a dependent launch start at once)."""
    kind = kind or GEMV3_PROLOGUE
    require(kind in PROLOGUES, "prologue", PROLOGUES, kind)
    if kind == "givens" and gv_idx is not None and gv_coef is not None:
        # H200 2026-12-04: the records kernel that loads every layer before its first gather
        # (`prologue.rotate_givens_paired`), not `prologue.rotate_scale`'s one round trip a layer
        return rotate_givens_paired(x, gv_idx, gv_coef, g, paired=False)
    if kind == "block":
        return rotate_scale(x, rot_hi, rot_lo, g)[0]
    return rotate_slices(x, rot_hi, rot_lo, g, f16=True, pdl=pdl)[0]
