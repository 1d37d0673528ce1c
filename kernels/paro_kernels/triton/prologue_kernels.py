"""Triton kernels of the activation prologues: rotate + channel-scale (+ quantize to e4m3 / int8),
from the folded blocks or the Givens records, whole or sliced.

Portable Triton (CUDA and ROCm): only `tl.dot`, integer shifts and fp32 arithmetic.

Why the rotation is a dense block: each group's krot Givens layers and its channel scales fold at
load into one G x G matrix diag(cs_g) R_g^T, so the prologue is a block-diagonal product on the
matrix units (M*K*G*2 FLOPs each half: microseconds) instead of krot dependent gather passes. The
matrix is split hi + lo in the activation dtype, so two dots reproduce it to ~16 mantissa bits
while x is used exactly.

Why a second, Givens prologue at decode (M <= 16): the folded hi + lo blocks are 2 * 2 * G * K
bytes per rotation run (7.8 MB for qkv, 40% of its int4 weights), all of it read to rotate one
token. Applying the krot layers of pair rotations directly reads (3 * krot + 1) * 4 * K bytes per
run (~0.5 MB) and computes in fp32 (exact to ~1e-7); each layer is one in-register gather.

Why fp16 rotated activations: with bf16 operands the rounding of the rotated activations alone
adds ~1.6e-3 relative error (2.35e-3 total, measured against the fp64 reference), fp16 keeps the
result at the bf16 output-rounding floor (1.7e-3). The prologue saturates at the fp16 range.

W4A8: the quantizing prologue writes e4m3 or int8 codes (per group or per token) and the code
sums per group, so the GEMM applies scales and the zero point outside its exact products.
"""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Triton >= 3.4 (PDL: programmatic dependent launch, NVIDIA sm_90+)
    from triton.language.extra.cuda import gdc_launch_dependents as gdc_launch_dependents
except ImportError:  # pragma: no cover - older Triton: no PDL (the host never sets it then)
    gdc_launch_dependents = None

FP16_MAX = tl.constexpr(65504.0)


@triton.jit
def rotate_scale_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    rot_hi_ptr,  # [P, K/G, G, G] x.dtype: hi part of diag(cs_g) R_g^T
    rot_lo_ptr,  # [P, K/G, G, G] x.dtype: lo part (rot - hi)
    xr_ptr,  # [P, M, K] fp16 out: (x * cs_p) R_p^T
    rs_ptr,  # [P, M, K/G] fp32 out: per-group row sums of the fp16 xr values
    M,
    K,
    stride_xm,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NIBBLE_SCALED: tl.constexpr = False,
):
    """One program per (row block, group, partition): xr = x_g @ (hi + lo), then the row sums.

    NIBBLE_SCALED (the FMA GEMV's input): xr is fp32, channel k times 2^-e with e the
    offset of its nibble field in `prologue_kernels._nibble` (exact), so the GEMV multiplies raw
    magic-number floats; the row sums stay those of the fp16 values.
    """
    pid_m = tl.program_id(0)
    g = tl.program_id(1)
    p = tl.program_id(2)
    ngroups = K // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_g = tl.arange(0, G)
    m_mask = offs_m < M
    x = tl.load(
        x_ptr + offs_m[:, None] * stride_xm + g * G + offs_g[None, :],
        mask=m_mask[:, None],
        other=0.0,
    )
    rot_off = ((p * ngroups + g) * G + offs_g[:, None]) * G + offs_g[None, :]
    acc = tl.dot(x, tl.load(rot_hi_ptr + rot_off))
    acc = tl.dot(x, tl.load(rot_lo_ptr + rot_off), acc)
    xr = tl.clamp(acc, -FP16_MAX, FP16_MAX).to(tl.float16)
    row = p * M + offs_m
    out = xr
    if NIBBLE_SCALED:
        jj = offs_g % 8
        e = tl.where(jj < 5, 4 * jj, 4 * (jj - 3))
        out = xr.to(tl.float32) * ((127 - e) << 23).to(tl.float32, bitcast=True)[None, :]
    tl.store(xr_ptr + row[:, None] * K + g * G + offs_g[None, :], out, mask=m_mask[:, None])
    tl.store(rs_ptr + row * ngroups + g, tl.sum(xr.to(tl.float32), axis=1), mask=m_mask)


