"""Triton kernels of the prefill paths: the fused dequantize + rotate of the weights (plain and
transposed), the per-token 8-bit activation quantizer, the int8 GEMM's epilogue and a saturating
fp16 cast.

Why the prefill path rotates the weights, not the activations: y = (x B_p) W = x (B_p W) with
B_p the block-diagonal folded rotation; per group B_g W_g = (B_g @ (C_g - z)) * s (s is constant
along a group's rows), so one kernel reads the int4 codes once, does the G x G rotation on the
matrix unit against exact integer codes (hi + lo summed to one fp16 block: 11 bits, the rounding
W' itself gets) and writes W' once; the GEMM is then one vendor call on x itself for all
partitions, and its cost does not grow with M the way the activation prologue's does.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dequant_rotate_kernel(
    qw_ptr,  # [K/8, N] int32 codes packed along K
    qh_ptr,  # BITS == 5: [K/32, N] int32 fifth-bit planes, else a dummy
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes
    rot_hi_ptr,  # [P, K/G, G, G] hi half of the folded blocks (x.dtype)
    rot_lo_ptr,  # [P, K/G, G, G] lo half
    w_ptr,  # [K, N] fp16 out: rows g*G.. hold B_g @ ((C_g - z) * s) for the column's partition
    N,
    K,
    b1,
    b2,
    G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BITS: tl.constexpr,
    NSPLIT: tl.constexpr,
):
    """One program per (group, partition, column split): W'_g = (B_g @ (C_g - z)) * s.

    The program loads its partition's G x G block once (hi + lo summed to fp16: 11 bits, the
    rounding W' gets anyway) and walks its share of the partition's column blocks.
    """
    g = tl.program_id(0)
    p = tl.program_id(1)
    pid = tl.program_id(2)
    lo_col = tl.where(p == 0, 0, tl.where(p == 1, b1, b2))
    hi_col = tl.where(p == 0, b1, tl.where(p == 1, b2, N))
    nblocks = tl.cdiv(hi_col - lo_col, BLOCK_N)
    per = tl.cdiv(nblocks, NSPLIT)
    ngroups = K // G
    offs_g = tl.arange(0, G)
    rot_off = ((p * ngroups + g) * G + offs_g[:, None]) * G + offs_g[None, :]
    rot = (tl.load(rot_hi_ptr + rot_off).to(tl.float32)
           + tl.load(rot_lo_ptr + rot_off).to(tl.float32)).to(tl.float16)  # fmt: skip
    offs_w = tl.arange(0, G // 8)
    shifts = (tl.arange(0, 8) * 4)[None, :, None]
    for blk in range(pid * per, tl.minimum(pid * per + per, nblocks)):
        offs_n = lo_col + blk * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi_col
        q = tl.load(qw_ptr + (g * (G // 8) + offs_w)[:, None] * N + offs_n[None, :],
                    mask=n_mask[None, :], other=0)  # fmt: skip
        c = tl.reshape((q[:, None, :] >> shifts) & 0xF, (G, BLOCK_N))
        if BITS == 5:
            offs_h = tl.arange(0, G // 32)
            h = tl.load(qh_ptr + (g * (G // 32) + offs_h)[:, None] * N + offs_n[None, :],
                        mask=n_mask[None, :], other=0)  # fmt: skip
            hs = tl.arange(0, 32)[None, :, None]
            c = c | (tl.reshape((h[:, None, :] >> hs) & 1, (G, BLOCK_N)) << 4)
        z = tl.load(zp_ptr + g * N + offs_n, mask=n_mask, other=0).to(tl.int32)
        d = (c - z[None, :]).to(tl.float16)  # |c - z| <= 31: exact
        # B_g's row index is x's channel k: xr_j = sum_k x_k B[k, j], so W' = B_g @ W_g.
        acc = tl.dot(rot, d)
        s = tl.load(sc_ptr + g * N + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        w = acc * s[None, :]
        if w_ptr.dtype.element_ty == tl.float16:
            w = tl.clamp(w, -65504.0, 65504.0)
        tl.store(w_ptr + (g * G + offs_g)[:, None].to(tl.int64) * N + offs_n[None, :],
                 w.to(w_ptr.dtype.element_ty), mask=n_mask[None, :])  # fmt: skip


@triton.jit
def partition_run(pid, c1, c2, b1, b2, N, BLOCK_N: tl.constexpr):
    """Axis-1 program `pid` of a grid holding each partition's programs in turn (c1: partition
    0's, c2: partitions 0 and 1's): (its partition, its index there, the partition's first and
    last + 1 columns, its BLOCK_N-column blocks)."""
    p = (pid >= c1).to(tl.int32) + (pid >= c2).to(tl.int32)
    pid = pid - tl.where(p == 0, 0, tl.where(p == 1, c1, c2))
    lo_col = tl.where(p == 0, 0, tl.where(p == 1, b1, b2))
    hi_col = tl.where(p == 0, b1, tl.where(p == 1, b2, N))
    return p, pid, lo_col, hi_col, tl.cdiv(hi_col - lo_col, BLOCK_N)


@triton.jit
def dequant_rotate_t_kernel(
    qw_ptr,  # [K/8, N] int32 codes packed along K
    qh_ptr,  # BITS == 5: [K/32, N] int32 fifth-bit planes, else a dummy
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes
    rot_hi_ptr,  # [P, K/G, G, G] hi half of the folded blocks (x.dtype)
    rot_lo_ptr,  # [P, K/G, G, G] lo half
    w_ptr,  # [K, N] bf16/fp16 out, as `dequant_rotate_kernel`
    N,
    K,
    b1,
    b2,
    per,  # column blocks per program, the same in every partition
    c1,  # programs of partition 0 (along axis 1)
    c2,  # programs of partitions 0 and 1
    G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BITS: tl.constexpr,
    OUT8: tl.constexpr = 0,  # 0: W' in w's dtype; 1: int8 / 2: fp8 e4m3 codes of W' * inv[n]
    NK: tl.constexpr = False,  # W' stored [N, K] (the GEMM's column-major operand) not [K, N]
    amax_ptr=None,  # OUT8: [N] fp32 per-output-channel max |W'| (scale = max / 127 or / 448)
):
    """`dequant_rotate_kernel` transposed: W'_g^T = ((C_g - z)^T @ B_g^T) * s per column block.

    Why transposed (H200 2026-12-01): there the G x G block was the dot's register operand
    (64 registers a thread at 4 warps) and each freshly unpacked code tile went through shared
    memory as the other operand (ncu: 168 registers, 13% occupancy, DRAM 13%). Here the codes
    are unpacked straight into the register operand and the loop-invariant block is the shared
    one, loaded once per program; the [BLOCK_N, G] product is stored transposed (columns
    contiguous in W'). Every program walks `per` column blocks of one partition (grid axis 1
    holds each partition's programs in turn), so a small partition does not leave the large
    one's programs with most of the work (qkv: 6144 / 512 / 512).
    """
    g = tl.program_id(0)
    p, pid, lo_col, hi_col, nblocks = partition_run(tl.program_id(1), c1, c2, b1, b2, N, BLOCK_N)
    ngroups = K // G
    offs_g = tl.arange(0, G)
    # rot_t[k, j] = B_g[j, k] (stored row j, column k)
    rot_off = ((p * ngroups + g) * G + offs_g[None, :]) * G + offs_g[:, None]
    rot_t = (tl.load(rot_hi_ptr + rot_off).to(tl.float32)
             + tl.load(rot_lo_ptr + rot_off).to(tl.float32)).to(tl.float16)  # fmt: skip
    offs_w = tl.arange(0, G // 8)
    shifts = (tl.arange(0, 8) * 4)[None, None, :]
    for blk in range(pid * per, tl.minimum(pid * per + per, nblocks)):
        offs_n = lo_col + blk * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < hi_col
        q = tl.load(qw_ptr + (g * (G // 8) + offs_w)[None, :] * N + offs_n[:, None],
                    mask=n_mask[:, None], other=0)  # fmt: skip
        c = tl.reshape((q[:, :, None] >> shifts) & 0xF, (BLOCK_N, G))
        if BITS == 5:
            offs_h = tl.arange(0, G // 32)
            h = tl.load(qh_ptr + (g * (G // 32) + offs_h)[None, :] * N + offs_n[:, None],
                        mask=n_mask[:, None], other=0)  # fmt: skip
            hs = tl.arange(0, 32)[None, None, :]
            c = c | (tl.reshape((h[:, :, None] >> hs) & 1, (BLOCK_N, G)) << 4)
        z = tl.load(zp_ptr + g * N + offs_n, mask=n_mask, other=0).to(tl.int32)
        d = (c - z[:, None]).to(tl.float16)  # |c - z| <= 31: exact
        acc = tl.dot(d, rot_t)  # [n, j] = sum_k (c - z)[k, n] B_g[j, k]
        s = tl.load(sc_ptr + g * N + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        if OUT8 == 0:
            w = acc * s[:, None]
            if w_ptr.dtype.element_ty == tl.float16:
                w = tl.clamp(w, -65504.0, 65504.0)
        else:
            top: tl.constexpr = 127.0 if OUT8 == 1 else 448.0
            am = tl.load(amax_ptr + offs_n, mask=n_mask, other=1.0)
            w = acc * (s * (top / tl.maximum(am, 1e-30)))[:, None]
            if OUT8 == 1:  # round half away from zero, +-127
                w = tl.clamp(tl.where(w >= 0, tl.floor(w + 0.5), -tl.floor(0.5 - w)), -127.0, 127.0)
            else:
                w = tl.clamp(w, -448.0, 448.0)
        if NK:
            tl.store(w_ptr + offs_n[:, None].to(tl.int64) * K + (g * G + offs_g)[None, :],
                     w.to(w_ptr.dtype.element_ty), mask=n_mask[:, None])  # fmt: skip
        else:
            tl.store(w_ptr + (g * G + offs_g)[None, :].to(tl.int64) * N + offs_n[:, None],
                     w.to(w_ptr.dtype.element_ty), mask=n_mask[:, None])  # fmt: skip


@triton.jit
def quant_rows_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm
    q_ptr,  # [M, K] int8 or fp8 e4m3 out
    sc_ptr,  # [M] fp32 out: the row's scale (max |x| / 127 or / 448)
    K,
    stride_xm,
    INT8: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Per-token 8-bit activations, one program per row: max |x| over the row, then the codes
    (int8 round half away from zero, +-127; e4m3 RNE, +-448); the second sweep re-reads the row
    from L2."""
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    xr = x_ptr + row * stride_xm
    amax = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        v = tl.load(xr + k0 + offs, mask=k0 + offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(v))
    a = tl.max(amax, axis=0)
    top: tl.constexpr = 127.0 if INT8 else 448.0
    scale = tl.where(a > 0, a / top, 1.0)
    inv = 1.0 / scale
    for k0 in range(0, K, BLOCK):
        v = tl.load(xr + k0 + offs, mask=k0 + offs < K, other=0.0).to(tl.float32) * inv
        if INT8:
            v = tl.clamp(tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(0.5 - v)), -127.0, 127.0)
        else:
            v = tl.clamp(v, -448.0, 448.0)
        tl.store(q_ptr + row * K + k0 + offs, v.to(q_ptr.dtype.element_ty), mask=k0 + offs < K)
    tl.store(sc_ptr + row, scale)


@triton.jit
def int_mm_epilogue_kernel(
    acc_ptr,  # [M, N] int32 (torch._int_mm)
    sa_ptr,  # [M] fp32 activation row scales
    sw_ptr,  # [N] fp32 weight channel scales
    bias_ptr,  # [N] or a dummy
    y_ptr,  # [M, N] out
    M,
    N,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """y = acc * sa[m] * sw[n] (+ bias) in y's dtype, one pass."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mm, nm = offs_m < M, offs_n < N
    mask = mm[:, None] & nm[None, :]
    off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    a = tl.load(acc_ptr + off, mask=mask, other=0).to(tl.float32)
    y = a * tl.load(sa_ptr + offs_m, mask=mm, other=0.0)[:, None]
    y = y * tl.load(sw_ptr + offs_n, mask=nm, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs_n, mask=nm, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cast_fp16_kernel(x_ptr, y_ptr, numel, BLOCK: tl.constexpr):
    """y = fp16(x), saturated at fp16's range (one pass; torch needs a clamp and a cast)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, tl.clamp(x, -65504.0, 65504.0).to(tl.float16), mask=mask)
