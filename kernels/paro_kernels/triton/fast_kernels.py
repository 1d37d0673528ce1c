"""Second-pass Triton kernels (issue 14): a split-K GEMV for the decode band and a fused
dequantize + rotate of the weights for the prefill band.

Why a GEMV at M <= 2 (not a 16-row MMA tile): at M = 1 the H200's ncu run of the MMA kernel showed
the tensor pipe 15% active on 16-row tiles for a 1-row problem, the ALU doing the nibble unpack and
128 registers capping occupancy at 25%. Here the product is fp32 FMAs on the unpacked codes, so the
work per weight is what the unpack costs plus M FMAs, and the accumulator is small. It serves the
rows no faster path takes (`fast_host.band`): gfx1201's M <= 2, NVIDIA's G = 64 layers at M = 1.
(Nineteenth pass: its 4-row form, its 16-row matrix-unit form and the first pass's GEMV, which no
dispatch picked on either platform, are gone; BENCH.md's second to fourth passes measured them;
their source: commit 11f6311.)

Why the unpack is one LOP3 + one FADD per weight: nibble j of a word sits at bits 4j..4j+3; for
j < 5, (w & (0xF << 4j)) | 0x4B000000 is the fp32 2^23 + c * 16^j exactly (the nibble lies inside
the 23-bit mantissa, bits 0..22), so subtracting 2^23 gives c * 16^j with no shift and no int ->
float convert; the 16^-j is folded into the activation (exact: a power of two). Nibbles 5..7 come
from one shift of the word by 12 (bits 8..19 then). One shift per 8 weights instead of 8.

Why the zero point is the row-sum correction: sum_k a_k (c_k - z) s = s * (sum_k a_k c_k) - s z rs
with rs = sum_k a_k over the group (the prologue writes it for the fp16 values read here, or the
kernel sums its own rotated values), so the loop touches only the codes.

Why split-K ends in the kernel: each split adds its fp32 partial into a workspace with atomics,
then takes a ticket on its column block's counter; the last split reads the sums back, writes the
output (+ bias) in the output dtype and leaves the workspace and the counter zeroed for the next
call. No memset and no cast launch per linear (BENCH.md 2026-11-29: 5-8 us of a 15-45 us op).

Why the Givens layers can run inside the GEMV (ROT): a program needs the rotated activations of
its own 128-channel groups only, and at M <= 2 applying krot pair layers to them is ~1% of the
program's weight work; no prologue launch and no [P, M, K] round trip. The records are the
existing gv tables (partner index, cos, signed sin per channel and layer, channel scales).

Why the prefill path rotates the weights, not the activations: y = (x B_p) W = x (B_p W) with
B_p the block-diagonal folded rotation; per group B_g W_g = (B_g @ (C_g - z)) * s (s is constant
along a group's rows), so one kernel reads the int4 codes once, does the G x G rotation on the
matrix unit against exact integer codes (hi + lo summed to one fp16 block: 11 bits, the rounding
W' itself gets) and writes the fp16 W' once; the GEMM is then one vendor call on x itself for all
partitions, and its cost does not grow with M the way the activation prologue's does.
"""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Triton >= 3.4 (PDL: programmatic dependent launch, NVIDIA sm_90+)
    from triton.language.extra.cuda import gdc_launch_dependents as gdc_launch_dependents
    from triton.language.extra.cuda import gdc_wait as gdc_wait
except ImportError:  # pragma: no cover - older Triton: no PDL (the host never sets it then)
    gdc_launch_dependents = gdc_wait = None

from .kernels import _gemv_epilogue

MAGIC = tl.constexpr(0x4B000000)  # fp32 2^23
MAGIC_F = tl.constexpr(8388608.0)


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

    Why transposed (issue 14, third pass): there the G x G block was the dot's register operand
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
    (int8 round half away from zero, +-127; e4m3 RNE, +-448); the second pass re-reads the row
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


# --------------------------------------------------------------------------- decode GEMV, pass 2
#
# Why this shape (issue 14, second pass; the first pass's GEMV lost at 135 registers, 17%
# occupancy, 20% DRAM): one program owns BLOCK_N = 128 * num_warps columns, so a warp's 32
# threads each load 4 adjacent int32 words (one 16-byte load) per word row and the KW word rows
# of a chunk stay inside the thread: the K reduction is in-thread FMAs, never a cross-warp
# reduction in the loop. The zero point is the row-sum correction (module doc); the group scale
# multiplies the chunk's partial once.
# Split-K only as far as needed to fill the SMs; the splits meet in the ticket finish.


