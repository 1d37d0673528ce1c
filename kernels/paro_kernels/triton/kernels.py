"""Triton kernels of the ParoQuant linear: the fused rotate + scale prologue and the W4A16 GEMM.

Portable Triton (CUDA and ROCm): only `tl.dot`, integer shifts and fp32 arithmetic, so the same
source compiles to wgmma on the H200 and to WMMA on gfx1201.

Why the rotation is a dense block: each group's krot Givens layers and its channel scales fold at
load into one G x G matrix diag(cs_g) R_g^T, so the prologue is a block-diagonal product on the
matrix units (M*K*G*2 FLOPs each half: microseconds) instead of krot dependent gather passes. The
matrix is split hi + lo in the activation dtype, so two dots reproduce it to ~16 mantissa bits
while x is used exactly.

Why the zero point is a row-sum correction (seed log, "Design" 1): the weight codes 0..15 are exact
in fp16, the MMA runs on raw codes, and per group acc += s * (A @ C) - (s * z) * rowsum(A), with
rowsum(A) computed by the prologue over exactly the fp16 values the GEMM reads. Dequantization
never rounds a weight.

Why a second, Givens prologue at decode (M <= 16): the folded hi + lo blocks are 2 * 2 * G * K
bytes per rotation run (7.8 MB for qkv, 40% of its int4 weights), all of it read to rotate one
token. Applying the krot layers of pair rotations directly reads (3 * krot + 1) * 4 * K bytes per
run (~0.5 MB) and computes in fp32 (exact to ~1e-7); each layer is one in-register gather.

Why the nibbles become fp16 by bit pattern: 0x6400 | c is the fp16 value 1024 + c, exact, and
(1024 + c) - (1024 + z) = c - z is exact too. That replaces two conversions per weight (int -> fp32,
fp32 -> fp16), quarter-rate on NVIDIA GPUs and the decode GEMM's bottleneck, by integer logic and
one fp16 subtract; the product by s rounds once to fp16, as the fp32 path did.

Why fp16 rotated activations: with bf16 operands the rounding of the rotated activations alone
adds ~1.6e-3 relative error (2.35e-3 total, measured against the fp64 reference), fp16 keeps the
result at the bf16 output-rounding floor (1.7e-3). The prologue saturates at the fp16 range.
"""

from __future__ import annotations

import triton
import triton.language as tl

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
):
    """One program per (row block, group, partition): xr = x_g @ (hi + lo), then the row sums."""
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
    tl.store(xr_ptr + row[:, None] * K + g * G + offs_g[None, :], xr, mask=m_mask[:, None])
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


@triton.jit
def w4a16_gemm_kernel(
    a_ptr,  # [P, M, K] fp16: rotated activations, one plane per rotation run
    rs_ptr,  # [P, M, K/G] fp32: row sums of `a` per group
    qw_ptr,  # [K/8, N] int32: codes packed along K, nibble s of word r = row 8r + s
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes
    bias_ptr,  # [N] or a dummy when HAS_BIAS is false
    out_ptr,  # [M, N] x.dtype (SPLIT_K == 1) or fp32 zero-filled workspace (SPLIT_K > 1)
    M,
    N,
    K,
    b1,  # first column of partition 1 (N if there is none)
    b2,  # first column of partition 2 (N if there is none)
    HAS_BIAS: tl.constexpr,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    ZP_ROWSUM: tl.constexpr = False,
    PLANES: tl.constexpr = False,
):
    """out[:, n-block] = A_p @ dequant(Q)[:, n-block]; partition p from the boundaries."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # Grouped launch order: GROUP_M row blocks share each weight column block while it is in L2.
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m

    n0 = pid_n * BLOCK_N
    # The host picks BLOCK_N dividing every boundary, so one block never straddles partitions.
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    ngroups = K // G
    per_split = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per_split
    g1 = tl.minimum(g0 + per_split, ngroups)

    offs_k = tl.arange(0, G)
    offs_w = tl.arange(0, G // 8)
    shifts = (tl.arange(0, 8) * 4)[None, :, None]
    a_rows = (part * M + offs_m).to(tl.int64)
    a_base = a_ptr + a_rows[:, None] * K + offs_k[None, :]
    a_base16 = a_ptr + a_rows[:, None] * K + (offs_w * 8)[None, :]  # columns 8r (+ j) of a group
    rs_base = rs_ptr + a_rows * ngroups
    q_base = qw_ptr + offs_w[:, None] * N + offs_n[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        q = tl.load(q_base + g * (G // 8) * N, mask=n_mask[None, :], other=0)
        s = tl.load(sc_ptr + g * N + offs_n, mask=n_mask, other=0.0)
        z = tl.load(zp_ptr + g * N + offs_n, mask=n_mask, other=0)
        if PLANES:
            # Decode, G = 128: nibble j of the [16, BLOCK_N] words holds rows 8r + j, so the group
            # is 8 K=16 dots on strided activation columns. Unpacking stays elementwise on the
            # loaded tile: no [16, 8, N] -> [128, N] reshape (a layout shuffle per weight).
            d = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            z1024 = z.to(tl.float16) + 1024.0
            for j in tl.static_range(8):
                a = tl.load(a_base16 + g * G + j, mask=m_mask[:, None], other=0.0)
                bits = ((q >> (4 * j)) & 0xF) | 0x6400
                c1024 = bits.to(tl.int16).to(tl.float16, bitcast=True)
                if ZP_ROWSUM:
                    d = tl.dot(a, c1024 - 1024.0, d)
                else:
                    acc = tl.dot(a, (c1024 - z1024[None, :]) * s[None, :], acc)
            if ZP_ROWSUM:
                rs = tl.load(rs_base + g, mask=m_mask, other=0.0)
                sf = s.to(tl.float32)
                acc += d * sf[None, :] - rs[:, None] * (sf * z.to(tl.float32))[None, :]
        else:
            a = tl.load(a_base + g * G, mask=m_mask[:, None], other=0.0)
            # 0x6400 | c is the fp16 1024 + c (module doc): no int -> float conversion per weight.
            bits = ((q[:, None, :] >> shifts) & 0xF) | 0x6400
            c1024 = tl.reshape(bits.to(tl.int16).to(tl.float16, bitcast=True), (G, BLOCK_N))
            if ZP_ROWSUM:
                rs = tl.load(rs_base + g, mask=m_mask, other=0.0)
                d = tl.dot(a, c1024 - 1024.0)  # exact codes
                sf = s.to(tl.float32)
                acc += d * sf[None, :] - rs[:, None] * (sf * z.to(tl.float32))[None, :]
            else:
                # fp16 (c - z) * s rounds each weight by <= 2^-11 (far under the bf16 output
                # floor) and lets the dots chain in the accumulator, which the per-group epilogue
                # above serializes (measured 0.27x cuBLAS at M=2048 on the H200).
                z1024 = z.to(tl.float16) + 1024.0
                acc = tl.dot(a, (c1024 - z1024[None, :]) * s[None, :], acc)

    out_offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(out_ptr + out_offs, acc, mask=mask, sem="relaxed")