@triton.jit
def givens_rotate_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    gi_ptr,  # [P, KROT, K] int32: group-local index of each channel's partner in layer r
    gc_ptr,  # [P, 2 * KROT + 1, K] fp32: channel scales, then cos per layer, then signed sin
    xr_ptr,  # [P, M, K] fp16 out: (x * cs_p) R_p^T
    rs_ptr,  # [P, M, K/G] fp32 out: per-group row sums of the fp16 xr values
    ws_ptr,  # [ws_numel] fp32 split-K workspace zeroed here (saves a memset launch), or a dummy
    M,
    K,
    stride_xm,
    ws_numel,
    KROT: tl.constexpr,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
):
    """One program per (row block, group, partition): scale, then krot layers of pair rotations."""
    pid_m = tl.program_id(0)
    g = tl.program_id(1)
    p = tl.program_id(2)
    ngroups = K // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_g = tl.arange(0, G)
    m_mask = offs_m < M
    ch = g * G + offs_g
    x = tl.load(
        x_ptr + offs_m[:, None] * stride_xm + ch[None, :], mask=m_mask[:, None], other=0.0
    ).to(tl.float32)
    coef = gc_ptr + p * (2 * KROT + 1) * K + ch
    x = x * tl.load(coef)[None, :]
    for r in tl.static_range(KROT):
        # Channel j of a pair (a, b): x_a' = c x_a + s x_b, x_b' = c x_b - s x_a; the host stored
        # the sign with s, so every channel is c * x_j + s_j * x_partner(j).
        idx = tl.load(gi_ptr + (p * KROT + r) * K + ch)
        c = tl.load(coef + (1 + r) * K)
        s = tl.load(coef + (1 + KROT + r) * K)
        xp = tl.gather(x, tl.broadcast_to(idx[None, :], (BLOCK_M, G)), 1)
        x = x * c[None, :] + xp * s[None, :]
    xr = tl.clamp(x, -FP16_MAX, FP16_MAX).to(tl.float16)
    row = p * M + offs_m
    tl.store(xr_ptr + row[:, None] * K + ch[None, :], xr, mask=m_mask[:, None])
    tl.store(rs_ptr + row * ngroups + g, tl.sum(xr.to(tl.float32), axis=1), mask=m_mask)
    if ZERO_BLOCK > 0:
        lin = (p * ngroups + g) * tl.num_programs(0) + pid_m
        offs_z = lin * ZERO_BLOCK + tl.arange(0, ZERO_BLOCK)
        tl.store(ws_ptr + offs_z, tl.zeros((ZERO_BLOCK,), tl.float32), mask=offs_z < ws_numel)


E4M3_MAX = tl.constexpr(448.0)


INT8_MAX = tl.constexpr(127.0)


RNE_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2^23: (v + C) - C rounds |v| < 2^22 half to even


@triton.jit
def _rotate_group(x_ptr, rot_hi_ptr, rot_lo_ptr, offs_m, m_mask, g, p, ngroups, stride_xm,
                  G: tl.constexpr, c=0, COLS: tl.constexpr = 0):  # fmt: skip
    """fp32 [BLOCK_M, COLS]: group g of the rows, times columns c..c+COLS of diag(cs_g) R_g^T
    of run p (hi + lo dots); COLS 0 = all G."""
    W: tl.constexpr = COLS if COLS else G
    offs_g = tl.arange(0, G)
    offs_c = c + tl.arange(0, W)
    x = tl.load(
        x_ptr + offs_m[:, None] * stride_xm + g * G + offs_g[None, :],
        mask=m_mask[:, None],
        other=0.0,
    )
    rot_off = ((p * ngroups + g) * G + offs_g[:, None]) * G + offs_c[None, :]
    acc = tl.dot(x, tl.load(rot_hi_ptr + rot_off))
    return tl.dot(x, tl.load(rot_lo_ptr + rot_off), acc)


@triton.jit
def _e4m3_round(v):
    """fp32 v (|v| <= 448) rounded half-to-even onto the e4m3 grid, in fp32 (then cast exactly).

    The grid step of v's binade is 2^(max(e, -6) - 3); v * 2^-step and back are exact, and the
    magic-number add rounds to even. Done in software so every backend gives the same codes: the
    hardware converts do RNE too, but Triton's interpreter carries a mantissa round-up into the
    wrong binade (15.9 -> 8), and the CPU tests run there.
    """
    e = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.maximum(e, -6) - 3
    step = ((e + 127) << 23).to(tl.float32, bitcast=True)
    inv = ((127 - e) << 23).to(tl.float32, bitcast=True)
    return ((v * inv + RNE_MAGIC) - RNE_MAGIC) * step


@triton.jit
def _e4m3_pack(b, floor, sb):
    """The e4m3 byte of the fp32 bits b of a value on the e4m3 normal grid: the exponent rebiased
    (127 -> 7) with 3 mantissa bits, raised to `floor` (what stands for values under 2^-6), and
    the sign of the fp32 bits sb."""
    mag = tl.maximum(((b & 0x7FFFFFFF) - (120 << 23)) >> 20, floor)
    return (mag | ((sb >> 24) & 0x80)).to(tl.uint8).to(tl.float8e4nv, bitcast=True)


@triton.jit
def _e4m3_from_grid(v, sgn=None):
    """e4m3 of fp32 v on the e4m3 grid (|v| <= 448, subnormals too), built from v's bits; the
    sign from `sgn` when given (the unrounded value: a negative that rounds to zero is -0).

    Triton 3.9 converts fp32 to e4m3 in software on gfx1201 (compare-and-select chains for
    rounding, saturation and NaN: about 33 instructions a value); v is on the grid already, so no
    rounding is needed. Normals: rebias the exponent (127 -> 7) and keep 3 mantissa bits.
    Subnormals (|v| < 2^-6): the code is k of v = k * 2^-9, read as an integer by the magic add
    (exact: |v| * 512 <= 229376 < 2^22). There the normal form is below min(k, 8) (negative, or
    for 2^-7 <= |v| < 2^-6 the top mantissa bits, <= k); for normals it is >= 8: one max picks.
    """
    b = v.to(tl.int32, bitcast=True)
    k = (tl.abs(v) * 512.0 + RNE_MAGIC).to(tl.int32, bitcast=True) - 0x4B400000
    return _e4m3_pack(b, tl.minimum(k, 8), b if sgn is None else sgn.to(tl.int32, bitcast=True))


@triton.jit
def _quant_cols(v, scale, q_ptr, row, m_mask, g, K, G: tl.constexpr, INT8: tl.constexpr,
                c=0, COLS: tl.constexpr = 0, E4M3_BITS: tl.constexpr = False):  # fmt: skip
    """Quantize v [BLOCK_M, COLS] (columns c.. of group g; COLS 0 = all G) with per-row `scale`;
    store the codes, return their sums per row. E4M3_BITS: the e4m3 bytes from bits."""
    offs_c = c + tl.arange(0, COLS if COLS else G)
    xs = tl.math.div_rn(v, scale[:, None])
    if INT8:
        xs = tl.clamp(xs, -INT8_MAX, INT8_MAX)
        qf = (xs + RNE_MAGIC) - RNE_MAGIC
        code = qf.to(tl.int8)
    else:
        qf = _e4m3_round(tl.clamp(xs, -E4M3_MAX, E4M3_MAX))
        # gfx1201: the bytes from bits (`_e4m3_from_grid`), not Triton's software convert
        code = _e4m3_from_grid(qf) if E4M3_BITS else qf.to(tl.float8e4nv)
    tl.store(q_ptr + row[:, None] * K + g * G + offs_c[None, :], code, mask=m_mask[:, None])
    return tl.sum(qf, axis=1)


