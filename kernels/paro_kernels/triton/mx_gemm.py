"""Host side of the MXFP4 tile GEMM and prefill paths: the GEMM (W4A16, W4A8), its activations,
the dequantize + vendor GEMM path and the 8-bit vendor GEMM route.

Shape contract of the MXFP4 GEMM (asserted in `check_gemm`):

    a        [P, M, K]       fp8 e4m3 (W4A8) or bf16 / fp16 (W4A16); rows stride_am, unit along K
    a_scale  [P, M]          fp32 per-token scales (W4A8 only)
    qw       [N, Kp/2]       u8    nibble planes = whole MX blocks (mx_gemm_kernels), Kp = ceil64(K)
    sc       [Kp/32, N]      u8    e8m0 (zero-padded past K/32)
    cmax     [N]             int32 largest e8m0 code of each column's nonzero blocks
    bounds   P - 1 ints      first output column of planes 1.. (multiples of 16, < N)
    bias     [N] or None     any float dtype
    -> y     [M, N]          out dtype
    K % 32 == 0; N >= 1; all tensors on one device.
"""

from __future__ import annotations

import itertools

import torch

from .._contract import check_tensor, require
from . import launch, mx_repack, prologue
from .launch import gemm_out_grid, sm_count
from .mx_gemm_kernels import fp8_token_quant_kernel, mx_dequant_kernel, mx_gemm_kernel


def pick_config(
    m: int, n: int, k: int, bounds: tuple[int, ...], opk: int, sms: int = 132, hip: bool = False
) -> mx_repack.Config:
    """Launch configuration for [M, K] x [K, N] (operand kind opk) with plane boundaries.

    Decode (M <= 16): a 16-row tile and split-K until ~8 programs per SM are in flight (the
    weights are the traffic, as in the int4 decode GEMM; the H200 sweep found 64- and 256-wide
    tiles no better). Above: 128-row tiles on NVIDIA;
    gfx1201's 64 KB LDS and 256 VGPRs cap the tile at 64 x 64 (AOT report).
    """
    align = mx_repack._align(bounds)
    if m <= mx_repack.DECODE_MAX_M:
        block_n = mx_repack._block_n(64 if hip else 128, align)
        tiles = -(-n // block_n)
        pairs = -(-k // 64)
        split = max(1, min(pairs // 2, -(-mx_repack.DECODE_PROGRAMS_PER_SM * sms // tiles)))
        per = -(-pairs // split)
        return mx_repack.Config(16, block_n, -(-pairs // per), 4, 2 if hip else 4)
    if hip:
        # gfx1201 (AOT report): 64 x 64 with 4 waves uses 238-256 VGPRs and the per-block
        # form spills; 8 waves hold 145-185.
        return mx_repack.Config(64, mx_repack._block_n(64, align), 1, 8, 2)
    if m <= 64:
        block_n = mx_repack._block_n(128, align)
        tiles = -(-m // 64) * -(-n // block_n)
        pairs = -(-k // 64)
        split = max(1, min(pairs // 4, -(-sms // tiles)))
        return mx_repack.Config(64, block_n, split, 4, 4)
    # H200 sweep (2026-11-29, W4A8 M=2048): 128 x 128 with 4 warps and 4 stages beat 8 warps /
    # 3 stages by 15-21% (qkv 784 vs 923 us, gate_up 1830 vs 2212, down 977 vs 1124).
    return mx_repack.Config(128, mx_repack._block_n(128, align), 1, 4, 4)


def fp8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token e4m3: x [R, K] (unit stride along K) -> (q [R, K] fp8, s [R] fp32 = amax/448)."""

    check_tensor(x, "x", dtype=(torch.bfloat16, torch.float16, torch.float32), ndim=2)
    require(x.stride(1) == 1, "x", "unit stride along K", x.stride())
    r, k = x.shape
    q = torch.empty(r, k, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(r, dtype=torch.float32, device=x.device)
    if r:
        bk = min(mx_repack.QUANT_BLOCK_K, max(128, 1 << (k - 1).bit_length()))
        bits = prologue.e4m3_bits(launch.is_hip())
        fp8_token_quant_kernel[(r,)](x, q, s, k, x.stride(0), BLOCK_K=bk, E4M3_BITS=bits,
                                     num_warps=4)  # fmt: skip
    return q, s


def check_gemm(
    a: torch.Tensor, a_scale: torch.Tensor | None, w: mx_repack.MxWeight, bounds: tuple[int, ...],
    bias: torch.Tensor | None,
) -> None:  # fmt: skip
    """Assert the module docstring's shape/dtype contract."""
    check_tensor(a, "a", dtype=tuple(mx_repack.OPK), ndim=3)
    p, m, k = a.shape
    require(m >= 1 and a.stride(2) == 1, "a", "M >= 1 rows, unit stride along K", a.stride())
    require(a.stride(0) == m * a.stride(1), "a", "planes stacked along dim 0", a.stride())
    require(k == w.k, "a.shape[2] (K)", f"the weight's K = {w.k}", k)
    require(p == len(bounds) + 1, "a.shape[0] (planes)", f"{len(bounds) + 1}", p)
    fp8 = a.dtype == torch.float8_e4m3fn
    require((a_scale is not None) == fp8, "a_scale", "given exactly for fp8 activations",
            "present" if a_scale is not None else "missing")  # fmt: skip
    if a_scale is not None:
        check_tensor(a_scale, "a_scale", dtype=torch.float32, shape=[p, m])
        require(a_scale.is_contiguous(), "a_scale", "contiguous", a_scale.stride())
    n = w.n
    require(
        all(x < y for x, y in zip((0, *bounds), (*bounds, n), strict=True)),
        "bounds", f"strictly increasing inside 0..{n}", list(bounds),
    )  # fmt: skip
    if bias is not None:
        check_tensor(bias, "bias", shape=[n])
    devs = {t.device for t in (a, w.qw, w.sc, w.cmax)}
    require(len(devs) == 1, "devices", "one device for every tensor", devs)


def mx_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    w: mx_repack.MxWeight,
    bounds: tuple[int, ...],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: mx_repack.Config | None = None,
    fold: bool | None = None,
) -> torch.Tensor:
    """y [M, N] = A_p W^T (* a_scale) (+ bias) per plane p; contract in the module doc.

    fold=None takes the folded GEMM exactly when it is exact on this weight (`MxWeight.fold_ok`).
    """

    check_gemm(a, a_scale, w, bounds, bias)
    _, m, k = a.shape
    n = w.n
    opk = mx_repack.OPK[a.dtype]
    fold = w.fold_ok(opk) if fold is None else fold
    hip = torch.version.hip is not None and a.device.type == "cuda"
    cfg = config or pick_config(m, n, k, bounds, opk, sm_count(a.device), hip)
    b = (*bounds, n, n)[:2]
    out, grid = gemm_out_grid(m, n, cfg, out_dtype, a.device)
    mx_gemm_kernel[grid](
        a, a_scale if a_scale is not None else w.cmax, w.qw, w.sc, w.cmax,
        bias if bias is not None else w.cmax, out,
        m, n, k, a.stride(1), b[0], b[1], cfg.split_k,
        OPK=opk, A_SCALED=a_scale is not None, FOLD=fold, HAS_BIAS=bias is not None,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ATOMIC=cfg.split_k > 1, GROUP_M=cfg.group_m,
        IMPRECISE=mx_repack.FP8_PROMOTE if opk == 0 else None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out.to(out_dtype) if cfg.split_k > 1 else out


# H200 2026-12-04: prefill on the layer dequantized to
# x.dtype (`mx_dequant`: the rotation folded in for MXFP4-PARO) and the vendor GEMM, from
# DEQUANT_MIN_M rows. Before it the MXFP4 GEMM served every prefill row: H200
# (docs/notebook/kernels-2026-11-29-to-12-06.md, run 2, us) M = 2048 qkv
# 798 / gate_up 1844 / down 1003 against cuBLAS bf16's 201 / 477 / 229 (0.23-0.26x). Run 3 (same run
# per cell, the GEMM / the dequant path forced, MXFP4 and MXFP4-PARO): M = 2048 down 1026 / 281 and
# 1066 / 315, in_proj 913 / 267 and 959 / 300 (0.72-0.81x cuBLAS); M = 128 1.2-3.2x on every shape
# (qkv 176 / 76, gate_up 250 / 174, PARO gate_up 258 / 220); M = 64 the GEMM on 6 of 10 cells (PARO
# qkv 82 / 96, in_proj 74 / 82; gate_up 200 / 174 the other way). 65..127 is interpolated (the
# GEMM's M = 128 tiles).
DEQUANT = True


DEQUANT_MIN_M = 65


DEQUANT_BLOCK_N = 64  # columns a block: the rotated kernel's [64, 128] fp32 accumulator


DEQUANT_PLAIN_BLOCK_N = 128


# gfx1201 (AOT, Triton 3.9, 4 waves; not served there): the rotated kernel at 64 columns took
# 256 VGPRs and spilled (371), 32: 250, 16: 165 and none; the plain one at 128: 172.
DEQUANT_HIP_BLOCK_N = 16


DEQUANT_WARPS = 4


DEQUANT_PROGRAMS_PER_SM = 4


# H200 2026-12-04: the rotated dequant with the block scales folded into the values (one dot
# chain a group, `mx_dequant_kernel` FOLD). H100 2026-12-05 (the
# W8 note's JSONs): within 3% of the per-block form alone and on the path on every 27B shape
# but o_proj (5-6% faster), its W' 2.1-2.4e-5 off the per-block one's: off (no gain worth a
# numerics change).
DEQUANT_FOLD = False


def dequant_block_n(rot: bool, hip: bool) -> int:
    """Columns a block of `mx_dequant_kernel` (before narrowing to the plane boundaries)."""
    if not rot:
        return DEQUANT_PLAIN_BLOCK_N
    return DEQUANT_HIP_BLOCK_N if hip else DEQUANT_BLOCK_N


def dequant_ok(m: int, hip: bool) -> bool:
    """Whether an M-row call of an MXFP4 layer is served on `mx_dequant` + the vendor GEMM:
    NVIDIA, where it was measured (gfx1201 keeps the GEMM: its fp8 WMMA runs at twice bf16;
    the dequant kernel is built for it in CI)."""
    return DEQUANT and not hip and m >= DEQUANT_MIN_M


def _dequant_launch(prep: mx_repack.Prepared, out: torch.Tensor, s8: torch.Tensor | None, rot: bool,
                    fold: bool, block_n: int, programs_per_sm: int) -> None:  # fmt: skip
    """One `mx_dequant_kernel` launch into out [N, K] (s8: the e4m3 codes' column scales)."""

    w = prep.weight
    n, k = w.n, w.k
    g = prep.group_size if rot else 64
    require(not rot or g in (64, 128), "group_size", "64 or 128 for the rotated dequant", g)
    require(tuple(out.shape) == (n, k) and out.is_contiguous(), "out",
            f"contiguous [{n}, {k}]", tuple(out.shape))  # fmt: skip
    bn = block_n or dequant_block_n(rot, launch.is_hip())
    if rot:
        bn = mx_repack._block_n(bn, mx_repack._align(prep.bounds))
    bounds = prep.bounds if rot else ()
    b = (*bounds, n, n)[:2]
    # every program walks `per` column blocks of one partition (as the int4 dequant's)
    blocks = [-(-(hi - lo) // bn) for lo, hi in zip((0, *bounds), (*bounds, n), strict=True)]
    groups = -(-k // g)
    pps = programs_per_sm or DEQUANT_PROGRAMS_PER_SM
    per = max(1, -(-sum(blocks) * groups // (pps * sm_count(w.qw.device))))
    progs = [-(-nb // per) for nb in blocks]
    c = [sum(progs[:1]), sum(progs[:2])]
    dummy = w.cmax
    mx_dequant_kernel[(groups, sum(progs))](
        w.qw, w.sc, prep.rot_hi if rot else dummy, prep.rot_lo if rot else dummy, w.cmax, out,
        dummy if s8 is None else s8, n, k, b[0], b[1], per, c[0], c[1],
        G=g, BLOCK_N=bn, ROT=rot, FOLD=fold, OUT8=s8 is not None, num_warps=DEQUANT_WARPS,
        num_stages=2,
    )  # fmt: skip


def mx_dequant(prep: mx_repack.Prepared, dtype: torch.dtype, out: torch.Tensor | None = None,
               block_n: int = 0, programs_per_sm: int = 0,
               fold: bool | None = None) -> torch.Tensor:  # fmt: skip
    """W'^T [N, K] in `dtype` (bf16 / fp16; default in the int4 dequant path's shared scratch):
    the layer's e2m1 x e8m0 weights, with the rotation folded in (W'_g = B_g W_g) when the layer
    has one (MXFP4-PARO), so that x @ W' is the layer's output. fp16 saturates at its range.
    `fold` (rotated layers): the block scales folded into one dot chain a group (None:
    DEQUANT_FOLD where the weight's spans allow it exactly, `fold_ok(1)`)."""

    require(dtype in mx_repack.A16_DTYPES, "dtype", mx_repack.A16_DTYPES, dtype)
    w = prep.weight
    rot = prep.rot_hi is not None and prep.rot_lo is not None
    if out is None:
        out = launch.scratch("dequant_w", w.n * w.k, dtype, w.qw.device)[: w.n * w.k]
        out = out.view(w.n, w.k)
    require(out.dtype == dtype, "out", f"dtype {dtype}", out.dtype)
    fold = rot and ((DEQUANT_FOLD and w.fold_ok(1)) if fold is None else fold)
    span = mx_repack.FOLD_SPAN[1]
    require(not fold or w.fold_ok(1), "fold", f"False unless every nonzero block lies within "
            f"{span} binades of its column's largest (fp16)", f"span {w.span}")  # fmt: skip
    _dequant_launch(prep, out, None, rot, fold, block_n, programs_per_sm)
    return out


def dequant8(prep: mx_repack.Prepared, block_n: int = 0,
             programs_per_sm: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The layer unrotated for the 8-bit vendor GEMM: (codes [N, K] e4m3, scales [N] fp32),
    W^T = codes x scales per row: the MXFP4 GEMM's e4m3 fold, exact where `fold_ok(0)` (else
    refused). Both in shared scratch (the codes in int4's w8 route buffer), valid until the
    next call."""

    w = prep.weight
    span, cmin = mx_repack.FOLD_SPAN[0], mx_repack.FOLD_CMAX_MIN[0]
    require(w.fold_ok(0), "weight", f"every nonzero block within {span} binades of its "
            f"column's largest, largest codes >= {cmin} (the e4m3 fold)",
            f"span {w.span}, smallest largest code {w.cmax_min}")  # fmt: skip
    dev, n, k = w.qw.device, w.n, w.k
    codes = launch.scratch("w8_fp8", n * k, torch.float8_e4m3fn, dev)[: n * k].view(n, k)
    scales = launch.scratch("w8_scale", n, torch.float32, dev)[:n]
    _dequant_launch(prep, codes, scales, False, False, block_n, programs_per_sm)
    return codes, scales


# H200 2026-12-04: W4A8 (fp8) prefill on the 8-bit vendor GEMM, as int4's w8 route
# (route.py, W4A8 prefill): the activations as the MXFP4 GEMM's fp8 mode takes them (`activations`:
# each plane rotated for MXFP4-PARO, per-token e4m3), the weight unrotated as that GEMM's own
# e4m3 operand with a scale a column (`dequant8`: 1 byte a weight written, no rotation dots), then
# `torch._scaled_mm` rowwise per plane with fp32 accumulation. The same operands as the GEMM's fp8
# mode, so the box's W4A8 numerics (gfx1201's fp8 WMMA), where the dequant path serves 16-bit
# activations. cuBLASLt's rowwise epilogue writes bf16: bf16 layers only (forced on fp16, the
# output is cast).
# H100 2026-12-05, measured (M = 64..8192 and M = 64, 96, 128:
# benchmarks/results/bench-2026-12-05-h100-mx-prefill{,-small}.json, us, the route /
# as
# served before, 27B TP=2 shapes; the w8 output within 8.2e-4 of the GEMM's fp8 mode):
# - MXFP4 (no rotation) wins on every shape at every M measured, 64..8192: M = 64 qkv 63.6 / 74.0,
#   gate_up 143 / 195; M = 2048 qkv 182 / 240, gate_up 407 / 622, down 242 / 303, in_proj 208 /
#   277 (cuBLAS bf16 213 / 475 / 226 / 215); M = 8192 gate_up 1296 / 2105 (cuBLAS 2033).
# - MXFP4-PARO, one activation pass a plane: wins where the planes are wide, from M = 96 (M = 2048
#   gate_up 537 / 657, down 286 / 321, in_proj (6144 + 2048) 289 / 305; M = 96 in_proj 92 / 119,
#   gate_up 150 / 238), at M = 8192 in_proj ties (996 / 995); loses at M = 64 on in_proj (91 / 81,
#   the GEMM) and on qkv's 512-column planes from M = 2048 (322 / 265, 1057 / 847; ties at 96-256).
# H100 2026-12-05, measured below M = 64 (the
# MXFP4 half, M = 16..48, benchmarks/results/bench-2026-12-05-h100-mx-small-m.json,
# us, the
# route / the GEMM that served, same run): from M = 24 the route wins on every unrotated shape
# but in_proj, where it ties to M = 32 (M = 24 qkv 69.3 / 73.2, gate_up 142 / 190, down 86 / 95,
# o_proj 34.3 / 37.0, in_proj 73.5 / 73.5; M = 48 in_proj 72.4 / 74.6), so it serves from the
# row after the decode GEMVs' last (M = 16: the mma GEMV's 11-35 us against the route's
# 34-140) where the decode chunks (`mx_gemv_mma.chunks_ok`) do not. Rotated, it wins from
# M = 24 where every plane is at least 4096 wide (M = 24..48 gate_up 152-154 / 193-198, down 90-92 /
# 98-102, o_proj 37-38 / 40-41) and loses on in_proj's 2048-column plane (91-92 / 77-80) until
# M = 96, where the GEMM's 64-row tiles give way to the dequant path (92 / 119).
W8 = True


W8_MIN_M = 17


# (from M rows, the narrowest plane of a rotated layer at least this many columns): the route
W8_ROT_PLANES = ((96, 2048), (17, 4096))


def narrowest_plane(n: int, bounds: tuple[int, ...]) -> int:
    """Columns of the narrowest plane of an N-column layer split at `bounds`."""
    return min(hi - lo for lo, hi in itertools.pairwise((0, *bounds, n)))


def w8_ok(m: int, act: str, hip: bool, dtype: torch.dtype = torch.bfloat16,
          w: mx_repack.MxWeight | None = None, rot_plane: int = 0) -> bool:  # fmt: skip
    """Whether an M-row call of an `act` layer is served on `w8_linear` (w: its weight, whose
    block spans must sit in the e4m3 fold and N on the 8-bit GEMM's multiple of 16; rot_plane:
    for a rotated layer (MXFP4-PARO), the columns of its narrowest plane, 0 unrotated)."""
    fits = w is None or (w.fold_ok(0) and w.n % 16 == 0)
    if rot_plane:
        fits = fits and any(m >= lo and rot_plane >= cols for lo, cols in W8_ROT_PLANES)
    return W8 and not hip and act == "fp8" and dtype == torch.bfloat16 and m >= W8_MIN_M and fits


def reserve_scratch(prep: mx_repack.Prepared, dtype: torch.dtype = torch.bfloat16) -> None:
    """Grow, at load, the shared scratch this layer's prefill routes write to their size for it
    (the dequant path's W' in `dtype`, the model's activation dtype; the 8-bit route's codes and
    column scales where the layer can take that route), so that no later call grows them.

    Since 2026-12-05 (H100) one MXFP4-PARO model takes the dequant path at some M (its
    layers with a plane under 4096 columns at 65..95, thin-plane ones beyond) and the 8-bit
    route at others, so vLLM's profile run at the largest M no longer grows the dequant scratch
    to its largest layer: the CUDA graph captures after it would. `launch.scratch` keeps a
    captured buffer alive when it grows (correct either way); sizing it here makes the memory
    part of the model's, before vLLM sizes its KV cache, and leaves no retired copies. NVIDIA
    only (gfx1201 serves neither route)."""

    w = prep.weight
    if launch.is_hip():
        return
    dev = w.qw.device
    if DEQUANT:
        launch.scratch("dequant_w", w.n * w.k, dtype, dev)
    plane = narrowest_plane(w.n, prep.bounds) if prep.rot_hi is not None else 0
    if w8_ok(1 << 30, "fp8", False, dtype, w, plane):  # the route at some M
        launch.scratch("w8_fp8", w.n * w.k, torch.float8_e4m3fn, dev)
        launch.scratch("w8_scale", w.n, torch.float32, dev)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t, or a copy of it where its data is not 16-byte aligned: cuBLASLt answers
    CUBLAS_STATUS_NOT_SUPPORTED for a rowwise scale vector that is not (H200, torch 2.11: a
    plane's slice of the [P, M] token scales at odd M, the 2026-12-05 GPU suite)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def w8_linear(
    prep: mx_repack.Prepared, x: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """y [M, N] in x.dtype = fp8(rot(x)) (codes x scales)^T (+ bias) per plane, on the vendor
    8-bit GEMM (section note above)."""
    n = prep.weight.n
    require(n % 16 == 0, "N (output features)", "a multiple of 16 (the 8-bit GEMM)", n)
    codes, sw = dequant8(prep)
    a, sa = activations(prep, x, "fp8")
    m = x.shape[0]
    b = None if bias is None else bias.to(torch.bfloat16)
    edges = (0, *prep.bounds, n)
    ys = [
        torch._scaled_mm(
            a[p], codes[lo:hi].t(), scale_a=_aligned(sa[p].view(m, 1)),
            scale_b=_aligned(sw[lo:hi].view(1, hi - lo)),
            bias=None if b is None else _aligned(b[lo:hi]), out_dtype=torch.bfloat16,
        )
        for p, (lo, hi) in enumerate(itertools.pairwise(edges))
    ]  # fmt: skip
    y = ys[0] if len(ys) == 1 else torch.cat(ys, 1)
    return y if y.dtype == x.dtype else y.to(x.dtype)


def activations(
    prep: mx_repack.Prepared, x: torch.Tensor, act: mx_repack.ActMode, fused: bool | None = None
) -> tuple[torch.Tensor, ...]:
    """The GEMM's A operand(s) for x [M, K]: (a [P, M, K],) or (a fp8, a_scale [P, M]).

    MXFP4-PARO, fp8: fused=True is the int4 kernels' one-launch rotate + scale + per-token e4m3
    prologue (`prologue.rotate_quant`); fused=False composes `prologue.rotate_scale` (fp16 out) and
    `fp8_quant` (two launches). None = PARO_FUSED_PROLOGUE. a16: `prologue.rotate_scale`, fp16 out.
    NVFP4 -> MXFP4: x itself (a16) or its per-token e4m3 (fp8), one plane.
    """
    require(act in mx_repack.ACT_MODES, "act", " or ".join(mx_repack.ACT_MODES), act)
    check_tensor(x, "x", dtype=mx_repack.A16_DTYPES, ndim=2)
    m, k = x.shape
    require(x.stride(1) == 1, "x", "unit stride along K", x.stride())
    if prep.rot_hi is not None and prep.rot_lo is not None:
        xc = x.to(prep.rot_hi.dtype)  # the prologues take x in the blocks' dtype
        g = prep.group_size
        if act == "fp8" and (mx_repack.PARO_FUSED_PROLOGUE if fused is None else fused):
            q, asc, _ = prologue.rotate_quant(xc, prep.rot_hi, prep.rot_lo, g, "fp8", "token")
            return q, asc[:, :, 0].contiguous()  # per token: the scale repeats over groups
        xr, _ = prologue.rotate_scale(xc, prep.rot_hi, prep.rot_lo, g)
        if act == "a16":
            return (xr,)
        q, s = fp8_quant(xr.view(-1, k))
        return q.view(xr.shape), s.view(xr.shape[0], m)
    if act == "a16":
        return (x.unsqueeze(0),)
    q, s = fp8_quant(x)
    return q.unsqueeze(0), s.unsqueeze(0)
