"""Host side of the issue-14 kernels: the decode GEMV and the prefill dequantize + vendor GEMM.

Shape contract: that of `host.w4a16_linear` (the same tensors of a `Prepared` layer), plus

    gemv (M <= GEMV_MAX_M)   x [M, K] -> prologue (blocks) or, ROT, the Givens tables inside the
                             GEMV; y [M, N] in x.dtype, split-K summed in the kernel
    dequant (M >= DEQUANT_MIN_M)  W' [K, N] in x.dtype = rotated, dequantized weights in one
                             reused scratch per device, then y = x @ W' through torch (cuBLAS /
                             hipBLASLt): no casts (bf16 W' is the bf16 floor of a bf16-weight
                             GEMM: 2.2-2.7e-3 relative in the H200 tests, fp16 W' 1.7e-3)

Workspaces (module-level, per device, grow-only): the GEMV's fp32 split-K sums and int32 tickets,
which every launch leaves zeroed, and the W' scratch. One stream at a time may use them (vLLM runs
one layer after another on one stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import torch

from .._contract import require
from . import host

# Dispatch bands, from the H200 runs of 2026-12-01 (kernels/BENCH.md, issue 14 sections).
# Second pass: the GEMV (`gemv2`: block prologue + FMA GEMV) serves M <= GEMV_MAX_M. Run 2 (as
# served, M = 1): qkv 19.9 / o_proj 10.5 / gate_up 27.9 / down 19.4 / in_proj 18.6 us against the
# tile kernels' 25.4 / 15.5 / 42.8 / 28.5 / 28.2 in the same run. M = 2 as served was cut by the
# budget: the GEMV alone took 16.5 / 10.1 / 31.8 / 19.8 / 17.7 us there (+ a 4.6-9.0 us prologue)
# against the 16-row tile kernels' M = 1 times (interpolated: o_proj may lose by ~3 us). At M = 4
# the GEMV's best (run 1: the matrix-unit path 24.0 / - / 51.6 / 28.0 us + prologue) loses to the
# tile kernels (qkv 27.5 as served), and at M = 16 it ties them (run 2: within 0-5%), so M >= 3
# stays on the tile kernels. The dequant path wins at M = 2048 on every 27B shape (qkv 381 us
# against the tile kernels' 595, gate_up 731 / 1324) and loses at M = 256 (qkv 162 / 111): its
# ~70-120 us weight pass is fixed per call. 1024 is the interpolated crossover (not measured).
# Third pass: the weight pass + casts went from ~170 to ~60 us on qkv (see DEQUANT_TRANS), and
# the crossover moved: run 5 (H200 2026-12-01, as served by path) dequant + cuBLAS beats the tile
# kernels at M = 256 on every 27B shape (qkv 90.4 vs 111.5 us, o_proj 42.9 / 70.1, gate_up
# 190.6 / 257.7, down 107.4 / 185.3, in_proj 97.2 / 112.1; at 512 and 1024 by 1.5-2.3x).
# Below 256 not measured (pass 1 had the tile kernels ahead at M = 64).
# Fourth pass: the band starts at 256, run 5's measurement above (test_triton_gpu.py's M = 300
# cases now hold the bf16-W' floor, `_triton_cases.BF16_W_FLOOR`).
GEMV_MAX_M = 2  # at most GEMV2_MAX_M, the FMA GEMV's rows
DEQUANT_MIN_M = 256
DEQUANT_BLOCK_N = 64
DEQUANT_WARPS = 4
DEQUANT_STAGES = 3
DEQUANT_PROGRAMS_PER_SM = 2
# Third pass: the transposed kernel (codes in the dot's register operand, the block in shared
# memory) and W' in x.dtype (no fp16 casts of x and y); the configs below are the sweep's.
# Sweep (H200 2026-12-01, run 1 of pass 3, the weight pass alone, bf16 W'; one split count per
# partition then): the old kernel 121.7 / 31.4 / 137.0 / 83.1 / 94.7 us (qkv / o_proj / gate_up /
# down / in_proj), the transposed one at 64 columns, 4 warps, 3 stages, 4 programs per SM 72.6 /
# 27.7 / 115.4 / 65.5 / 67.1 (best or within 12% of the best of 9 configs on every shape: 128
# columns or 8 warps 1.1-2x slower, 2 stages +5-18%, 1 stage +12-30%).
# Run 3 (balanced split, as served, bf16 x / W' / y, cuBLAS bf16 in the same run): M = 2048
# qkv 268.6 us vs cuBLAS 208.4 (0.78x), o_proj 0.77x, gate_up 0.77x, down 0.75x, in_proj 0.77x;
# M = 8192 0.84-0.93x (pass 2's fp16 path: 0.53-0.73x). ncu (qkv M = 2048): 55.9 us, 158
# registers, 15.5% achieved occupancy, DRAM 29% (the old kernel 119.6 us, 168, 13%, 13%).
DEQUANT_TRANS = True
DEQUANT_T_BLOCK_N = 64
DEQUANT_T_WARPS = 4
DEQUANT_T_STAGES = 3
DEQUANT_T_PROGRAMS_PER_SM = 4


@dataclass(frozen=True)
class GemvConfig:
    """One launch configuration of the GEMV."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    num_stages: int = 3
    kw: int = 16  # gemv2: int32 word rows per chunk


_WS: dict[tuple[str, str], torch.Tensor] = {}
# A CUDA graph keeps the addresses of the buffers its kernels used. A scratch buffer handed out
# while a graph was being captured is never freed when it grows or changes dtype: it moves here,
# so the graphs captured on it replay into live memory (vLLM captures one batch size after
# another, with eager warm-up calls between them, and a route first taken at a later size may
# grow a buffer an earlier graph uses).
_CAPTURED: set[tuple[str, str]] = set()
_RETIRED: list[torch.Tensor] = []