@triton.jit
def _quant_store(v, scale, q_ptr, as_ptr, rs_ptr, row, m_mask, g, K, ngroups,
                 G: tl.constexpr, INT8: tl.constexpr, E4M3_BITS: tl.constexpr):  # fmt: skip
    """Quantize v [BLOCK_M, G] with per-row `scale`; store codes, the scale and the code sums."""
    rsum = _quant_cols(v, scale, q_ptr, row, m_mask, g, K, G, INT8, E4M3_BITS=E4M3_BITS)
    tl.store(as_ptr + row * ngroups + g, scale, mask=m_mask)
    tl.store(rs_ptr + row * ngroups + g, rsum, mask=m_mask)


@triton.jit
def rotate_quant_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    rot_hi_ptr,  # [P, K/G, G, G] x.dtype: hi part of diag(cs_g) R_g^T
    rot_lo_ptr,  # [P, K/G, G, G] x.dtype: lo part (rot - hi)
    q_ptr,  # [P, M, K] fp8e4nv or int8 out: the codes
    as_ptr,  # [P, M, K/G] fp32 out: activation scale per (row, group); per token: repeated
    rs_ptr,  # [P, M, K/G] fp32 out: per-group sums of the codes
    M,
    K,
    stride_xm,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    INT8: tl.constexpr,
    TOKEN: tl.constexpr,
    COLS: tl.constexpr = 0,
    E4M3_BITS: tl.constexpr = False,
):
    """Fused rotate + channel-scale + quantize; one launch for either scale granularity.

    Per group (TOKEN false): one program per (row block, group, partition), a single pass.
    Per token (TOKEN true): the scale needs the row's amax over all of K after the rotation, and
    a cross-program reduction would need a second launch or a grid-wide sync. So one program
    owns a row block of one partition and loops over the groups twice: the first sweep rotates
    and keeps only the running amax, the second rotates again and quantizes. The rotation is a
    pair of tensor-core dots (cheap); the second read of x and the blocks comes from L2, and a
    rotated row is never parked (BLOCK_M x K fp32 fits neither registers nor LDS at K = 5120).
    COLS > 0 (per token only) walks each group's rotation COLS output columns at a time: one
    [G, COLS] slice of the hi and lo blocks live instead of the whole [G, G] pair (gfx1201: G / 2,
    no spills).
    E4M3_BITS (fp8, gfx1201): the e4m3 bytes built from the rounded values' bits
    (`_e4m3_from_grid`), not by Triton's software conversion.
    """
    pid_m = tl.program_id(0)
    p = tl.program_id(2)
    ngroups = K // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    row = p * M + offs_m
    top = INT8_MAX if INT8 else E4M3_MAX
    if TOKEN:
        W: tl.constexpr = COLS if COLS else G  # one slice (the whole block) unless COLS
        amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for g in range(0, ngroups):
            for c in range(0, G, W):
                v = _rotate_group(x_ptr, rot_hi_ptr, rot_lo_ptr, offs_m, m_mask, g, p, ngroups,
                                  stride_xm, G, c, W)  # fmt: skip
                amax = tl.maximum(amax, tl.max(tl.abs(v), axis=1))
        scale = tl.math.div_rn(amax, tl.full((BLOCK_M,), top, tl.float32))
        scale = tl.where(scale > 0, scale, 1.0)
        for g in range(0, ngroups):
            rsum = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for c in range(0, G, W):
                v = _rotate_group(x_ptr, rot_hi_ptr, rot_lo_ptr, offs_m, m_mask, g, p, ngroups,
                                  stride_xm, G, c, W)  # fmt: skip
                rsum += _quant_cols(v, scale, q_ptr, row, m_mask, g, K, G, INT8, c, W,
                                    E4M3_BITS)  # fmt: skip
            tl.store(as_ptr + row * ngroups + g, scale, mask=m_mask)
            tl.store(rs_ptr + row * ngroups + g, rsum, mask=m_mask)
    else:
        g = tl.program_id(1)
        v = _rotate_group(x_ptr, rot_hi_ptr, rot_lo_ptr, offs_m, m_mask, g, p, ngroups,
                          stride_xm, G)  # fmt: skip
        scale = tl.math.div_rn(tl.max(tl.abs(v), axis=1), tl.full((BLOCK_M,), top, tl.float32))
        scale = tl.where(scale > 0, scale, 1.0)
        _quant_store(v, scale, q_ptr, as_ptr, rs_ptr, row, m_mask, g, K, ngroups, G, INT8,
                     E4M3_BITS)  # fmt: skip


