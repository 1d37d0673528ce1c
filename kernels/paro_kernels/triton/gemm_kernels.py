"""Triton kernels of the tile GEMMs: W4A16 and W4A8 / W5A8 group GEMMs on the prologues' outputs.

Portable Triton (CUDA and ROCm): only `tl.dot`, integer shifts and fp32 arithmetic, so the same
source compiles to wgmma on the H200 and to WMMA on gfx1201.

Why the zero point is a row-sum correction: the weight codes 0..15 are exact in fp16, the MMA runs
on raw codes, and per group acc += s * (A @ C) - (s * z) * rowsum(A), with rowsum(A) computed by
the prologue over exactly the fp16 values the GEMM reads. Dequantization never rounds a weight.

Why the nibbles become fp16 by bit pattern: 0x6400 | c is the fp16 value 1024 + c, exact, and
(1024 + c) - (1024 + z) = c - z is exact too. That replaces two conversions per weight (int -> fp32,
fp32 -> fp16), quarter-rate on NVIDIA GPUs and the decode GEMM's bottleneck, by integer logic and
one fp16 subtract; the product by s rounds once to fp16, as the fp32 path did.

Why W4A8 keeps every product exact: the prologue quantizes the rotated activations (e4m3 or int8,
per group or per token) and writes the code sums per group; the GEMM feeds the matrix unit the
signed weight codes c - 8 (int4) or c - 16 (int5, low nibbles + a K-packed fifth-bit plane), all
exact in e4m3 and int8, and applies scales and the zero point outside the product: in the loop
(acc += asg * (s * D - s * (z - off) * rs)) or, with ZPE, as one fp32 dot after it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .prologue_kernels import _e4m3_pack


@triton.jit
def gemm_tile(pid, M, N, b1, b2, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              GROUP_M: tl.constexpr):  # fmt: skip
    """The GEMMs' output tile of program `pid`: (partition, row offsets, column offsets, masks).

    Grouped launch order: GROUP_M row blocks share each weight column block while it is in L2.
    The host picks BLOCK_N dividing every partition boundary (b1, b2; N where there is none), so
    one block never straddles partitions and the block's first column names its partition.
    """
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    n0 = pid_n * BLOCK_N
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    return part, offs_m, offs_n, offs_m < M, offs_n < N


@triton.jit
def w4a16_gemm_kernel(
    a_ptr,  # [P, M, K] fp16: rotated activations, one plane per rotation run
    rs_ptr,  # [P, M, K/G] fp32: row sums of `a` per group
    qw_ptr,  # [K/8, N] int32: codes packed along K, nibble s of word r = row 8r + s
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes
    bias_ptr,  # [N] or a dummy when HAS_BIAS is false
    out_ptr,  # [M, N] x.dtype (SPLIT_K == 1) or fp32 zero-filled workspace (SPLIT_K > 1)
    fin_ptr,  # TICKET: [M, N] x.dtype final output, else a dummy
    cnt_ptr,  # TICKET: [>= tiles] int32 tickets, zero on entry and on exit, else a dummy
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
    TICKET: tl.constexpr = False,
):
    """out[:, n-block] = A_p @ dequant(Q)[:, n-block]; partition p from the boundaries."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    part, offs_m, offs_n, m_mask, n_mask = gemm_tile(pid, M, N, b1, b2, BLOCK_M, BLOCK_N, GROUP_M)
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
        if TICKET:
            _ticket_finish(out_ptr, fin_ptr, cnt_ptr, bias_ptr, pid, out_offs, mask, offs_n,
                           n_mask, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip


@triton.jit
def _e4m3_exact(v):
    """e4m3 of int32 v with |v| <= 16 (exact there), built from v's fp32 bits: 8 integer ops.

    Triton 3.9 converts fp16 / fp32 to e4m3 in software on gfx1201 (compare-and-select chains
    for rounding and saturation: about 33 instructions a value, most of the W4A8 GEMM's K loop);
    these values need no rounding. Rebias the exponent (127 -> 7), keep 3 mantissa bits and the
    sign; v = 0 (fp32 bits 0) goes negative before the max and ends 0x00.
    """
    b = v.to(tl.float32).to(tl.int32, bitcast=True)
    return _e4m3_pack(b, 0, b)


@triton.jit
def w4a8_gemm_kernel(
    a_ptr,  # [P, M, K] fp8e4nv or int8: quantized rotated activations, one plane per run
    as_ptr,  # [P, M, K/G] fp32 activation scales (per token: the same value in every group)
    rs_ptr,  # [P, M, K/G] fp32 per-group code sums of `a`
    qw_ptr,  # [K/8, N] int32: low nibbles packed along K (nibble s of word r = row 8r + s)
    qh_ptr,  # [K/32, N] int32 fifth-bit planes (bit s of word r = row 32r + s), or a dummy
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes (0..2^BITS - 1)
    bias_ptr,  # [N] or a dummy when HAS_BIAS is false
    out_ptr,  # [M, N] out dtype (SPLIT_K == 1) or fp32 zero-filled workspace (SPLIT_K > 1)
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
    INT8: tl.constexpr,
    BITS: tl.constexpr,
    TOKEN: tl.constexpr,
    ZPE: tl.constexpr,
    BLOCK_G: tl.constexpr = 16,
    A16: tl.constexpr = False,
    E4M3_BITS: tl.constexpr = False,
):
    """out = sum_g a_scale * (s * (A_q @ (C - off)) - s * (z - off) * rowsum) per column run.

    The matrix unit sees signed codes c - off (off = 8 / 16: -8..7 and -16..15, exact in e4m3 and
    int8), so the zero point never enters the product. In-loop form (ZPE false), per group:
    acc += asg[m] * (s[n] * D - (s * (z - off))[n] * rs[m]). Epilogue form (ZPE true): the loop
    keeps only the scale fold and the rank-(K/G) term (asg * rs) @ (s * (z - off)) is one fp32 dot
    per BLOCK_G groups after it. TOKEN: one scale per row, applied once after the loop.
    A16 (fp8, NVIDIA below 64 rows): Triton has no fp8 mma.sync and would upcast both operands
    to fp16 anyway; upcasting only the activations and keeping the weights' exact fp16 codes
    saves the weights' fp16 -> e4m3 -> fp16 round trip. Same products, same fp32 sums.
    E4M3_BITS (fp8, gfx1201): the weights' e4m3 built from bits (`_e4m3_exact`); Triton converts
    to e4m3 in software there. The same e4m3 values, so the same products.
    """
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    part, offs_m, offs_n, m_mask, n_mask = gemm_tile(pid, M, N, b1, b2, BLOCK_M, BLOCK_N, GROUP_M)
    ngroups = K // G
    per_split = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per_split
    g1 = tl.minimum(g0 + per_split, ngroups)
    off: tl.constexpr = 1 << (BITS - 1)

    offs_k = tl.arange(0, G)
    offs_w = tl.arange(0, G // 8)
    shifts = (tl.arange(0, 8) * 4)[None, :, None]
    a_rows = (part * M + offs_m).to(tl.int64)
    a_base = a_ptr + a_rows[:, None] * K + offs_k[None, :]
    s_base = a_rows * ngroups  # row offset into as/rs
    q_base = qw_ptr + offs_w[:, None] * N + offs_n[None, :]
    if BITS == 5:
        offs_h = tl.arange(0, G // 32)
        h_base = qh_ptr + offs_h[:, None] * N + offs_n[None, :]
        hshifts = tl.arange(0, 32)[None, :, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        # No `other`: rows past M only feed output rows that are never stored.
        a = tl.load(a_base + g * G, mask=m_mask[:, None])
        q = tl.load(q_base + g * (G // 8) * N, mask=n_mask[None, :], other=0)
        c = tl.reshape((q[:, None, :] >> shifts) & 0xF, (G, BLOCK_N))
        if BITS == 5:
            h = tl.load(h_base + g * (G // 32) * N, mask=n_mask[None, :], other=0)
            c = c | (tl.reshape((h[:, None, :] >> hshifts) & 1, (G, BLOCK_N)) << 4)
        if INT8:
            d = tl.dot(a, (c - off).to(tl.int8), out_dtype=tl.int32).to(tl.float32)
        elif E4M3_BITS and not A16:  # gfx1201: e4m3 bits without Triton's software convert
            d = tl.dot(a, _e4m3_exact(c - off))
        else:
            # 0x6400 | c is the fp16 1024 + c; minus (1024 + off) it is c - off, exact, and
            # exact again in e4m3: no int -> float conversion per weight.
            c16 = (c | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - (1024.0 + off)
            if A16:  # noqa: SIM108  (a Triton constexpr branch, kept explicit)
                d = tl.dot(a.to(tl.float16), c16)
            else:
                d = tl.dot(a, c16.to(tl.float8e4nv))
        s = tl.load(sc_ptr + g * N + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        if ZPE:
            t = d * s[None, :]
        else:
            z = tl.load(zp_ptr + g * N + offs_n, mask=n_mask, other=0).to(tl.float32)
            rs = tl.load(rs_ptr + s_base + g, mask=m_mask, other=0.0)
            t = d * s[None, :] - rs[:, None] * (s * (z - off))[None, :]
        if TOKEN:
            acc += t
        else:
            acc += tl.load(as_ptr + s_base + g, mask=m_mask, other=0.0)[:, None] * t
    if ZPE:
        for gc in range(g0, g1, BLOCK_G):
            offs_gc = gc + tl.arange(0, BLOCK_G)
            gm = offs_gc < g1
            ms = m_mask[:, None] & gm[None, :]
            rsa = tl.load(rs_ptr + s_base[:, None] + offs_gc[None, :], mask=ms, other=0.0)
            if not TOKEN:
                rsa *= tl.load(as_ptr + s_base[:, None] + offs_gc[None, :], mask=ms, other=0.0)
            ws = gm[:, None] & n_mask[None, :]
            w_off = offs_gc[:, None] * N + offs_n[None, :]
            s = tl.load(sc_ptr + w_off, mask=ws, other=0.0).to(tl.float32)
            z = tl.load(zp_ptr + w_off, mask=ws, other=0).to(tl.float32)
            # fp32 operands at full precision: tf32 would round the zero-point term (it can be
            # larger than the result) by 2^-11, far above the bf16 floor.
            acc = tl.dot(-rsa, s * (z - off), acc, input_precision="ieee")
    if TOKEN:
        acc *= tl.load(as_ptr + s_base, mask=m_mask, other=0.0)[:, None]

    out_offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(out_ptr + out_offs, acc, mask=mask, sem="relaxed")


@triton.jit
def _ticket_finish(ws_ptr, fin_ptr, cnt_ptr, bias_ptr, tile, out_offs, mask, offs_n, n_mask,
                   HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):  # fmt: skip
    """Split-K in the kernel: the last split of a tile writes the fp32 sums (+ bias)
    as the output dtype and leaves the workspace and its ticket zeroed; no memset, no cast launch
    (H200 2026-12-01, gate_up M=1: the two took 1.7 + 2.3 us of device time besides launches)."""
    tl.debug_barrier()  # every thread's partial is in before the ticket is taken
    ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
    if ticket == SPLIT_K - 1:
        tot = tl.load(ws_ptr + out_offs, mask=mask, other=0.0, volatile=True)
        if HAS_BIAS:
            tot += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(fin_ptr + out_offs, tot.to(fin_ptr.dtype.element_ty), mask=mask)
        tl.store(ws_ptr + out_offs, tl.zeros((BLOCK_M, BLOCK_N), tl.float32), mask=mask)
        tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed")