def _capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream (never on a CPU build)."""
    cuda = device.type == "cuda" and torch.cuda.is_available()
    return cuda and torch.cuda.is_current_stream_capturing()


def _scratch(kind: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed grow-only buffer of at least `numel` elements, one per (kind, device); one that
    a graph capture used is kept alive (`_RETIRED`) when it is replaced."""
    key = (kind, str(device))
    buf = _WS.get(key)
    if buf is None or buf.numel() < numel or buf.dtype != dtype:
        if buf is not None and key in _CAPTURED:
            _RETIRED.append(buf)
            _CAPTURED.discard(key)
        buf = torch.zeros(max(numel, 1 << 16), dtype=dtype, device=device)
        _WS[key] = buf
    if _capturing(device):
        _CAPTURED.add(key)
    return buf


def _gemv_buffers(
    m: int, n: int, cfg: GemvConfig, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(out [M, N], split-K fp32 workspace, tickets, column tiles) of one GEMV launch; without
    split-K the workspace and tickets are unused (out stands in for them)."""
    out = torch.empty(m, n, dtype=dtype, device=device)
    tiles = -(-n // cfg.block_n)
    if cfg.split_k == 1:
        return out, out, out, tiles
    ws = _scratch("gemv_ws", m * n, torch.float32, device)
    return out, ws, _scratch("gemv_cnt", tiles, torch.int32, device), tiles


def gemv_w4a16(
    args: tuple[torch.Tensor | None, ...],
    x: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None,
    config: GemvConfig | None = None,
    fused: bool | None = None,
    pdl: bool | None = None,
    h2: bool | None = None,
) -> torch.Tensor:
    """The decode GEMV linear at M <= GEMV2_MAX_M; args = (rot_hi, rot_lo, qweight, scales,
    zeros, gv_idx, gv_coef). The FMA GEMV (`gemv2_w4a16`, `config` a `gemv2_config`) after the
    block prologue, or with the Givens layers inside (`gemv2_rot`), or the HFMA2 GEMV (`h2_ok`).
    `fused` / `pdl` / `h2` override `gemv2_rot` / GEMV_PDL / `h2_ok` (the bench's forced paths).
    """
    rot_hi, rot_lo, qweight, scales, zeros, gv_idx, gv_coef = args
    m, k = x.shape
    n = qweight.shape[1]  # type: ignore[union-attr]
    g = group_size
    require(m <= GEMV2_MAX_M, "x rows", f"<= {GEMV2_MAX_M} for the decode GEMVs", m)
    cfg2 = config or gemv2_config(m, n, k, g, bounds, host.sm_count(x.device),
                                  hip=host._is_hip())  # fmt: skip
    if fused is None:
        fused = gemv2_rot(host._is_hip(), n, k) and m <= GEMV2_ROT_MAX_M
        fused = fused and not (H2_OVER_ROT and h2_ok(host._is_hip(), m, g))
    pdl = GEMV_PDL if pdl is None else pdl
    if fused and gv_idx is not None and gv_coef is not None:
        return gemv2_w4a16_rot(x, gv_idx, gv_coef, qweight, scales, zeros, bounds, g, bias,  # type: ignore[arg-type]
                               cfg2)  # fmt: skip
    if h2 is None:
        h2 = config is None and not pdl and h2_ok(host._is_hip(), m, g)
    if h2:
        from . import decode_host

        return decode_host.gemv_h2_linear(x, rot_hi, rot_lo, qweight, scales, zeros, bounds,  # type: ignore[arg-type]
                                          g, bias, gv=(gv_idx, gv_coef))  # fmt: skip
    use_pdl = pdl_ok(host._is_hip()) and pdl
    if prologue_slice(host._is_hip()):
        xr, rs = rotate_slices(x, rot_hi, rot_lo, g, pdl=use_pdl)  # type: ignore[arg-type]
    else:
        use_pdl = False
        xr, rs = host.rotate_scale(x, rot_hi, rot_lo, g, nibble_scaled=True)  # type: ignore[arg-type]
    return gemv2_w4a16(xr, rs, qweight, scales, zeros, bounds, g, x.dtype, bias, cfg2,  # type: ignore[arg-type]
                       pdl=use_pdl)  # fmt: skip


# gemv2 (the second-pass GEMV, `fast_kernels.gemv2_w4a16_kernel`): FMA GEMV of up to
# GEMV2_MAX_M rows; its tile and split rule (`gemv2_config`) also sizes the HFMA2 and mma GEMVs.
# Sweeps (second pass, GEMV alone; BENCH.md): 4 warps x 4 columns per thread (512 columns) won
# (run 1: 2 warps / 256 columns 20.7 vs 15.7 us on qkv M = 1; 8 warps 16.9); more programs won
# (8 per SM: qkv 13.1 vs 15.7; ncu at 4 per SM: 0.45 waves, 10.5% achieved occupancy); the
# pipelining depth did not matter. Run 2 (8 per SM): 8 word rows per chunk at M = 1 (qkv 12.6,
# gate_up 22.7, down 15.1 us; kw 4 within +-4%), 4 at M = 2 (qkv 16.5 vs 17.8 at kw 8, gate_up
# 31.8 vs 39.2, down 19.8 vs 22.1).
# Nineteenth pass: the FMA GEMV's 4-row form (M = 3..4) and its 16-row matrix-unit form are
# gone: no dispatch picked them (NVIDIA serves M = 2..16 on the mma GEMV, gfx1201 M >= 3 on the
# tile kernels: the second pass's run 1 had the GEMV's best at M = 4 behind them), and the
# 4-row form cost Triton's coalesce pass 11.7 s a build (BENCH.md eighteenth pass).
GEMV2_MAX_M = 2
GEMV2_WARPS = 4
GEMV2_BLOCK_N = 512
GEMV2_KW = {1: 8, 2: 4}
GEMV2_PROGRAMS_PER_SM = 8
GEMV2_STAGES = 2


# The decode prologue (FMA GEMV's input), sliced: G / PROLOGUE_SLICE programs per group.
# Sweep (H200 2026-12-01, pass 3 run 1, prologue alone, M = 1 / 2): the block kernel qkv 5.21 /
# 8.08, o_proj 4.21 / 9.53, gate_up 4.13 / 3.94, down 3.97 / 3.85, in_proj 4.07 / 3.93 us; 64
# channels, 4 warps 5.02 / 5.30, 3.20 / 9.40, 4.00 / 3.89, 3.54 / 3.77, 3.76 / 3.87 (16 channels
# 4.3-8.2: too little work per program; 32: within noise of 64 but 4 partial sums per group,
# which cost the GEMV 0.1-1.0 us at M = 1). As served (A/B in one run, twice each, M = 1):
# qkv 17.0-17.7 vs 18.6-19.0 us with the block prologue, o_proj 10.1-10.8 vs 10.9-11.3, in_proj
# 18.2-18.3 vs 19.7, down 18.9-19.7 vs 18.7-18.9, gate_up 29.7-30.0 vs 28.7-28.8 (the one loss).
PROLOGUE_SLICE = 64
PROLOGUE_SLICE_WARPS = 4


# Eleventh pass: the HFMA2 GEMV's prologue from the Givens records (`rotate_givens_paired`),
# warps a program.
GIVENS_PAIRED_WARPS = 4
# Twenty-fifth pass: rows a program of it (0: all M rows in one program, as before; the kernel
# runs a program's rows one after another). `bench_decode --h2 gvrows` times 4 / 8 / 16.
GIVENS_ROWS = 0


# Fifth pass: the GEMV launched programmatically dependent on its prologue (PDL, sm_90): the
# prologue lets it launch at once, the GEMV prefetches its word rows into L2 (`prefetch_l2`) and
# waits (`gdc_wait`) only before reading the prologue's output, so the weight stream could
# overlap the prologue. Run 3 (H200 2026-12-02, sliced prologue + FMA GEMV as served, same run,
# off / on): M = 1 qkv 17.6 / 18.0 us, o_proj 10.8 / 10.0, gate_up 29.4 / 29.1, down 19.9 /
# 18.4, in_proj 17.6 / 17.7; M = 2 23.4 / 21.6, 12.4 / 11.8, 36.8 / 38.7, 23.0 / 23.2, 22.3 /
# 20.6; the matrix-unit GEMV at M = 16 -1.7 to +1.6 us: within the run's noise either way, so
# it stays off (and the kernel cache built on CPU needs no second specialization).
GEMV_PDL = False


def pdl_ok(hip: bool) -> bool:
    """Programmatic dependent launch available: NVIDIA sm_90+, a Triton with GDC, compiled code
    (not the interpreter)."""
    from . import fast_kernels

    if hip or fast_kernels.gdc_wait is None or host._interpreted():
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sliced decode prologue: x [M <= 32, K] -> (xr [P, M, K] fp32 nibble-scaled,
    rs [P, M, K/G * G/slice] fp32 partial row sums), as `host.rotate_scale(nibble_scaled=True)`
    but with the row sums split per slice (the GEMV's RS); `f16`: xr fp16 as
    `host.rotate_scale` writes it, no row sums (rs is xr then); `paired`: fp16 as the HFMA2
    GEMV reads it (/ 2^pair_shift, pairs (8r + j, 8r + j + 4) side by side; `decode_kernels`);
    `one`: rot_hi holds fp16 blocks (hi + lo rounded once; the ninth pass's bench), rot_lo
    unread."""
    from .fast_kernels import rotate_slice_kernel

    m, k = x.shape
    require(m <= 32, "x rows", "<= 32 for the sliced prologue", m)
    p, g = rot_hi.shape[0], group_size
    sl = min(slice_ or PROLOGUE_SLICE, g)
    f16 = f16 or paired
    xr = torch.empty(p, m, k, dtype=torch.float16 if f16 else torch.float32, device=x.device)
    rs = xr if f16 else torch.empty(p, m, (k // g) * (g // sl), dtype=torch.float32,
                                    device=x.device)  # fmt: skip
    rotate_slice_kernel[(k // g, p, g // sl)](
        x, rot_hi, rot_lo, xr, rs, m, k, x.stride(0), G=g, BLOCK_M=16 if m <= 16 else 32,
        SLICE=sl, F16=f16,
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
    as `rotate_slices(paired=True)` writes it (`fast_kernels.givens_paired_kernel`; `pdl`: it
    lets a dependent launch start at once); `paired=False`: as `rotate_slices(f16=True)`, the
    fifth-pass GEMV's input (`decode_host.prologue16`). `rows`: rows a program (a power of
    two; 0: all M; default GIVENS_ROWS)."""
    from .fast_kernels import givens_paired_kernel

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


def gemv2_config(m: int, n: int, k: int, g: int, bounds: tuple[int, ...], sms: int,
                 num_warps: int = 0, block_n: int = 0, kw: int = 0,
                 programs_per_sm: int = 0, num_stages: int = 0,
                 hip: bool = False) -> GemvConfig:  # fmt: skip
    """Tile and split of the second-pass GEMV (the section note in fast_kernels):
    BLOCK_N / (32 num_warps) adjacent columns per thread (16-byte loads), narrower where a
    partition boundary needs it; split-K until about `programs_per_sm` programs per SM. The
    HFMA2 and mma GEMVs size theirs here too (their M past GEMV2_MAX_M: block_m unused)."""
    nw = num_warps or GEMV2_WARPS
    align = 0
    for b in bounds:
        align = gcd(align, b)
    host._block_n(16, align or 16)  # refuses boundaries off the 16-column grid, as the tiles do
    bn = block_n or GEMV2_BLOCK_N
    while bn > 16 and ((align and align % bn) or bn > 2 * n):
        bn //= 2
    kw_ = min(kw or GEMV2_KW.get(m, 2), g // 8)
    tiles = -(-n // bn)
    ngroups = k // g
    pps = programs_per_sm or GEMV2_PROGRAMS_PER_SM
    split = max(1, min(ngroups, -(-pps * sms // tiles)))
    per = -(-ngroups // split)
    block_m = 1 if m == 1 else GEMV2_MAX_M
    return GemvConfig(block_m, bn, -(-ngroups // per), nw, num_stages or GEMV2_STAGES, kw_)


# Fourth pass: the Givens layers inside the FMA GEMV (`gemv2_w4a16_kernel(ROT=True)`): no
# prologue launch; each program rotates its own 128-channel groups from the records (partner,
# cos, signed sin per channel and layer: 12 KB a group at krot 8 against the 32 KB of int4 words
# a 512-column program reads per group), while its first chunk of words is in flight.
# Sweep (H200 2026-12-02, pass 4 runs 2-3, the op alone, same run; sliced prologue + GEMV as
# served before vs the fused kernel at the shipped kw, 8 programs per SM): with the records
# loaded before the gathers (run 3) o_proj M = 1 9.37 vs 10.86 us, M = 2 11.38 vs 12.16 (kw 4);
# qkv M = 1 18.56 vs 18.30, M = 2 23.69 vs 22.48; gate_up M = 1 36.69 vs 29.38, M = 2 45.29
# vs 36.82. Run 2 (records loaded per layer): down M = 1 24.1 vs 20.2, in_proj 23.5 vs 18.5.
# The rotation is a fixed cost per (column tile, group), ~25% of the GEMV's time at every
# shape, against the prologue's fixed ~3-5 us: it wins only where the GEMV itself is short.
# So the fused kernel serves layers of at most GEMV2_ROT_MAX_WEIGHTS weights (o_proj, 15.7 M;
# qkv's 36.7 M ties and stays on the prologue). 8-warp / 1024-column tiles lost everywhere but
# o_proj M = 1 (9.21 us).
GEMV2_ROT = True
GEMV2_ROT_PRE = True  # every layer's records loaded before the first gather
GEMV2_ROT_MAX_WEIGHTS = 20 << 20
# Ninth pass (H200 2026-12-04, BENCH.md run 1, same run): at M = 2 the HFMA2 GEMV took o_proj
# 10.2 us against the fused kernel's 12.0; at M = 1 10.0 against 9.7 (a tie), so the fused
# kernel keeps M = 1 only.
GEMV2_ROT_MAX_M = 1
# Tenth pass: where the HFMA2 GEMV serves (`h2_ok`), it takes the fused kernel's M = 1 layers
# too. o_proj M = 1, same run each (H200 2026-12-04, us, HFMA2 op against the fused kernel as
# served): run 3 8.92 / 9.97, run 4 8.71 / 9.12, run 6 8.65 / 9.01, run 7 (one-wave grid)
# 8.83 / 10.11. The fused kernel keeps the layers the HFMA2 GEMV cannot take (G = 64).
H2_OVER_ROT = True


# Ninth pass: the HFMA2 GEMV (`decode_kernels.gemv_h2_kernel`) serves the decode band (M <= 2,
# NVIDIA) where the FMA GEMV served with the sliced prologue. H200 2026-12-04 (BENCH.md ninth
# pass, run 1, as served by path in the same run, M = 1): qkv 17.0 us against 17.5, gate_up
# 24.4 / 30.8, down 17.9 / 20.7, in_proj 16.3 / 17.5; M = 2: 22.8 / 23.4, 34.2 / 38.1, 21.9 /
# 23.1, 21.6 / 22.2 (`decode_host.H2_CONFIG`); run 3, as served: M = 1 1.04-1.29x the FMA op,
# M = 2 1.03-1.12x. gfx1201 keeps the FMA GEMV (no packed-fp16 PTX).
GEMV_H2 = True
H2_MAX_M = 2  # its 1- and 2-row PTX
# (Tenth pass: the rotation inside the HFMA2 GEMV, one launch, lost; H200 2026-12-04, BENCH.md
# tenth pass, run 4, same run, M = 1, us, inside against the prologue op: qkv 18.2 / 15.8,
# o_proj 10.8 / 8.7, gate_up 31.3 / 23.4, down 18.9 / 17.6, in_proj 19.2 / 16.3; M = 2
# 1.19-1.43x slower. Removed in the nineteenth pass: `decode_kernels`' tenth-pass note.)


def h2_ok(hip: bool, m: int, g: int) -> bool:
    """The HFMA2 GEMV serves an M-row decode call: NVIDIA, compiled code, M <= H2_MAX_M,
    G % 128 == 0 (its 16-row chunk)."""
    interp = host._interpreted()
    return GEMV_H2 and not hip and not interp and m <= H2_MAX_M and g % 128 == 0


# Twelfth pass: int4 decode at MMA_GEMV_MIN_M <= M <= MMA_GEMV_MAX_M on the mma.sync GEMV
# (`decode_host.gemv_mma_linear`: the records prologue at pair shift 0, fp32 accumulation on the
# matrix unit). H200 2026-12-04 (BENCH.md twelfth pass, runs 3 and 4, the path served before
# forced against the mma op as served, same run, us):
# - M = 2 (the HFMA2 op) qkv 18.78 / 14.63, gate_up 31.32 / 25.34, down 21.02 / 16.94, in_proj
#   20.02 / 15.66, o_proj 11.18 / 10.94; M = 4 (the FMA GEMV) 32.71 / 14.68, 55.78 / 24.18,
#   33.40 / 16.86, 33.48 / 16.13, 14.50 / 10.80; M = 8 (the tile kernels) 29.72 / 15.67,
#   50.77 / 27.11, 31.96 / 18.07, 31.04 / 17.84, 16.93 / 12.76;
# - M = 9 / 16 (two activation tiles; the matrix-unit GEMV of pass 5 before): qkv 28.93 / 23.09
#   and 30.24 / 24.92, gate_up 52.40 / 35.44 and 59.42 / 38.50, down 35.97 / 25.79 and 36.90 /
#   26.65, in_proj 35.32 / 24.10 and 36.02 / 26.40; o_proj 15.47 / 16.46 and 16.58 / 18.06 (the
#   twelfth pass kept that GEMV past M = 8 on layers of at most
#   `decode_host.GEMV3_SMALL_WEIGHTS`; the thirteenth pass's one-wave split and blocks prologue
#   took them: `decode_host.MMA_BLOCKS_MIN_M`);
# - M = 1: it lost on 4 of 5 shapes (gate_up 22.97 against the HFMA2 op's 21.99, o_proj 10.16 /
#   8.80; run 2): M = 1 keeps the HFMA2 op.
# Twenty-fourth pass: to M = 32 on four activation tiles (`decode_host.mma_tiles`), the sliced
# blocks prologue on every layer there (`decode_host.MMA_BLOCKS_ALL_MIN_M`). H100 (BENCH.md
# twenty-fourth pass, kernels/bench-2026-12-05-h100-issue14-pass24-int4-mma4.json, same run, us,
# the tile kernels as served before / four tiles on the blocks prologue, M = 24): qkv 44.6 /
# 31.2, gate_up 104.8 / 53.6, down 54.4 / 31.5, o_proj 27.7 / 17.2, in_proj 44.8 / 32.5; M = 32
# 44.7 / 34.1, 105.2 / 57.5, 53.7 / 35.2, 25.6 / 19.7, 43.0 / 33.9. int5 keeps 16
# (MMA_GEMV5_MAX_M: its four tiles pass their GPU test but are not timed yet).
MMA_GEMV = True
MMA_GEMV_MIN_M = 2
MMA_GEMV_MAX_M = 32
# Thirteenth pass: int5 (I8 PG ZPE) on the same GEMV (`gemv_mma(qweight_hi=)`: the fifth bits
# OR-ed into each pair before the zero's subtraction) from MMA_GEMV5_MIN_M rows.
MMA_GEMV5 = True
MMA_GEMV5_MIN_M = 1
MMA_GEMV5_MAX_M = 16


def mma_gemv_ok(hip: bool, m: int, g: int, bounds: tuple[int, ...] = (), bits: int = 4) -> bool:
    """The mma GEMV serves an M-row decode call of a `bits` (4 or 5) layer: NVIDIA, compiled
    code, MMA_GEMV_MIN_M <= M <= MMA_GEMV_MAX_M (int5: MMA_GEMV5_*), G a multiple of 32,
    partition bounds on the 32-column grid (`decode_host.mma_ok`)."""
    from . import decode_host

    interp = host._interpreted()
    lo = MMA_GEMV5_MIN_M if bits == 5 else MMA_GEMV_MIN_M
    hi = MMA_GEMV5_MAX_M if bits == 5 else MMA_GEMV_MAX_M
    on = MMA_GEMV5 if bits == 5 else MMA_GEMV
    return (on and not hip and not interp and lo <= m <= hi and g % 32 == 0
            and decode_host.mma_ok(bounds))  # fmt: skip


def gemv2_rot(hip: bool, n: int = 0, k: int = 0) -> bool:
    """The Givens layers inside the FMA GEMV for an N x K layer (NVIDIA, up to
    GEMV2_ROT_MAX_WEIGHTS weights); gfx1201 keeps the block prologue its AOT budget was
    measured on."""
    return GEMV2_ROT and not hip and n * k <= GEMV2_ROT_MAX_WEIGHTS


def gemv2_w4a16_rot(
    x: torch.Tensor,
    gv_idx: torch.Tensor,
    gv_coef: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
    pre: bool | None = None,
) -> torch.Tensor:
    """The FMA GEMV with the rotation inside: x [M <= 2, K] -> y [M, N] in x.dtype, one launch."""
    from .fast_kernels import gemv2_w4a16_kernel

    m, k = x.shape
    n = qweight.shape[1]
    g = group_size
    cfg = config or gemv2_config(m, n, k, g, bounds, host.sm_count(x.device), hip=host._is_hip())
    require(m <= min(cfg.block_m, GEMV2_MAX_M), "x rows", f"<= {cfg.block_m} (FMA GEMV)", m)
    out, ws, cnt, tiles = _gemv_buffers(m, n, cfg, x.dtype, x.device)
    xs = _scratch("gemv_xs", tiles * cfg.split_k * cfg.block_m * g, torch.float32, x.device)
    b = (*bounds, n, n)[:2]
    gemv2_w4a16_kernel[(tiles, cfg.split_k)](
        x, xs, qweight, scales, zeros, bias if bias is not None else scales, ws, cnt, out,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=g, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        KW=cfg.kw, SPLIT_K=cfg.split_k, RS=1, ROT=True,
        KROT=gv_idx.shape[1], gi_ptr=gv_idx, gc_ptr=gv_coef, xs_ptr=xs, stride_xm=x.stride(0),
        PRE=GEMV2_ROT_PRE if pre is None else pre,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


def gemv2_w4a16(
    xr: torch.Tensor,
    rs: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """The second-pass GEMV on the prologue outputs xr [P, M <= 2, K] (fp32 nibble-scaled:
    `host.rotate_scale(nibble_scaled=True)` or `rotate_slices`), rs [P, M, K/G * RS] fp32 ->
    y [M, N] out_dtype."""
    from .fast_kernels import gemv2_w4a16_kernel

    _, m, k = xr.shape
    n = qweight.shape[1]
    cfg = config or gemv2_config(m, n, k, group_size, bounds, host.sm_count(xr.device),
                                 hip=host._is_hip())  # fmt: skip
    require(m <= min(cfg.block_m, GEMV2_MAX_M), "x rows", f"<= {cfg.block_m} for the GEMV", m)
    require(xr.dtype == torch.float32, "xr dtype", "torch.float32 (nibble-scaled)", xr.dtype)
    out, ws, cnt, tiles = _gemv_buffers(m, n, cfg, out_dtype, xr.device)
    b = (*bounds, n, n)[:2]
    parts_rs = rs.shape[-1] // (k // group_size)  # the sliced prologue's partial sums per group
    gemv2_w4a16_kernel[(tiles, cfg.split_k)](
        xr, rs, qweight, scales, zeros, bias if bias is not None else scales, ws, cnt, out,
        m, n, k, b[0], b[1],
        HAS_BIAS=bias is not None, G=group_size, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        KW=cfg.kw, SPLIT_K=cfg.split_k, RS=parts_rs, PDL=pdl,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return out


def dequant_rotate(
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    out: torch.Tensor | None = None,
    block_n: int = 0,
    num_warps: int = 0,
    nsplit: int = 0,
    dtype: torch.dtype = torch.float16,
    trans: bool | None = None,
    num_stages: int = 0,
    programs_per_sm: int = 0,
    out8: int = 0,
    amax: torch.Tensor | None = None,
    nk: bool = False,
) -> torch.Tensor:
    """W' [K, N] in `dtype` (that of `out` when given): each partition's rotated, dequantized
    weights (in the shared scratch); `trans` picks `dequant_rotate_t_kernel` (default: per
    platform, `dequant_trans`)."""
    from .fast_kernels import dequant_rotate_kernel, dequant_rotate_t_kernel

    k, n = qweight.shape[0] * 8, qweight.shape[1]
    g = group_size
    p = rot_hi.shape[0]
    hip = host._is_hip()
    if out is None:
        out = _scratch("dequant_w", k * n, dtype, qweight.device)[: k * n].view(k, n)
    use_t = dequant_trans(hip) if trans is None else trans
    b = (*bounds, n, n)[:2]
    pps = programs_per_sm or dequant_programs_per_sm(hip, use_t)
    bn = block_n or dequant_block_n(hip, use_t)
    qh = qweight_hi if qweight_hi is not None else qweight
    bits = 5 if qweight_hi is not None else 4
    nw, ns = num_warps or dequant_warps(hip, use_t), num_stages or dequant_stages(hip, use_t)
    if use_t:
        # the same blocks per program in every partition, ~pps programs per SM in all
        blocks = [-(-(hi - lo) // bn) for lo, hi in zip((0, *bounds), (*bounds, n), strict=True)]
        per = max(1, -(-sum(blocks) * (k // g) // (pps * host.sm_count(qweight.device))))
        if nsplit:
            per = -(-max(blocks) // nsplit)
        progs = [-(-nb // per) for nb in blocks]
        c = [sum(progs[:1]), sum(progs[:2])]
        dequant_rotate_t_kernel[(k // g, sum(progs))](
            qweight, qh, scales, zeros, rot_hi, rot_lo, out, n, k, b[0], b[1], per, c[0], c[1],
            G=g, BLOCK_N=bn, BITS=bits, OUT8=out8, NK=nk, amax_ptr=amax,
            num_warps=nw, num_stages=ns,
        )  # fmt: skip
        return out
    require(not out8 and not nk, "out8/nk", "the transposed kernel only", (out8, nk))
    nsplit = nsplit or max(1, -(-pps * host.sm_count(qweight.device) // ((k // g) * p)))
    dequant_rotate_kernel[(k // g, p, nsplit)](
        qweight, qh, scales, zeros, rot_hi, rot_lo, out, n, k, b[0], b[1],
        G=g, BLOCK_N=bn, BITS=bits, NSPLIT=nsplit, num_warps=nw, num_stages=ns,
    )  # fmt: skip
    return out


def dequant_trans(hip: bool) -> bool:
    """The transposed dequant kernel (`dequant_rotate_t_kernel`) on NVIDIA; gfx1201 keeps the
    kernel its AOT budget was measured on."""
    return not hip and DEQUANT_TRANS


def dequant_programs_per_sm(hip: bool, trans: bool = False) -> int:
    """Programs per SM the column splits aim for (see `dequant_block_n`)."""
    return DEQUANT_T_PROGRAMS_PER_SM if trans and not hip else DEQUANT_PROGRAMS_PER_SM


def dequant_block_n(hip: bool, trans: bool = False) -> int:
    """Columns per dequant block. gfx1201 (AOT, Triton 3.9): every 64-column build spilled
    (3-5 VGPRs at 8 waves, 1-3 stages); 32 columns, 4 waves, 2 stages: 222-226, none."""
    if hip:
        return 32
    return DEQUANT_T_BLOCK_N if trans else DEQUANT_BLOCK_N


def dequant_warps(hip: bool, trans: bool = False) -> int:
    """Warps (waves) per dequant program (see `dequant_block_n`)."""
    if hip:
        return 4
    return DEQUANT_T_WARPS if trans else DEQUANT_WARPS


def dequant_stages(hip: bool, trans: bool = False) -> int:
    """Software-pipelining depth of the dequant loop (see `dequant_block_n`)."""
    if hip:
        return 2
    return DEQUANT_T_STAGES if trans else DEQUANT_STAGES


def cast_fp16(x: torch.Tensor) -> torch.Tensor:
    """fp16(x) saturated at fp16's range, one launch (x contiguous)."""
    from .fast_kernels import cast_fp16_kernel

    x = x.contiguous()
    y = torch.empty_like(x, dtype=torch.float16)
    cast_fp16_kernel[(-(-x.numel() // 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=4)
    return y


def dequant_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """y = x @ W' (+ bias) on the vendor GEMM, in x.dtype. W' in x.dtype: one call, no casts;
    an fp16 W' with bf16 x: fp16(x) (saturated at fp16's range), cast back."""
    if w.dtype == x.dtype:
        return torch.mm(x, w) if bias is None else torch.addmm(bias.to(x.dtype), x, w)
    x16 = x if x.dtype == torch.float16 else cast_fp16(x)
    y = torch.mm(x16, w) if bias is None else torch.addmm(bias.to(torch.float16), x16, w)
    return y if x.dtype == torch.float16 else y.to(x.dtype)


# Fifth pass: the matrix-unit GEMV with the weights as the register operand
# (`decode_host.gemv3_linear`, sliced fp16 prologue) serves GEMV3_MIN_M <= M <= 16 at G = 128 on
# NVIDIA. Pass 5 run 4 (H200 2026-12-02, as served, same run): M = 16 qkv 29.7 us vs the tile
# kernels' 36.7, o_proj 15.8 / 19.4, gate_up 54.0 / 65.2, down 36.5 / 39.4, in_proj 36.1 / 37.5.
# Run 3 (same run per cell): at M = 8 it lost on 3 of 5 shapes (gate_up 51.1 / 49.3, down 35.5 /
# 31.5, in_proj 34.8 / 30.3), at M = 4 on 4 of 5, and at M = 1-2 to the FMA GEMV by 1.4-1.9x
# (qkv M = 1 27.1 vs 17.6).
# The tile kernels take a 16-row tile from M = 9 (their M = 8 config is an 8-row one), so
# M = 9..15 is the M = 16 case (interpolated, not measured). gfx1201 keeps the tile kernels.
GEMV3_MIN_M = 9
GEMV3 = True


def band(m: int, group_size: int = 128, hip: bool | None = None) -> str:
    """Which path serves M rows: "gemv", "gemv3" (the matrix-unit decode GEMV), "mma" (host's
    tile kernels) or "dequant"."""
    if m <= GEMV_MAX_M:
        return "gemv"
    if m >= DEQUANT_MIN_M:
        return "dequant"
    hip = host._is_hip() if hip is None else hip
    if GEMV3 and not hip and group_size == 128 and GEMV3_MIN_M <= m <= 16:
        return "gemv3"
    return "mma"


# W4A8 / W5A8 on NVIDIA (the same Prepared weights: int4 codes, fp16 scales, u8 zeros, blocks):
# where the 16-bit-activation paths are faster they serve the layer unquantized-activation (more
# accurate than A8, the same weight bytes). H200 2026-12-01, as served: W4A8 int8 at M = 1 took
# qkv 35.7 us against the W4A16 GEMV's 19.9 (BENCH.md, pass 2), and in prefill 0.26-0.29x
# cuBLAS against dequant + cuBLAS's 0.53-0.73x (pass 1). Pass 3, run 3 (same run): the A8
# kernels at M = 1 34.9 / 22.5 / 59.7 / 38.0 / 37.1 us (qkv / o_proj / gate_up / down / in_proj)
# against the routed op's 18.0 / 9.8 / 29.4 / 19.7 / 21.2; at M = 2048 the routed op 0.75-0.77x
# cuBLAS. gfx1201 keeps A8 (its fp8/int8 WMMA runs at twice bf16; not measured here).
A8_ROUTE = True
# Sixth pass: M = 9..16 (int4 weights) on the fifth pass's matrix-unit GEMV too; pass 5, run 4
# (H200, as served, same run): the A8 kernels took 1.01-1.43x the W4A16 op's time at M = 16
# (fp8 37.5 / 22.6 / 67.8 / 41.4 / 41.0 us against 29.7 / 15.8 / 54.0 / 36.5 / 36.1).
A8_GEMV3 = True
# Seventh pass: int5 (W5A8, I8 PG ZPE) at M <= 16 on the same matrix-unit GEMV, its fifth bits
# OR-ed into the fp16 pairs (`decode_kernels._UNPACK5_ASM`), 16-bit activations. H200 BENCH.md
# seventh pass, run 1 (same run, as served against the A8 kernels that served before, M = 1 /
# 4 / 16): qkv 37.1 / 36.8 / 39.3 us against 43.9 / 44.9 / 43.7, o_proj 15.5 / 19.8 / 20.6
# against 27.0 / 27.5 / 26.1, down 42.6 / 44.0 / 45.6 against 49.1 / 48.6 / 46.6, in_proj
# 43.5 / 43.9 / 46.3 against 48.8 / 48.5 / 47.7; gate_up (89 M weights) 74.3 / 76.7 / 79.8
# against 75.9 / 75.8 / 75.7. Eighth pass: on int5's own GEMV config (`decode_host.GEMV3_INT5`)
# gate_up took 62.7 / 66.5 / 70.9 us against the A8 kernels' 75.9 / 76.8 / 76.0 (run 2, same
# run), so every int5 layer takes the GEMV in the decode band.
INT5_GEMV3 = True
# Ninth pass: int5 at M <= 2 on the HFMA2 GEMV (`decode_kernels.gemv_h2_kernel(HI=True)`: the
# fifth bits OR-ed into the fp16 pairs, xr / 128; 28 instructions a word against int4's 17).
# Tenth pass, run 1 (H200 2026-12-04, kernels/device30.sh, same run, as served on the
# matrix-unit GEMV against the HFMA2 GEMV, M = 1 / 2, us): qkv 33.3 / 33.7 against 27.9 / 30.0,
# o_proj 14.5 / 19.6 against 12.3 / 13.2, gate_up 61.2 / 63.7 against 44.8 / 49.6, down
# 34.8 / 35.4 against 29.9 / 31.2, in_proj 31.3 / 32.7 against 29.1 / 31.6 (1.03-1.48x; error
# 1.0-1.2e-3 relative, the bf16 output rounding).
INT5_H2 = True


def a8_route(m: int, group_size: int, int5: bool, hip: bool, act_format: str = "fp8",
             bounds: tuple[int, ...] = ()) -> str | None:  # fmt: skip
    """The path ("gemv" | "gemv-h2" | "gemv-mma" | "gemv3" | "dequant" | "w8": the 8-bit vendor
    GEMM, `w8_linear`) that serves a W4A8 / W5A8 call of M rows (partition `bounds`), or None
    (the A8 kernels)."""
    if hip or not A8_ROUTE:
        return None
    if mma_gemv_ok(hip, m, group_size, bounds, 5 if int5 else 4):
        return "gemv-mma"
    if int5 and INT5_H2 and h2_ok(hip, m, group_size):
        return "gemv-h2"
    if int5 and INT5_GEMV3 and GEMV3 and group_size == 128 and m <= 16:
        return "gemv3"
    route = band(m, group_size)
    if route == "gemv" and not int5:
        return "gemv"
    if route == "gemv3" and not int5 and A8_GEMV3:
        return "gemv3"
    if m >= W8_MIN_M and act_format in W8_FORMATS:
        return "w8"
    return "dequant" if route == "dequant" else None


# --------------------------------------------------------------------------- W4A8 prefill, 8-bit
# Fourth pass: W4A8 / W5A8 at M >= W8_MIN_M on NVIDIA on the vendor 8-bit GEMM. The weight pass
# writes W' (rotated, dequantized) as 8-bit codes with one scale per output channel, max |W'| over
# K (a load-time constant: `w8_amax`, `Prepared.w8_amax`), stored [N, K] (the GEMM's column-major
# operand); the activations are quantized per token by one row pass (`quant_rows_kernel`); then
# fp8: `torch._scaled_mm` rowwise (both scales and the bias in its epilogue), int8:
# `torch._int_mm` (int32 out) and one epilogue pass.
# Pass 4, run 1 (H200 2026-12-02, M = 2048, same run): fp8 171.4 / 398.5 / 211.7 us (qkv /
# gate_up / down) = 1.18-1.21x cuBLAS bf16 (203.8 / 483.2 / 249.2), int8 299.1 / 695.0 / 364.0
# (0.68-0.70x: slower than the bf16 dequant path's 264.6 / 605.7 / 292.3), so fp8 ships. Error
# (fp64, K = 128 case): the fp8 route 3.7e-2 vs the W4A16 reference and 4.4e-2 vs the W4A8 fp8
# format's own (its act-quant noise alone: 2.6e-2); the int8 route 1.0e-2 (format noise 7.0e-3).
# So the format's fp8 checkpoints take the fp8 route (about its own noise level, 1.2x faster
# than cuBLAS); int8 ones stay on the bf16 dequant path (more accurate than their format, and
# faster than the int8 route).
# Twenty-third pass, measured below 256 (H100, `bash kernels/device50.sh 200 100`: the int4 half,
# kernels/bench-2026-12-05-h100-issue14-pass23-int4-mid.json, every route forced, same run, us,
# the route / the A8 tile kernels (W4A8 fp8) that served): at M = 192 the route wins on four of
# the five 27B shapes and ties o_proj (qkv 79.4 / 113.5, gate_up 177.5 / 189.4, down 100.5 /
# 102.8, in_proj 89.2 / 108.2, o_proj 42.8 / 42.1); at M = 96..128 the two split the shapes (the
# tile kernels: qkv 70.1-71.6 / 73.4-73.8, in_proj 65.7-71.7 / 83.2-83.8, o_proj 39.9 / 40.8 at
# 96; the route: gate_up 160.8-160.9 / 172.2-181.7, down 94.2 / 98.5-104.1); the route's time is
# flat in M there while the tile kernels' third 64-row tile (M > 128) costs them 1.6x (qkv 71.6
# at 128, 113.5 at 192). So the route serves from the row after 128.
W8_MIN_M = 129
W8_KIND = "fp8"
W8_FORMATS = ("fp8",)  # the act formats whose calls take the 8-bit route
W8_KINDS = ("fp8", "int8")
_W8_CODE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}
_W8_TOP = {"fp8": 448.0, "int8": 127.0}


def w8_amax(
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    chunk: int = 8,
) -> torch.Tensor:
    """max over K of |W'[k, n]| per output channel, [N] fp32 (torch ops, on the tensors' device,
    `chunk` groups at a time): W'_g = (hi + lo)_g @ ((C_g - z) * s) per partition."""
    k, n = qweight.shape[0] * 8, qweight.shape[1]
    g = group_size
    ngroups = k // g
    dev = qweight.device
    out = torch.zeros(n, dtype=torch.float32, device=dev)
    edges = (0, *bounds, n)
    sh = (torch.arange(8, device=dev, dtype=torch.int32) * 4).view(1, 8, 1)
    for g0 in range(0, ngroups, chunk):
        g1 = min(g0 + chunk, ngroups)
        w = qweight[g0 * g // 8 : g1 * g // 8]
        c = ((w.unsqueeze(1) >> sh) & 15).reshape(-1, n)
        if qweight_hi is not None:
            h = qweight_hi[g0 * g // 32 : g1 * g // 32]
            hs = torch.arange(32, device=dev, dtype=torch.int32).view(1, 32, 1)
            c = c | (((h.unsqueeze(1) >> hs) & 1).reshape(-1, n) << 4)
        d = c.view(g1 - g0, g, n).float() - zeros[g0:g1].float().unsqueeze(1)
        d = d * scales[g0:g1].float().unsqueeze(1)
        for p in range(len(edges) - 1):
            lo, hi = edges[p], edges[p + 1]
            b = rot_hi[p, g0:g1].float() + rot_lo[p, g0:g1].float()
            wp = torch.bmm(b, d[:, :, lo:hi].contiguous())
            out[lo:hi] = torch.maximum(out[lo:hi], wp.abs().amax(dim=(0, 1)))
    return out


def w8_ok(n: int, k: int, kind: str) -> bool:
    """The vendor 8-bit GEMM's shape rules (fp8 rowwise: both of W's dims % 16; int8: % 8)."""
    q = 16 if kind == "fp8" else 8
    return n % q == 0 and k % q == 0


def quant_rows(x: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 8-bit activations: x [M, K] -> (codes [M, K], scales [M] fp32), one launch."""
    from .fast_kernels import quant_rows_kernel

    m, k = x.shape
    q = torch.empty(m, k, dtype=_W8_CODE[kind], device=x.device)
    sc = torch.empty(m, dtype=torch.float32, device=x.device)
    quant_rows_kernel[(m,)](x, q, sc, k, x.stride(0), INT8=kind == "int8", BLOCK=1024,
                            num_warps=4)  # fmt: skip
    return q, sc


def w8_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    bounds: tuple[int, ...],
    group_size: int,
    amax: torch.Tensor,
    bias: torch.Tensor | None = None,
    kind: str = "",
) -> torch.Tensor:
    """y = q8(x) @ q8(W') (+ bias) in x.dtype on the vendor 8-bit GEMM (section note above)."""
    from .fast_kernels import int_mm_epilogue_kernel

    kind = kind or W8_KIND
    require(kind in W8_KINDS, "kind", W8_KINDS, kind)
    m, k = x.shape
    n = qweight.shape[1]
    w = _scratch("w8_" + kind, k * n, _W8_CODE[kind], x.device)[: k * n].view(n, k)
    dequant_rotate(qweight, qweight_hi, scales, zeros, rot_hi, rot_lo, bounds, group_size, out=w,
                   trans=True, out8=1 if kind == "int8" else 2, amax=amax, nk=True)  # fmt: skip
    xq, sa = quant_rows(x, kind)
    sw = amax * (1.0 / _W8_TOP[kind])
    if kind == "fp8":
        return torch._scaled_mm(
            xq, w.t(), scale_a=sa.view(m, 1), scale_b=sw.view(1, n), out_dtype=x.dtype,
            bias=None if bias is None else bias.to(x.dtype),
        )  # fmt: skip
    acc = torch._int_mm(xq, w.t())
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    int_mm_epilogue_kernel[(-(-m // 32), -(-n // 128))](
        acc, sa, sw, bias if bias is not None else sw, y, m, n, HAS_BIAS=bias is not None,
        BLOCK_M=32, BLOCK_N=128, num_warps=4,
    )  # fmt: skip
    return y