@triton.jit
def _rotated_group(x_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, p, K, stride_xm,
                   KROT: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """fp32 [BLOCK_M, G]: group g of x times the channel scales, then KROT Givens layers."""
    offs_g = tl.arange(0, G)
    ch = g * G + offs_g
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + ch[None, :], mask=m_mask[:, None],
                other=0.0).to(tl.float32)  # fmt: skip
    coef = gc_ptr + p * (2 * KROT + 1) * K + ch
    x = x * tl.load(coef)[None, :]
    for r in tl.static_range(KROT):
        idx = tl.load(gi_ptr + (p * KROT + r) * K + ch)
        c = tl.load(coef + (1 + r) * K)
        s = tl.load(coef + (1 + KROT + r) * K)
        xp = tl.gather(x, tl.broadcast_to(idx[None, :], x.shape), 1)
        x = x * c[None, :] + xp * s[None, :]
    return x


@triton.jit
def _gv_layer(x, gi_ptr, coef, idx_row, K, r: tl.constexpr, KROT: tl.constexpr, ch):
    """(partner index, cos, signed sin) of Givens layer r for channels ch (dummies past KROT)."""
    if r < KROT:
        idx = tl.load(gi_ptr + (idx_row + r) * K + ch)
        c = tl.load(coef + (1 + r) * K)
        s = tl.load(coef + (1 + KROT + r) * K)
    else:
        idx = ch * 0
        c = tl.zeros(ch.shape, dtype=tl.float32)
        s = tl.zeros(ch.shape, dtype=tl.float32)
    return idx, c, s


@triton.jit
def _gv_apply(x, idx, c, s, r: tl.constexpr, KROT: tl.constexpr):
    """x * cos + x[partner] * signed sin (layer r < KROT; else x unchanged)."""
    if r < KROT:
        xp = tl.gather(x, tl.broadcast_to(idx[None, :], x.shape), 1)
        x = x * c[None, :] + xp * s[None, :]
    return x


@triton.jit
def _rotated_group_pre(x_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, p, K, stride_xm,
                       KROT: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """`_rotated_group` with every layer's records loaded before the first gather (up to 8
    layers; more fall back to `_rotated_group`), so their L2 round trips overlap instead of
    serializing one per layer."""
    if KROT > 8:
        x = _rotated_group(x_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, p, K, stride_xm, KROT, G)
    else:
        offs_g = tl.arange(0, G)
        ch = g * G + offs_g
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + ch[None, :], mask=m_mask[:, None],
                    other=0.0).to(tl.float32)  # fmt: skip
        coef = gc_ptr + p * (2 * KROT + 1) * K + ch
        cs = tl.load(coef)
        row = p * KROT
        i0, c0, s0 = _gv_layer(x, gi_ptr, coef, row, K, 0, KROT, ch)
        i1, c1, s1 = _gv_layer(x, gi_ptr, coef, row, K, 1, KROT, ch)
        i2, c2, s2 = _gv_layer(x, gi_ptr, coef, row, K, 2, KROT, ch)
        i3, c3, s3 = _gv_layer(x, gi_ptr, coef, row, K, 3, KROT, ch)
        i4, c4, s4 = _gv_layer(x, gi_ptr, coef, row, K, 4, KROT, ch)
        i5, c5, s5 = _gv_layer(x, gi_ptr, coef, row, K, 5, KROT, ch)
        i6, c6, s6 = _gv_layer(x, gi_ptr, coef, row, K, 6, KROT, ch)
        i7, c7, s7 = _gv_layer(x, gi_ptr, coef, row, K, 7, KROT, ch)
        x = x * cs[None, :]
        x = _gv_apply(x, i0, c0, s0, 0, KROT)
        x = _gv_apply(x, i1, c1, s1, 1, KROT)
        x = _gv_apply(x, i2, c2, s2, 2, KROT)
        x = _gv_apply(x, i3, c3, s3, 3, KROT)
        x = _gv_apply(x, i4, c4, s4, 4, KROT)
        x = _gv_apply(x, i5, c5, s5, 5, KROT)
        x = _gv_apply(x, i6, c6, s6, 6, KROT)
        x = _gv_apply(x, i7, c7, s7, 7, KROT)
    return x


@triton.jit
def rotate_slice_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    rot_hi_ptr,  # [P, K/G, G, G] x.dtype: hi part of diag(cs_g) R_g^T
    rot_lo_ptr,  # [P, K/G, G, G] x.dtype: lo part
    xr_ptr,  # [P, M, K] fp32 out, nibble-scaled (as rotate_scale_kernel(NIBBLE_SCALED=True))
    rs_ptr,  # [P, M, K/G, G/SLICE] fp32 out: row sums of each slice's fp16 values
    M,
    K,
    stride_xm,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLICE: tl.constexpr,
    F16: tl.constexpr = False,  # xr fp16, not nibble-scaled, no row sums (the `gemv_dot` GEMV)
    PDL: tl.constexpr = False,  # let the dependent GEMV launch now (it waits before reading xr)
    PAIRED: tl.constexpr = False,  # F16 for the HFMA2 GEMV: times PSCALE, channels 8r + j and
    # 8r + j + 4 side by side (`gemv_fma_kernels` HFMA2 note)
    ONE: tl.constexpr = False,  # rot_hi holds fp16 blocks (hi + lo rounded once), no lo pass
    PSCALE: tl.constexpr = 0.015625,  # PAIRED: 2^-6 (int4), 2^-7 (int5): `gemv_fma_kernels`
):
    """The decode GEMV's prologue, one program per (group, partition, slice of SLICE output
    channels, BLOCK_M rows; grid axis 2 holds the slices of each row block in turn):
    xr[rows, slice] = x_g[rows] @ (hi + lo)[:, slice].

    Why sliced (H200 2026-12-01): one program per 128-channel group read the whole 64 KB
    G x G block pair and did the 16 x 128 x 128 dots alone (ncu, gate_up M = 1: 151 registers,
    6% achieved occupancy, 5.0 us for 22% of DRAM); G / SLICE programs per group each read a
    column slice of the blocks, so the same bytes come with G / SLICE times the loads in flight.
    """
    g = tl.program_id(0)
    p = tl.program_id(1)
    sl = tl.program_id(2) % (G // SLICE)
    ngroups = K // G
    offs_m = (tl.program_id(2) // (G // SLICE)) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_g = tl.arange(0, G)
    offs_j = sl * SLICE + tl.arange(0, SLICE)
    if PDL:
        gdc_launch_dependents()
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + g * G + offs_g[None, :],
                mask=m_mask[:, None], other=0.0)  # fmt: skip
    rot_off = ((p * ngroups + g) * G + offs_g[:, None]) * G + offs_j[None, :]
    if ONE:  # half the block bytes; x rounded to fp16 as xr is (H200 2026-12-04, bench only)
        acc = tl.dot(tl.clamp(x.to(tl.float32), -65504.0, 65504.0).to(tl.float16),
                     tl.load(rot_hi_ptr + rot_off))  # fmt: skip
    else:
        acc = tl.dot(x, tl.load(rot_hi_ptr + rot_off))
        acc = tl.dot(x, tl.load(rot_lo_ptr + rot_off), acc)
    row = p * M + offs_m
    if F16:
        pos = offs_j
        xc = tl.clamp(acc, -65504.0, 65504.0)
        if PAIRED:
            pos = _paired_pos(offs_j)
            xc = xc * PSCALE  # a power of two: exact
        xh = xc.to(tl.float16)
        tl.store(xr_ptr + row[:, None] * K + g * G + pos[None, :], xh, mask=m_mask[:, None])
    else:
        xr = tl.clamp(acc, -65504.0, 65504.0).to(tl.float16).to(tl.float32)
        jj = offs_j % 8
        e = tl.where(jj < 5, 4 * jj, 4 * (jj - 3))
        out = xr * ((127 - e) << 23).to(tl.float32, bitcast=True)[None, :]
        tl.store(xr_ptr + row[:, None] * K + g * G + offs_j[None, :], out, mask=m_mask[:, None])
        tl.store(rs_ptr + (row * ngroups + g) * (G // SLICE) + sl, tl.sum(xr, axis=1),
                 mask=m_mask)  # fmt: skip


@triton.jit
def _paired_pos(offs_j):
    """Where the HFMA2 GEMV reads channel j of a group: 8r + j and 8r + j + 4 side by side."""
    jj = offs_j % 8
    return offs_j - jj + tl.where(jj < 4, 2 * jj, 2 * jj - 7)


@triton.jit
def givens_paired_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    gi_ptr,  # [P, KROT, K] int32: group-local index of each channel's partner in layer r
    gc_ptr,  # [P, 2 * KROT + 1, K] fp32: channel scales, then cos per layer, then signed sin
    xr_ptr,  # [P, M, K] fp16 out, paired and times PSCALE (as rotate_slice_kernel(PAIRED))
    M,
    K,
    stride_xm,
    KROT: tl.constexpr,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows a program (grid axis 2: cdiv(M, BLOCK_M))
    PSCALE: tl.constexpr,
    PDL: tl.constexpr = False,  # let the dependent GEMV launch now (it waits before reading xr)
    PAIRED: tl.constexpr = True,  # else plain fp16 in channel order (the `gemv_dot` GEMV's xr)
):
    """The HFMA2 GEMV's prologue from the Givens records (H200 2026-12-04), one program per
    (group, partition, BLOCK_M rows): every layer's records loaded before the first gather
    (`_rotated_group_pre`), so the program waits on one memory round trip, not KROT of them,
    and reads ~12.5 KB a group (records) instead of the blocks' 64 KB.

    The rows axis (2026-12-06): one program for all rows ran them one after another in
    its 4 warps (the gathers' warp shuffles scale with the rows: 1024 a thread at 32 rows, sm_90
    PTX), 12-17 us at 24-32 rows (H100) against 3-6 us at 1-8 (H200); row blocks run them on
    more SMs, each program reading the group's records again (from L2)."""
    g = tl.program_id(0)
    p = tl.program_id(1)
    if PDL:
        gdc_launch_dependents()
    offs_m = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    x = _rotated_group_pre(x_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, p, K, stride_xm, KROT, G)
    if PAIRED:
        xh = (tl.clamp(x, -65504.0, 65504.0) * PSCALE).to(tl.float16)
        pos = g * G + _paired_pos(tl.arange(0, G))
    else:
        xh = tl.clamp(x, -65504.0, 65504.0).to(tl.float16)
        pos = g * G + tl.arange(0, G)
    row = p * M + offs_m
    tl.store(xr_ptr + row[:, None] * K + pos[None, :], xh, mask=m_mask[:, None])