def nibble_pair_asm(high_magic: str) -> str:
    """The PTX of the 8-plane nibble unpack: per nibble pair one lop3 into an fp16 pair (low
    nibbles of each byte with 0x64006400, high nibbles with `high_magic`) and one sub.f16x2 of
    the column's zero pair. 0x64006400 leaves the high planes x16; 0x54005400 (ulp 1/16) does not
    (`decode_kernels._unpack`)."""
    return f"""
{{
.reg .b32 t, u;
lop3.b32 t, $8, 0x000F000F, 0x64006400, 0xea;
sub.f16x2 t, t, $9;
mov.b32 {{$0, $4}}, t;
lop3.b32 t, $8, 0x00F000F0, {high_magic}, 0xea;
sub.f16x2 t, t, $10;
mov.b32 {{$1, $5}}, t;
shr.u32 u, $8, 8;
lop3.b32 t, u, 0x000F000F, 0x64006400, 0xea;
sub.f16x2 t, t, $9;
mov.b32 {{$2, $6}}, t;
lop3.b32 t, u, 0x00F000F0, {high_magic}, 0xea;
sub.f16x2 t, t, $10;
mov.b32 {{$3, $7}}, t;
}}
"""


@triton.jit
def _act(ar, offs_r, j: tl.constexpr, row: tl.constexpr, M, K):
    """fp32 [KW]: channels 8r + j of the chunk for activation row `row` (0 past M), already
    times the nibble's 2^-e (the prologue's NIBBLE_SCALED output)."""
    return tl.load(ar + row * K + offs_r * 8 + j, mask=(offs_r * 0 + row) < M, other=0.0)


@triton.jit
def _fma_chunk(q, ar, offs_r, M, K, d0, d1, BLOCK_M: tl.constexpr):
    """d_row += a_row[8r + j] * c_j (fp32 FMAs) over one chunk; the zero point comes after."""
    # The magic exponent OR-ed in once per word (nibbles 0..4, and 5..7 after one shift), so each
    # nibble is one AND with a single immediate (a second constant would cost a MOV per weight).
    t0 = (q & 0x000FFFFF) | MAGIC
    t8 = ((q >> 12) & 0x000FFF00) | MAGIC
    for j in tl.static_range(8):
        if j < 5:  # noqa: SIM108  (a Triton constexpr branch, kept explicit)
            v = t0 & (MAGIC | (15 << (4 * j)))
        else:
            v = t8 & (MAGIC | (15 << (4 * (j - 3))))
        w = v.to(tl.float32, bitcast=True) - MAGIC_F  # c_j 16^e exactly
        d0 += _act(ar, offs_r, j, 0, M, K)[:, None] * w
        if BLOCK_M > 1:
            d1 += _act(ar, offs_r, j, 1, M, K)[:, None] * w
    return d0, d1


@triton.jit
def _row_sum(rs_ptr, row0, row: tl.constexpr, M, ngroups, g, RS: tl.constexpr):
    """The prologue's fp32 row sum of group g for activation row `row` (0 past M); RS > 1:
    the sum of the sliced prologue's RS partial sums."""
    if RS == 1:
        return tl.load(rs_ptr + (row0 + row) * ngroups + g, mask=row < M, other=0.0)
    offs = ((row0 + row) * ngroups + g) * RS + tl.arange(0, RS)
    return tl.sum(tl.load(rs_ptr + offs, mask=(offs * 0 + row) < M, other=0.0), axis=0)


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
def _row_sum2(rs_ptr, row0, row: tl.constexpr, M, ngroups, g, RS: tl.constexpr,
              ROT: tl.constexpr, rsv, offs_m):  # fmt: skip
    """`_row_sum`, or with ROT the in-kernel row sums rsv [BLOCK_M] (row `row` of them)."""
    if ROT:
        r = tl.sum(tl.where(offs_m == row, rsv, 0.0), axis=0)
    else:
        r = _row_sum(rs_ptr, row0, row, M, ngroups, g, RS)
    return r


@triton.jit
def prefetch_l2(qw_ptr, n0, N, g0, g1, G: tl.constexpr, BLOCK_N: tl.constexpr):
    """L2 prefetches of the word rows of groups g0..g1 over columns n0.. (one per 128-byte line;
    no registers held): what a dependent launch streams in while its producer runs (PDL)."""
    offs_r = tl.arange(0, G // 8)
    offs_l = tl.minimum(n0 + tl.arange(0, BLOCK_N // 32) * 32, N - 1)
    for g in range(g0, g1):
        ptr = qw_ptr + (g * (G // 8) + offs_r)[:, None].to(tl.int64) * N + offs_l[None, :]
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1];\n mov.u32 $0, 0;",
            "=r,l",
            [ptr.to(tl.int64)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


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
    F16: tl.constexpr = False,  # xr fp16, not nibble-scaled, no row sums (the fifth-pass GEMV)
    PDL: tl.constexpr = False,  # let the dependent GEMV launch now (it waits before reading xr)
    PAIRED: tl.constexpr = False,  # F16 for the HFMA2 GEMV: times PSCALE, channels 8r + j and
    # 8r + j + 4 side by side (`decode_kernels` ninth-pass note)
    ONE: tl.constexpr = False,  # rot_hi holds fp16 blocks (hi + lo rounded once), no lo pass
    PSCALE: tl.constexpr = 0.015625,  # PAIRED: 2^-6 (int4), 2^-7 (int5): `decode_kernels`
):
    """The decode GEMV's prologue, one program per (group, partition, slice of SLICE output
    channels): xr[:, slice] = x_g @ (hi + lo)[:, slice].

    Why sliced (issue 14, third pass): one program per 128-channel group read the whole 64 KB
    G x G block pair and did the 16 x 128 x 128 dots alone (ncu, gate_up M = 1: 151 registers,
    6% achieved occupancy, 5.0 us for 22% of DRAM); G / SLICE programs per group each read a
    column slice of the blocks, so the same bytes come with G / SLICE times the loads in flight.
    """
    g = tl.program_id(0)
    p = tl.program_id(1)
    sl = tl.program_id(2)
    ngroups = K // G
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_g = tl.arange(0, G)
    offs_j = sl * SLICE + tl.arange(0, SLICE)
    if PDL:
        gdc_launch_dependents()
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + g * G + offs_g[None, :],
                mask=m_mask[:, None], other=0.0)  # fmt: skip
    rot_off = ((p * ngroups + g) * G + offs_g[:, None]) * G + offs_j[None, :]
    if ONE:  # half the block bytes; x rounded to fp16 as xr is (ninth pass, bench only)
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
    PAIRED: tl.constexpr = True,  # else plain fp16 in channel order (the fifth-pass GEMV's xr)
):
    """The HFMA2 GEMV's prologue from the Givens records (eleventh pass), one program per
    (group, partition, BLOCK_M rows): every layer's records loaded before the first gather
    (`_rotated_group_pre`), so the program waits on one memory round trip, not KROT of them,
    and reads ~12.5 KB a group (records) instead of the blocks' 64 KB.

    The rows axis (twenty-fifth pass): one program for all rows ran them one after another in
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


@triton.jit
def gemv2_w4a16_kernel(
    a_ptr,  # [P, M, K] fp32 prologue output, NIBBLE_SCALED (host.rotate_scale, rotate_slices)
    rs_ptr,  # [P, M, K/G, RS] fp32 row sums of the fp16 values per group (the FMA zero point)
    qw_ptr,  # [K/8, N] int32 codes packed along K (nibble s of word r = row 8r + s)
    sc_ptr,  # [K/G, N] fp16 scales
    zp_ptr,  # [K/G, N] uint8 zero codes
    bias_ptr,  # [N] or a dummy
    ws_ptr,  # SPLIT_K > 1: [>= M * N] fp32 workspace, zero on entry and on exit
    cnt_ptr,  # SPLIT_K > 1: [>= N / BLOCK_N] int32 tickets, zero on entry and on exit
    out_ptr,  # [M, N] output dtype
    M,
    N,
    K,
    b1,
    b2,
    HAS_BIAS: tl.constexpr,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1 or 2 activation rows (GEMV2_MAX_M)
    BLOCK_N: tl.constexpr,
    KW: tl.constexpr,  # int32 word rows per chunk (8 KW channels); divides G / 8
    SPLIT_K: tl.constexpr,
    RS: tl.constexpr = 1,  # partial row sums per group in rs (the sliced prologue's)
    ROT: tl.constexpr = False,  # a_ptr is x [M, K]; the Givens layers run in the kernel
    KROT: tl.constexpr = 1,  # ROT: Givens layers per group
    gi_ptr=None,  # ROT: [P, KROT, K] int32 group-local partners (host.givens_tables)
    gc_ptr=None,  # ROT: [P, 2 KROT + 1, K] fp32 channel scales, cos, signed sin
    xs_ptr=None,  # ROT: [programs, BLOCK_M, G] fp32 scratch (each program's rotated group)
    stride_xm=0,  # ROT: x's row stride
    PRE: tl.constexpr = True,  # ROT: every layer's records loaded before the first gather
    PDL: tl.constexpr = False,  # launched dependent on the prologue: prefetch, then wait for it
):
    """out[:M, n-block] = sum over this split's groups of a_p @ dequant(Q); section note above."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0 = pid_n * BLOCK_N
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    ngroups = K // G
    per = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per
    g1 = tl.minimum(g0 + per, ngroups)
    row0 = (part * M).to(tl.int64)
    if PDL:
        prefetch_l2(qw_ptr, n0, N, g0, g1, G, BLOCK_N)
        gdc_wait()  # the prologue's xr and rs are complete and visible past here

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Rows unrolled on 2-D tiles (a 3-D [M, KW, N] product gets a layout that round-trips
    # every weight through shared memory); per-column vectors stay [1, BLOCK_N] so they
    # share the weight tile's layout; the zero point is the row-sum correction.
    offs_r = tl.arange(0, KW)
    q_base = qw_ptr + offs_r[:, None] * N + offs_n[None, :]
    a_row0 = a_ptr + row0 * K
    nm2 = n_mask[None, :]
    if ROT:
        offs_g = tl.arange(0, G)
        xs = xs_ptr + (pid_n * SPLIT_K + pid_k).to(tl.int64) * (BLOCK_M * G)
        jj = offs_g % 8
        nib = ((127 - tl.where(jj < 5, 4 * jj, 4 * (jj - 3))) << 23).to(tl.float32, bitcast=True)
    acc0 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        d0 = tl.zeros((KW, BLOCK_N), dtype=tl.float32)
        d1 = tl.zeros((KW, BLOCK_N), dtype=tl.float32)
        if ROT:
            # The first chunk's words are in flight while the group is rotated.
            q_pre = tl.load(q_base + (g * (G // 8)) * N, mask=nm2, other=0)
            tl.debug_barrier()  # every thread is done reading the previous group's slot
            if PRE:
                xg = _rotated_group_pre(a_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, part, K,
                                        stride_xm, KROT, G)  # fmt: skip
            else:
                xg = _rotated_group(a_ptr, gi_ptr, gc_ptr, offs_m, m_mask, g, part, K,
                                    stride_xm, KROT, G)  # fmt: skip
            xg = tl.clamp(xg, -65504.0, 65504.0).to(tl.float16).to(tl.float32)
            rsv = tl.sum(xg, axis=1)  # [BLOCK_M] row sums of the fp16 values
            tl.store(xs + offs_m[:, None] * G + offs_g[None, :], xg * nib[None, :])
            tl.debug_barrier()  # the slot is written: every thread reads all of it
        else:
            q_pre = tl.zeros((KW, BLOCK_N), dtype=tl.int32)
            rsv = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for ci in tl.static_range(G // (8 * KW)):
            if ROT:
                if ci == 0:
                    q = q_pre
                else:
                    q = tl.load(q_base + (g * (G // 8) + ci * KW) * N, mask=nm2, other=0)
                d0, d1 = _fma_chunk(q, xs + ci * KW * 8, offs_r, M, G, d0, d1, BLOCK_M)
            else:
                q = tl.load(q_base + (g * (G // 8) + ci * KW) * N, mask=nm2, other=0)
                ar = a_row0 + g * G + ci * KW * 8
                d0, d1 = _fma_chunk(q, ar, offs_r, M, K, d0, d1, BLOCK_M)
        s = tl.load(sc_ptr + g * N + offs_n[None, :], mask=nm2, other=0.0).to(tl.float32)
        sz = s * tl.load(zp_ptr + g * N + offs_n[None, :], mask=nm2, other=0).to(tl.float32)
        acc0 += (
            tl.sum(d0, axis=0, keep_dims=True) * s
            - _row_sum2(rs_ptr, row0, 0, M, ngroups, g, RS, ROT, rsv, offs_m) * sz
        )
        if BLOCK_M > 1:
            acc1 += (
                tl.sum(d1, axis=0, keep_dims=True) * s
                - _row_sum2(rs_ptr, row0, 1, M, ngroups, g, RS, ROT, rsv, offs_m) * sz
            )
    acc = tl.where(offs_m[:, None] == 0, acc0, acc)
    if BLOCK_M > 1:
        acc = tl.where(offs_m[:, None] == 1, acc1, acc)

    _gemv_epilogue(acc, ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, offs_m, m_mask, offs_n,
                   n_mask, N, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip
