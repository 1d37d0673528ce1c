"""Triton kernel of the MXFP4 FMA decode GEMV: M <= 4 rows on the FMA units, not 16-row tiles.

Why: the MXFP4 GEMM (`mx_gemm_kernels.mx_gemm_kernel`) serves decode with 16-row matrix-unit tiles,
15 of 16 rows padding at M = 1. It reached 9-12% of the HBM roofline
(docs/notebook/kernels-2026-11-29-to-12-06.md, 2026-11-29 run 3: 41-108 us at M = 1), 2.2-3.6x the
int4 GEMV's time for about the same weight bytes.

Layout (the MXFP4 GEMM's, `mx_repack.repack`, read as int32): row n holds 8 words per 64-column
block pair j; byte b of word w holds K column 64 j + 4 w + b in its low nibble (block 2 j) and
64 j + 32 + 4 w + b in its high nibble (block 2 j + 1). A program owns BLOCK_N rows; each thread
loads 4 adjacent words (one 16-byte load, half a block pair) per row it holds, and the K
reduction stays in the thread until the end (one cross-thread sum per output).

Unpack: an e2m1 code s|E|m with its three magnitude bits at fp16 bits 9..11 and its sign at bit
15 is the fp16 2^-14 e2m1 exactly (E = 0 lands on the fp16 subnormals, which every target keeps),
so a nibble is two shifts, two masks and one convert. On NVIDIA one PTX block does a word's
eight nibbles as four fp16 pairs (`_E2M1_ASM`); elsewhere the same bits come from plain ops.
The block scale 2^(e - 127) multiplies each block's fp32 partial (e8m0 code 0, 2^-127, flushes to
zero as in the per-block GEMM) and the 2^14 is applied once at the end: exact products, fp32 sums.

Loads: on NVIDIA the scale bytes (`_scale`, `ld.global.nc.u8`) and the
activations (`_acts`, two 8-byte `ld.global.nc.v2.b32` a word, bf16 or fp16 converted in the
PTX) are PTX loads in the words' register layout. Triton loads of them came in a layout of their
own and went through shared memory to the words' (16 `bar.sync` an iteration at M = 1, 32 at
M = 2; H200 2026-12-02); now there are none. EVEN_K (K % 64 == 0) reads the high block
at +64 bytes of the low one, without clamps. The host takes the PTX loads for 8-byte aligned
activation rows only; gfx1201 and the interpreter keep the Triton loads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .launch_kernels import _gemv_epilogue

# Nibble p of a word (bits 4p..4p+3) as fp32 output $p: pair (p, p + 4) is one fp16 pair after
# shifting nibble p to bits 12..15 (magnitude then at 9..11 after >> 3, sign at 15).
_E2M1_ASM = tl.constexpr(
    """
{
.reg .b32 t, u;
.reg .b16 l, h;
shl.b32 t, $8, 9;
and.b32 t, t, 0x0E000E00;
shl.b32 u, $8, 12;
and.b32 u, u, 0x80008000;
or.b32 t, t, u;
mov.b32 {l, h}, t;
cvt.f32.f16 $0, l;
cvt.f32.f16 $4, h;
shl.b32 t, $8, 5;
and.b32 t, t, 0x0E000E00;
shl.b32 u, $8, 8;
and.b32 u, u, 0x80008000;
or.b32 t, t, u;
mov.b32 {l, h}, t;
cvt.f32.f16 $1, l;
cvt.f32.f16 $5, h;
shl.b32 t, $8, 1;
and.b32 t, t, 0x0E000E00;
shl.b32 u, $8, 4;
and.b32 u, u, 0x80008000;
or.b32 t, t, u;
mov.b32 {l, h}, t;
cvt.f32.f16 $2, l;
cvt.f32.f16 $6, h;
shr.b32 t, $8, 3;
and.b32 t, t, 0x0E000E00;
and.b32 u, $8, 0x80008000;
or.b32 t, t, u;
mov.b32 {l, h}, t;
cvt.f32.f16 $3, l;
cvt.f32.f16 $7, h;
}
"""
)


@triton.jit
def _e2m1(w, s: tl.constexpr):
    """fp32 2^-14 e2m1 of the nibble at bits s..s+3 of int32 words w, exactly (plain ops)."""
    if s <= 9:  # noqa: SIM108  (a Triton constexpr branch, kept explicit)
        mag = (w << (9 - s)) & 0x0E00
    else:
        mag = (w >> (s - 9)) & 0x0E00
    if s <= 12:  # noqa: SIM108
        sgn = (w << (12 - s)) & 0x8000
    else:
        sgn = (w >> (s - 12)) & 0x8000
    return (mag | sgn).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _unpack(q, ASM: tl.constexpr):
    """The 8 nibbles of int32 words q as fp32 2^-14 e2m1 values, nibble p first at p."""
    if ASM:
        return tl.inline_asm_elementwise(
            _E2M1_ASM, "=f,=f,=f,=f,=f,=f,=f,=f,r", [q], dtype=(tl.float32,) * 8, is_pure=True,
            pack=1,
        )  # fmt: skip
    return (_e2m1(q, 0), _e2m1(q, 4), _e2m1(q, 8), _e2m1(q, 12),
            _e2m1(q, 16), _e2m1(q, 20), _e2m1(q, 24), _e2m1(q, 28))  # fmt: skip


@triton.jit
def _scale(sc_ptr, r, n3, ok, N, ASM: tl.constexpr, U: tl.constexpr, CLAMP: tl.constexpr, j1):
    """int32 e8m0 codes [BN, U, 1] of scale rows r [1, U, 1] at columns n3, 0 where not `ok`.

    With ASM the byte comes from a PTX load: a `tl.load` here takes the coalesced layout of the
    scale row (threads along N), unlike the words' (threads along K), and Triton 3.6 then moved
    every [BN, U, 8] product through shared memory to meet it (16 barriers an iteration, twice
    that at 2 rows). The asm op has no layout of its own, so it takes the words'. Columns past N
    read column N - 1; with CLAMP (an unroll, or the prefetch past the split's last pair) rows
    past the split's last pair read its last: in bounds. The former's outputs are never stored;
    the latter's scales are zeroed (U > 1) or never used (the prefetch after the last pair)."""
    if ASM:
        rc = tl.minimum(r, 2 * j1 - 1) if CLAMP else r
        e = tl.inline_asm_elementwise(
            "ld.global.nc.u8 $0, [$1];", "=r,l", [sc_ptr + rc * N + tl.minimum(n3, N - 1)],
            dtype=tl.int32, is_pure=True, pack=1,
        )  # fmt: skip
        return tl.where(ok, e, 0) if U > 1 else e
    return tl.load(sc_ptr + r * N + n3, mask=ok, other=0).to(tl.int32)


@triton.jit
def _fetch(q_base, sc_ptr, j, offs_u, n3, nm3, N, ASM: tl.constexpr, U: tl.constexpr,
           CLAMP: tl.constexpr, j1):  # fmt: skip
    """The words [BN, U, 8] and the two blocks' e8m0 codes [BN, U, 1] of pairs j + offs_u (past
    the split's last: zero words, zero or unused codes)."""
    ju = j + offs_u
    ok = nm3 & (ju < j1)
    q = tl.load(q_base + j * 8, mask=ok, other=0)
    ea = _scale(sc_ptr, 2 * ju, n3, ok, N, ASM, U, CLAMP, j1)
    eb = _scale(sc_ptr, 2 * ju + 1, n3, ok, N, ASM, U, CLAMP, j1)
    return q, ea, eb


# Activation columns c..c+3 and c+32..c+35 of one row as 8 fp32 (bits): two 8-byte loads
# ($8 and HI: `$9`, a second address, or `$8+64` where K % 64 == 0) and a 16-bit -> fp32 move
# each (bf16: a shift or a mask).
_ACT_BF16 = """
{
.reg .b32 t0, t1, t2, t3;
ld.global.nc.v2.b32 {t0, t1}, [$8];
ld.global.nc.v2.b32 {t2, t3}, [HI];
shl.b32 $0, t0, 16;
and.b32 $1, t0, 0xFFFF0000;
shl.b32 $2, t1, 16;
and.b32 $3, t1, 0xFFFF0000;
shl.b32 $4, t2, 16;
and.b32 $5, t2, 0xFFFF0000;
shl.b32 $6, t3, 16;
and.b32 $7, t3, 0xFFFF0000;
}
"""


# fp16 activations: each of the 4 words t0..t3 holds 2 of them (outputs $2i, $2i + 1 as fp32).
_ACT_F16 = (
    """
{
.reg .b32 t0, t1, t2, t3;
.reg .b16 l, h;
.reg .f32 f;
ld.global.nc.v2.b32 {t0, t1}, [$8];
ld.global.nc.v2.b32 {t2, t3}, [HI];
"""
    + "".join(
        f"mov.b32 {{l, h}}, t{i};\ncvt.f32.f16 f, l;\nmov.b32 ${2 * i}, f;\n"
        f"cvt.f32.f16 f, h;\nmov.b32 ${2 * i + 1}, f;\n"
        for i in range(4)
    )
    + "}\n"
)


_ACT_ASM_BF16 = tl.constexpr(_ACT_BF16.replace("[HI]", "[$9]"))


_ACT_ASM_F16 = tl.constexpr(_ACT_F16.replace("[HI]", "[$9]"))


_ACT_ASM_BF16_EVEN = tl.constexpr(_ACT_BF16.replace("[HI]", "[$8+64]"))


_ACT_ASM_F16_EVEN = tl.constexpr(_ACT_F16.replace("[HI]", "[$8+64]"))


@triton.jit
def _act1(a_row, kb, b: tl.constexpr, K, ok):
    """fp32 [1, U, 8]: activation columns kb + b of one row (0 past K or for a row past M)."""
    return tl.load(a_row + kb + b, mask=(kb + b < K) & ok, other=0.0).to(tl.float32)


@triton.jit
def _acts(a_row, kb, K, BF16: tl.constexpr, EVEN_K: tl.constexpr):
    """The 8 activations of the words' columns kb + 0..3 and kb + 32..35 as fp32 [1, U, 8] each,
    from two 8-byte loads per word (the host asserts the alignment), in the words' layout as
    `_scale`'s bytes are. Unless EVEN_K, addresses past K are clamped to K - 4 (in bounds; the
    codes and scales there are zero, so they add 0 x a finite value); a row past M is the
    caller's row M - 1."""
    if EVEN_K:
        asm_e: tl.constexpr = _ACT_ASM_BF16_EVEN if BF16 else _ACT_ASM_F16_EVEN
        r = tl.inline_asm_elementwise(
            asm_e, "=r,=r,=r,=r,=r,=r,=r,=r,l", [a_row + kb],
            dtype=(tl.int32,) * 8, is_pure=True, pack=1,
        )  # fmt: skip
    else:
        asm: tl.constexpr = _ACT_ASM_BF16 if BF16 else _ACT_ASM_F16
        lo = tl.minimum(kb, K - 4)
        hi = tl.minimum(kb + 32, K - 4)
        r = tl.inline_asm_elementwise(
            asm, "=r,=r,=r,=r,=r,=r,=r,=r,l,l", [a_row + lo, a_row + hi],
            dtype=(tl.int32,) * 8, is_pure=True, pack=1,
        )  # fmt: skip
    return (r[0].to(tl.float32, bitcast=True), r[1].to(tl.float32, bitcast=True),
            r[2].to(tl.float32, bitcast=True), r[3].to(tl.float32, bitcast=True),
            r[4].to(tl.float32, bitcast=True), r[5].to(tl.float32, bitcast=True),
            r[6].to(tl.float32, bitcast=True), r[7].to(tl.float32, bitcast=True))  # fmt: skip


@triton.jit
def _pair(w, a_row, kb, K, ok, sa, sb, acc, ASM: tl.constexpr, BF16: tl.constexpr,
          EVEN_K: tl.constexpr):  # fmt: skip
    """acc [BN, U, 8] += the block pairs' products for one activation row, each block scaled.
    Without ASM the loads stay interleaved with the products (fewer live registers: gfx1201)."""
    w0, w1, w2, w3, w4, w5, w6, w7 = w
    if ASM:
        x0, x1, x2, x3, y0, y1, y2, y3 = _acts(a_row, kb, K, BF16, EVEN_K)
        da = w0 * x0 + w2 * x1 + w4 * x2 + w6 * x3
        db = w1 * y0 + w3 * y1 + w5 * y2 + w7 * y3
    else:
        da = w0 * _act1(a_row, kb, 0, K, ok) + w2 * _act1(a_row, kb, 1, K, ok)
        da += w4 * _act1(a_row, kb, 2, K, ok) + w6 * _act1(a_row, kb, 3, K, ok)
        db = w1 * _act1(a_row, kb, 32, K, ok) + w3 * _act1(a_row, kb, 33, K, ok)
        db += w5 * _act1(a_row, kb, 34, K, ok) + w7 * _act1(a_row, kb, 35, K, ok)
    return acc + da * sa + db * sb


@triton.jit
def _col(acc):
    """[1, BN]: the sum of a [BN, U, 8] accumulator per column, times the unpack's 2^14."""
    return (tl.sum(tl.sum(acc, axis=2), axis=1) * 16384.0)[None, :]


@triton.jit
def mx_gemv_kernel(
    a_ptr,  # [P, M, K] bf16/fp16: row m of plane p at a_ptr + (p * M + m) * stride_am
    qw_ptr,  # [N, Kp/8] int32 view of the repacked codes (module doc)
    sc_ptr,  # [Kp/32, N] u8 e8m0
    bias_ptr,  # [N] or a dummy
    ws_ptr,  # SPLIT_K > 1: [>= M * N] fp32 workspace, zero on entry and on exit
    cnt_ptr,  # SPLIT_K > 1: [>= N / BLOCK_N] int32 tickets, zero on entry and on exit
    out_ptr,  # [M, N] out dtype
    M,
    N,
    K,
    stride_am,
    b1,  # first column of plane 1 (N when A has one plane)
    b2,  # first column of plane 2 (N when there is none)
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 activation rows, unrolled
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    ASM: tl.constexpr,  # the unpack as PTX (NVIDIA); else plain ops (ROCm, the interpreter)
    U: tl.constexpr = 1,  # block pairs an iteration: their loads are in flight together
    BF16: tl.constexpr = True,  # the activations' dtype: bf16, else fp16
    PF: tl.constexpr = False,  # prefetch: the next iteration's words loaded before this one's math
    EVEN_K: tl.constexpr = False,  # K % 64 == 0: no padded last pair (no address clamps)
):
    """out[:M, n-block] = sum over this split's block pairs of A_p @ W^T (module doc)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0 = pid_n * BLOCK_N
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    npairs = tl.cdiv(K, 64)
    per = tl.cdiv(npairs, SPLIT_K)
    j0 = pid_k * per
    j1 = tl.minimum(j0 + per, npairs)
    offs_u = tl.arange(0, U)[None, :, None]
    offs_w = tl.arange(0, 8)[None, None, :]
    n3 = offs_n[:, None, None]
    nm3 = n_mask[:, None, None]
    q_base = qw_ptr + n3.to(tl.int64) * (npairs * 8) + offs_u * 8 + offs_w
    a0 = a_ptr + (part * M).to(tl.int64) * stride_am
    # Rows past M are masked to zero in the activation loads (ASM: row M - 1 is read again)
    # and never stored.
    a1 = a0 + tl.minimum(1, M - 1) * stride_am
    a2 = a0 + tl.minimum(2, M - 1) * stride_am
    a3 = a0 + tl.minimum(3, M - 1) * stride_am
    ok0 = offs_w < 8
    ok1 = (offs_w * 0 + 1) < M
    ok2 = (offs_w * 0 + 2) < M
    ok3 = (offs_w * 0 + 3) < M
    acc0 = tl.zeros((BLOCK_N, U, 8), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N, U, 8), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N, U, 8), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N, U, 8), dtype=tl.float32)
    CLAMP: tl.constexpr = U > 1 or PF
    if PF:
        q, ea, eb = _fetch(q_base, sc_ptr, j0, offs_u, n3, nm3, N, ASM, U, CLAMP, j1)
    for j in range(j0, j1, U):
        ju = j + offs_u  # [1, U, 1] pair indices; past j1 masked (zero codes, zero scales)
        if PF:  # the next iteration's words in flight during this one's arithmetic
            qn, ean, ebn = _fetch(q_base, sc_ptr, j + U, offs_u, n3, nm3, N, ASM, U, CLAMP, j1)
        else:
            q, ea, eb = _fetch(q_base, sc_ptr, j, offs_u, n3, nm3, N, ASM, U, CLAMP, j1)
        sa = (ea << 23).to(tl.float32, bitcast=True)
        sb = (eb << 23).to(tl.float32, bitcast=True)
        w = _unpack(q, ASM)
        kb = 64 * ju + 4 * offs_w
        acc0 = _pair(w, a0, kb, K, ok0, sa, sb, acc0, ASM, BF16, EVEN_K)
        if BLOCK_M > 1:
            acc1 = _pair(w, a1, kb, K, ok1, sa, sb, acc1, ASM, BF16, EVEN_K)
        if BLOCK_M > 2:
            acc2 = _pair(w, a2, kb, K, ok2, sa, sb, acc2, ASM, BF16, EVEN_K)
            acc3 = _pair(w, a3, kb, K, ok3, sa, sb, acc3, ASM, BF16, EVEN_K)
        if PF:
            q, ea, eb = qn, ean, ebn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = tl.where(offs_m[:, None] == 0, _col(acc0), acc)
    if BLOCK_M > 1:
        acc = tl.where(offs_m[:, None] == 1, _col(acc1), acc)
    if BLOCK_M > 2:
        acc = tl.where(offs_m[:, None] == 2, _col(acc2), acc)
        acc = tl.where(offs_m[:, None] == 3, _col(acc3), acc)
    _gemv_epilogue(acc, ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, offs_m, m_mask, offs_n,
                   n_mask, N, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip
