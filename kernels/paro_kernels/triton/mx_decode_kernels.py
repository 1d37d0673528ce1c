"""The MXFP4 decode GEMVs (issue 14): the sixth and seventh passes' M <= 4 rows on the FMA units,
not 16-row tiles (this docstring), and the fourteenth pass's M <= 16 on the matrix unit through
mma.sync (the section at the end, served on NVIDIA since).

Why: the MXFP4 GEMM (`mx_kernels.mx_gemm_kernel`) serves decode with 16-row matrix-unit tiles,
15 of 16 rows padding at M = 1. It reached 9-12% of the HBM roofline (BENCH.md, 2026-11-29 run
3: 41-108 us at M = 1), 2.2-3.6x the int4 GEMV's time for about the same weight bytes.

Layout (the MXFP4 GEMM's, `mx_host.repack`, read as int32): row n holds 8 words per 64-column
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

Loads (seventh pass): on NVIDIA the scale bytes (`_scale`, `ld.global.nc.u8`) and the
activations (`_acts`, two 8-byte `ld.global.nc.v2.b32` a word, bf16 or fp16 converted in the
PTX) are PTX loads in the words' register layout. Triton loads of them came in a layout of their
own and went through shared memory to the words' (16 `bar.sync` an iteration at M = 1, 32 at
M = 2; BENCH.md, seventh pass); now there are none. EVEN_K (K % 64 == 0) reads the high block
at +64 bytes of the low one, without clamps. The host takes the PTX loads for 8-byte aligned
activation rows only; gfx1201 and the interpreter keep the Triton loads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .decode_kernels import (
    _join4,
    _mma_rows,
    _mma_store,
    _pair_f32,
    _quad_lanes,
    _split4,
    _tile_add,
    _zeros8,
)
from .kernels import _gemv_epilogue

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


# --------------------------------------------------------------------------- the mma.sync GEMV
#
# Fourteenth pass (issue 14): MXFP4 at decode (M <= 16) on the matrix unit, as the int4 and
# int5 formats run since the twelfth / thirteenth passes (`decode_kernels.gemv_mma_kernel`):
# `mma.sync.m16n8k16` (fp16 in, fp32 accumulate) with the unpacked weights as the A operand
# straight from the thread's registers. The FMA GEMV above costs a multiply-add per weight per
# activation row, so its time grew with M (gate_up 29.4 / 37.8 / 52.4 us at M = 1 / 2 / 4,
# seventh pass) and the 16-row GEMM took over from M = 5 (91.5 us at M = 4); here a weight costs
# its unpack at any M <= 8, a second tile of activations adds one mma per word pair to M = 16.
#
# Lane mapping (lane = 4 gid + tig; m16n8k16 fragments as in `decode_kernels`): a thread owns
# the column quad n0 + 4 (8 warp + gid) + (0..3), as the int4 kernel; columns (0, 1) are A rows
# (gid, gid + 8) of one mma pair, (2, 3) of another. A block pair j of a column is 8 words
# (`mx_host.repack`: word w holds channels 64 j + 4 w + b in the low nibble of byte b, block
# 2 j, and 64 j + 32 + 4 w + b in its high nibble, block 2 j + 1); the thread loads words
# (2 tig, 2 tig + 1) of each of its 4 columns (8-byte loads; the gid's 4 lanes read the pair's
# 32 bytes). Two PRMTs interleave them ([A0 A1 B0 B1], [A2 A3 B2 B3]: A = word 2 tig) so that
# every fp16 pair of the unpack holds channels (8 tig + b, 8 tig + b + 4) of one block: the
# paired prologue's layout at pair shift 0 (activation row 8 r holds (8 r + j, 8 r + j + 4) in
# word j), so activation row 8 j + tig is the low block's B operand for the thread and row
# 8 j + 4 + tig the high block's, each one 16-byte load, no conversion. Each block is one chain
# of 2 mmas (16 channels each) from a zero accumulator; its fp32 sums then take the block's
# scale (one FMA per output: every block has its own e8m0 scale per column, so blocks cannot
# share an accumulator). The scales are [Kp/32, N] bytes: one 4-byte load a block gives the
# quad's 4 columns; a byte e becomes the fp32 2^(e - 127) as e << 23 (code 0 flushes to 0, as
# the other MXFP4 kernels do).
#
# Unpack: an e2m1 code s|E|m with E|m at fp16 bits 9..11 and s at bit 15 is the fp16
# 2^-14 e2m1 exactly (E = 0 on the fp16 subnormals: the mma keeps them), the 2^14 applied once
# at the end. Per fp16 pair (nibbles at bits s and s + 16 of an interleaved word): a shift and
# an AND place the magnitudes, a shift and a LOP3 OR in the signs (the last pair's signs are in
# place: 3 instructions): 15 a word plus the PRMT, against the int4 unpack's 9.
# Activations without a prologue (NVFP4 -> MXFP4: x itself, ACT_BF16 / ACT_F16) are loaded as the
# rows' own 8 channels at the same addresses and paired in the asm, once a block pair for all the
# thread's columns (a separate pairing launch cost 1.3-2.4 us a call, BENCH.md run 1 / 2).
# The interpreter (no mma) computes the same per-(column, row) block sums with plain ops.


ACT_PAIRED, ACT_BF16, ACT_F16 = 0, 1, 2  # the mma GEMV's activations (`mx_mma_asm`'s mode)


def mx_mma_asm(tiles: int = 1, mode: int = ACT_PAIRED) -> str:
    """PTX of one block pair against the thread's column quad and `tiles` 8-row activation
    tiles: outputs per tile t at 8 t + (0..3) the fp32 sums of output row 8 t + 2 tig for
    columns 0..3, at 8 t + (4..7) row 8 t + 2 tig + 1; inputs the 8 words (column c's words
    2 tig, 2 tig + 1 at 2 c, 2 c + 1), the low and the high block's 4 e8m0 bytes (column c at
    byte c), per tile the 8 paired activation words (the low block's row, then the high
    block's), then per tile the running sums as the outputs are laid out. `mode` (ACT_*): the
    activation words are paired fp16 (0), or the rows' own 8 channels (2 a word, in order),
    paired here: bf16 (1) as fp16 through fp32 (`cvt.rn.satfinite`: exact in fp16's normal
    range, saturated past it as `pair_fp16` does), fp16 (2) by two PRMTs a word pair."""
    base = 8 * tiles
    act = base + 10
    acc = act + 8 * tiles
    lines = [
        "{",
        ".reg .b32 u, v, x, y, p<8>, q<8>;",
        ".reg .f32 z, sa, sb, ta, tb, d<4>, e<4>;",
        "mov.f32 z, 0f00000000;",
    ]
    av = [f"${act + i}" for i in range(8 * tiles)]  # the B operands, paired fp16
    if mode:
        lines += [f".reg .b32 a<{8 * tiles}>;", ".reg .f32 f<8>;"]
        for t in range(tiles):
            for row in range(2):  # the low block's row, then the high block's
                w = [f"${base + 10 + 8 * t + 4 * row + i}" for i in range(4)]
                o = 8 * t + 4 * row
                if mode == ACT_F16:  # (c0 c1) (c2 c3) (c4 c5) (c6 c7) -> (c0 c4) (c1 c5) ..
                    lines += [f"prmt.b32 a{o}, {w[0]}, {w[2]}, 0x5410;",
                              f"prmt.b32 a{o + 1}, {w[0]}, {w[2]}, 0x7632;",
                              f"prmt.b32 a{o + 2}, {w[1]}, {w[3]}, 0x5410;",
                              f"prmt.b32 a{o + 3}, {w[1]}, {w[3]}, 0x7632;"]  # fmt: skip
                    continue
                for i in range(4):  # bf16 channels 2 i (low half), 2 i + 1 (high half)
                    lines += [f"shl.b32 u, {w[i]}, 16;", f"mov.b32 f{2 * i}, u;",
                              f"and.b32 u, {w[i]}, 0xFFFF0000;",
                              f"mov.b32 f{2 * i + 1}, u;"]  # fmt: skip
                for j in range(4):  # pair word j: (c_j, c_j+4), c_j in the low half
                    lines.append(f"cvt.rn.satfinite.f16x2.f32 a{o + j}, f{j + 4}, f{j};")
        av = [f"a{i}" for i in range(8 * tiles)]
    mask, sgn = "0x0E000E00", "0x80008000"
    for half in range(2):  # columns (0, 1), then (2, 3)
        for col, r in ((2 * half, "p"), (2 * half + 1, "q")):
            wa, wb = f"${base + 2 * col}", f"${base + 2 * col + 1}"
            lines += [f"prmt.b32 x, {wa}, {wb}, 0x5410;", f"prmt.b32 y, {wa}, {wb}, 0x7632;"]
            for src, o in (("x", 0), ("y", 4)):  # pairs at s = 0 (low block), 4 (high), 8, 12
                for i, (ms, ss) in enumerate(((9, 12), (5, 8), (1, 4))):
                    lines += [
                        f"shl.b32 u, {src}, {ms};",
                        f"and.b32 u, u, {mask};",
                        f"shl.b32 v, {src}, {ss};",
                        f"lop3.b32 {r}{o + i}, u, v, {sgn}, 0xf8;",
                    ]
                lines += [
                    f"shr.u32 u, {src}, 3;",
                    f"and.b32 u, u, {mask};",
                    f"lop3.b32 {r}{o + 3}, u, {src}, {sgn}, 0xf8;",
                ]
        c0, c1 = 2 * half, 2 * half + 1
        # the 4 columns' scales at byte c of the two block words: column c0 / c1's as fp32
        for name, word in (("sa", base + 8), ("sb", base + 9)):
            for reg, c in ((name, c0), ("t" + name[1], c1)):
                sh = 23 - 8 * c
                op = f"shl.b32 u, ${word}, {sh};" if sh >= 0 else f"shr.u32 u, ${word}, {-sh};"
                lines += [op, "and.b32 u, u, 0x7F800000;", f"mov.b32 {reg}, u;"]
        mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
        for t in range(tiles):
            o, ci = 8 * t, acc + 8 * t
            # low block: pairs (x: s = 0, 8) then (y: s = 0, 8); high block: s = 4, 12
            for dd, frags in (("d", ("p0, q0, p2, q2", "p4, q4, p6, q6")),
                              ("e", ("p1, q1, p3, q3", "p5, q5, p7, q7"))):  # fmt: skip
                regs = ", ".join(f"{dd}{i}" for i in range(4))
                b = av[8 * t + (0 if dd == "d" else 4) :][:4]
                lines += [
                    f"{mma} {{{regs}}}, {{{frags[0]}}}, {{{b[0]}, {b[1]}}}, {{z, z, z, z}};",
                    f"{mma} {{{regs}}}, {{{frags[1]}}}, {{{b[2]}, {b[3]}}}, {{{regs}}};",
                ]
            # d0 / d1: column c0 (A row gid), output rows 2 tig / 2 tig + 1; d2 / d3: column c1
            for i, row, c, sl in ((0, 0, c0, "s"), (1, 4, c0, "s"), (2, 0, c1, "t"),
                                  (3, 4, c1, "t")):  # fmt: skip
                out, old = f"${o + row + c}", f"${ci + row + c}"
                lines += [f"fma.rn.f32 {out}, d{i}, {sl}a, {old};",
                          f"fma.rn.f32 {out}, e{i}, {sl}b, {out};"]  # fmt: skip
    return "\n".join([*lines, "}"])


def _mx_mma_constraints(tiles: int) -> str:
    """`mx_mma_asm(tiles)`'s operand constraints."""
    return ",".join(["=f"] * (8 * tiles) + ["r"] * (10 + 8 * tiles) + ["f"] * (8 * tiles))


_MX_MMA_CONSTRAINTS = tl.constexpr(_mx_mma_constraints(1))
_MX_MMA_CONSTRAINTS2 = tl.constexpr(_mx_mma_constraints(2))
_MX_MMA_CONSTRAINTS4 = tl.constexpr(_mx_mma_constraints(4))
_MX_MMA_ASM = tl.constexpr(mx_mma_asm(1))
_MX_MMA_ASM2 = tl.constexpr(mx_mma_asm(2))
_MX_MMA_ASM4 = tl.constexpr(mx_mma_asm(4))
_MX_MMA_ASM_BF16 = tl.constexpr(mx_mma_asm(1, ACT_BF16))
_MX_MMA_ASM2_BF16 = tl.constexpr(mx_mma_asm(2, ACT_BF16))
_MX_MMA_ASM4_BF16 = tl.constexpr(mx_mma_asm(4, ACT_BF16))
_MX_MMA_ASM_F16 = tl.constexpr(mx_mma_asm(1, ACT_F16))
_MX_MMA_ASM2_F16 = tl.constexpr(mx_mma_asm(2, ACT_F16))
_MX_MMA_ASM4_F16 = tl.constexpr(mx_mma_asm(4, ACT_F16))


@triton.jit
def _mx_word2(qw_ptr, colq, c: tl.constexpr, wh, KW, N, ok):
    """Words (2 tig, 2 tig + 1) of the block pair (wh [1, T, 2] word indices) of the thread's
    column c: two [1, T] int32 from one 8-byte load (zero where not ok or past N)."""
    cc = colq + c
    return tl.split(tl.load(qw_ptr + (cc * KW + wh), mask=(cc < N) & ok, other=0))


@triton.jit
def _mx_act8(ap, lo_ok, hi_ok, T: tl.constexpr):
    """One activation tile's 8 paired words for the thread: the low block's row at ap, the high
    block's 16 words further, 4 each (zero where not ok)."""
    x0, x1, x2, x3 = _split4(tl.load(ap, mask=lo_ok, other=0), T)
    x4, x5, x6, x7 = _split4(tl.load(ap + 16, mask=hi_ok, other=0), T)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _mx_loads(qw_ptr, sc_ptr, a_rows, left, colq, quad_w, jp, j1, tig, N, K,
              T: tl.constexpr, NT: tl.constexpr):  # fmt: skip
    """Everything block pair jp's mmas read, as a tuple for `_mx_mma`: the thread's 8 words, the
    two blocks' scale words and per activation tile t (8 rows, NT of them) the 8 paired
    activation words of its row gid + 8 t (`left`: M - gid; tiles past NT repeat the first's,
    unused); zero past j1."""
    ok = jp < j1
    KW = tl.cdiv(K, 64) * 8
    h = tl.arange(0, 2)[None, None, :]
    w = tl.max_contiguous(tl.multiple_of(8 * jp + 2 * tig[None, :, None], (1, 1, 2)), (1, 1, 2))
    q0, q1 = _mx_word2(qw_ptr, colq, 0, w + h, KW, N, ok)
    q2, q3 = _mx_word2(qw_ptr, colq, 1, w + h, KW, N, ok)
    q4, q5 = _mx_word2(qw_ptr, colq, 2, w + h, KW, N, ok)
    q6, q7 = _mx_word2(qw_ptr, colq, 3, w + h, KW, N, ok)
    # the low and the high block's scale words of the quad ([Kp/32, N/4] int32)
    sab = tl.load(sc_ptr + ((2 * jp + h) * (N // 4) + quad_w), mask=ok & (quad_w * 4 < N),
                  other=0)  # fmt: skip
    sa, sb = tl.split(sab)
    # activation rows 8 jp + tig (low block) and 8 jp + 4 + tig (high), 4 words each
    r_lo = 8 * jp + tig[None, :, None]
    ap = a_rows + r_lo * 4 + tl.arange(0, 4)[None, None, :]
    lo_ok = ok & (r_lo < K // 8)
    hi_ok = ok & (r_lo + 4 < K // 8)
    tile = 8 * (K // 2)  # words between activation row gid and gid + 8
    x0, x1, x2, x3, x4, x5, x6, x7 = _mx_act8(ap, lo_ok & (left > 0), hi_ok & (left > 0), T)
    y0, y1, y2, y3, y4, y5, y6, y7 = x0, x1, x2, x3, x4, x5, x6, x7
    z0, z1, z2, z3, z4, z5, z6, z7 = x0, x1, x2, x3, x4, x5, x6, x7
    v0, v1, v2, v3, v4, v5, v6, v7 = x0, x1, x2, x3, x4, x5, x6, x7
    if NT >= 2:
        y0, y1, y2, y3, y4, y5, y6, y7 = _mx_act8(ap + tile, lo_ok & (left > 8),
                                                    hi_ok & (left > 8), T)  # fmt: skip
    if NT == 4:
        z0, z1, z2, z3, z4, z5, z6, z7 = _mx_act8(ap + 2 * tile, lo_ok & (left > 16),
                                                    hi_ok & (left > 16), T)  # fmt: skip
        v0, v1, v2, v3, v4, v5, v6, v7 = _mx_act8(ap + 3 * tile, lo_ok & (left > 24),
                                                    hi_ok & (left > 24), T)  # fmt: skip
    return (q0, q1, q2, q3, q4, q5, q6, q7, sa, sb,
            x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7,
            z0, z1, z2, z3, z4, z5, z6, z7, v0, v1, v2, v3, v4, v5, v6, v7)  # fmt: skip


@triton.jit
def _mx_mma(ld, acc, NT: tl.constexpr, ACT: tl.constexpr):
    """One block pair (`_mx_loads`' tuple) through `mx_mma_asm`: acc, the 32 running sums c in
    the asm's output order (tile t: c[8 t .. 8 t + 3] row 8 t + 2 tig, c[8 t + 4 ..] row
    8 t + 2 tig + 1, of the quad's 4 columns; tiles past NT unused)."""
    (q0, q1, q2, q3, q4, q5, q6, q7, sa, sb,
     x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7,
     z0, z1, z2, z3, z4, z5, z6, z7, v0, v1, v2, v3, v4, v5, v6, v7) = ld  # fmt: skip
    (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
     c16, c17, c18, c19, c20, c21, c22, c23,
     c24, c25, c26, c27, c28, c29, c30, c31) = acc  # fmt: skip
    if NT == 4:
        plain4: tl.constexpr = _MX_MMA_ASM4_BF16 if ACT == 1 else _MX_MMA_ASM4_F16
        asm4: tl.constexpr = _MX_MMA_ASM4 if ACT == 0 else plain4
        return tl.inline_asm_elementwise(
            asm4, _MX_MMA_CONSTRAINTS4,
            [q0, q1, q2, q3, q4, q5, q6, q7, sa, sb,
             x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7,
             z0, z1, z2, z3, z4, z5, z6, z7, v0, v1, v2, v3, v4, v5, v6, v7,
             c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
             c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31],
            dtype=(tl.float32,) * 32, is_pure=True, pack=1,
        )  # fmt: skip
    if NT == 2:
        plain2: tl.constexpr = _MX_MMA_ASM2_BF16 if ACT == 1 else _MX_MMA_ASM2_F16
        asm2: tl.constexpr = _MX_MMA_ASM2 if ACT == 0 else plain2
        (c0, c1, c2, c3, c4, c5, c6, c7,
         c8, c9, c10, c11, c12, c13, c14, c15) = tl.inline_asm_elementwise(
            asm2, _MX_MMA_CONSTRAINTS2,
            [q0, q1, q2, q3, q4, q5, q6, q7, sa, sb,
             x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7,
             c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15],
            dtype=(tl.float32,) * 16, is_pure=True, pack=1,
        )  # fmt: skip
    else:
        plain: tl.constexpr = _MX_MMA_ASM_BF16 if ACT == 1 else _MX_MMA_ASM_F16
        asm: tl.constexpr = _MX_MMA_ASM if ACT == 0 else plain
        c0, c1, c2, c3, c4, c5, c6, c7 = tl.inline_asm_elementwise(
            asm, _MX_MMA_CONSTRAINTS,
            [q0, q1, q2, q3, q4, q5, q6, q7, sa, sb,
             x0, x1, x2, x3, x4, x5, x6, x7, c0, c1, c2, c3, c4, c5, c6, c7],
            dtype=(tl.float32,) * 8, is_pure=True, pack=1,
        )  # fmt: skip
    return (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
            c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30,
            c31)  # fmt: skip


@triton.jit
def _act_f32(a, c: tl.constexpr, ACT: tl.constexpr):
    """Channel c's activation in int32 word a as fp32: the paired layout's fp16 half
    ((c % 8) // 4; ACT 0), or a plain row's half c % 2 (bf16: ACT 1, fp16: ACT 2)."""
    if ACT == 1:
        v = (a << 16) if c % 2 == 0 else (a & -65536)
        return v.to(tl.float32, bitcast=True)
    if ACT == 2:
        return _pair_f32(a, c % 2 == 1)
    return _pair_f32(a, (c % 8) >= 4)


@triton.jit
def _mx_pair_ops(qw_ptr, sc_ptr, a_e, a_o, ok_e, ok_o, col, n_mask, jp, N, K,
                 ACT: tl.constexpr):  # fmt: skip
    """One block pair of the thread's 4 columns with plain ops (the interpreter): the fp32
    2^-14-scaled block sums against activation rows a_e / a_o ([1, T, 1] row pointers into the
    paired layout, or with ACT > 0 plain rows), each block times its scale."""
    KW = tl.cdiv(K, 64) * 8
    zk = ok_e.to(tl.int32) * 0
    de = tl.zeros(col.shape, tl.float32)
    do = tl.zeros(col.shape, tl.float32)
    for blk in tl.static_range(2):
        e = tl.load(sc_ptr + (2 * jp + blk) * N + col, mask=n_mask, other=0).to(tl.int32)
        s = (e << 23).to(tl.float32, bitcast=True)
        be = tl.zeros(col.shape, tl.float32)
        bo = tl.zeros(col.shape, tl.float32)
        for w in tl.static_range(8):
            q = tl.load(qw_ptr + col * KW + 8 * jp + w, mask=n_mask, other=0)
            for b in tl.static_range(4):
                c: tl.constexpr = 32 * blk + 4 * w + b  # channel 64 jp + c: paired row
                # paired: row 8 jp + c // 8, word c % 4, half (c % 8) // 4; plain: word c // 2
                wd = (8 * jp + c // 8) * 4 + ((c % 8) // 2 if ACT > 0 else c % 4)
                wv = _e2m1(q >> (8 * b + 4 * blk), 0)
                ok = (zk + 64 * jp + c) < K  # a tensor: the interpreter's jp is an int
                ae = tl.load(a_e + wd, mask=ok_e & ok, other=0)
                ao = tl.load(a_o + wd, mask=ok_o & ok, other=0)
                be += wv * _act_f32(ae, c, ACT)
                bo += wv * _act_f32(ao, c, ACT)
        de += be * s
        do += bo * s
    return de, do


@triton.jit
def mx_gemv_mma_kernel(
    a_ptr,  # [P, M, K/2] int32: paired fp16 activations (pairs (8r + j, 8r + j + 4)), unscaled;
    # ACT 1 / 2: the bf16 / fp16 rows themselves (2 channels a word, in order)
    qw_ptr,  # [N, Kp/8] int32 view of the repacked codes (module doc)
    sc_ptr,  # ASM: [Kp/32, N/4] int32 view of the e8m0 codes; else [Kp/32, N] u8
    bias_ptr,  # [N] or a dummy
    ws_ptr,  # SPLIT_K > 1: [>= M * N] fp32 workspace, zero on entry and on exit
    cnt_ptr,  # SPLIT_K > 1: [>= N / T] int32 tickets, zero on entry and on exit
    out_ptr,  # [M, N] output dtype
    M,
    N,
    K,
    b1,
    b2,
    HAS_BIAS: tl.constexpr,
    T: tl.constexpr,  # threads a program (32 num_warps) = its columns (T / 4 quads of 4)
    SPLIT_K: tl.constexpr,
    ASM: tl.constexpr,  # the mma PTX (NVIDIA); else plain ops (the interpreter)
    NT: tl.constexpr = 1,  # 8-row activation tiles: 1 (M <= 8), 2 (M <= 16) or 4 (M <= 32)
    U: tl.constexpr = 1,  # block pairs an iteration, 1 or 2 (their loads issued together)
    ACT: tl.constexpr = 0,  # 0: a_ptr paired fp16; 1 / 2: plain bf16 / fp16 rows, paired here
):
    """out[:M, n-block] = sum over this split's block pairs of a_p @ W^T; section note above."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0, part, gid, tig, quad, col, n_mask = _quad_lanes(pid_n, T, N, b1, b2)
    npairs = tl.cdiv(K, 64)
    per = tl.cdiv(tl.cdiv(npairs, SPLIT_K), U) * U
    j0 = pid_k * per
    j1 = tl.minimum(j0 + per, npairs)
    row0, m_e, a_rows, _, _ = _mma_rows(a_ptr, part, gid, tig, M, K)
    left = (M - gid)[None, :, None]  # the thread's B rows gid + 8 t exist while left > 8 t
    # the thread's outputs: rows 8 t + 2 tig (even) and 8 t + 2 tig + 1 (odd) of tile t
    s0, s1, s2, s3, s4, s5, s6, s7 = _zeros8(T)
    if ASM:
        quad_w = (n0 // 4 + quad)[None, :, None]
        colq = n0 + quad[None, :, None] * 4
        z0, z1, z2, z3 = _split4(s0, T)
        acc = (z0, z1, z2, z3, z0, z1, z2, z3, z0, z1, z2, z3, z0, z1, z2, z3,
               z0, z1, z2, z3, z0, z1, z2, z3, z0, z1, z2, z3, z0, z1, z2, z3)  # fmt: skip
        for j in range(j0, j1, U):  # the U pairs' loads first: one memory round trip
            ld0 = _mx_loads(qw_ptr, sc_ptr, a_rows, left, colq, quad_w, j, j1, tig, N, K, T, NT)
            if U == 2:
                ld1 = _mx_loads(qw_ptr, sc_ptr, a_rows, left, colq, quad_w, j + 1, j1, tig, N, K,
                                T, NT)  # fmt: skip
                acc = _mx_mma(ld0, acc, NT, ACT)
                acc = _mx_mma(ld1, acc, NT, ACT)
            else:
                acc = _mx_mma(ld0, acc, NT, ACT)
        (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
         c16, c17, c18, c19, c20, c21, c22, c23,
         c24, c25, c26, c27, c28, c29, c30, c31) = acc  # fmt: skip
        s0 = _join4(c0, c1, c2, c3, T)
        s1 = _join4(c4, c5, c6, c7, T)
        s2 = _join4(c8, c9, c10, c11, T)
        s3 = _join4(c12, c13, c14, c15, T)
        s4 = _join4(c16, c17, c18, c19, T)
        s5 = _join4(c20, c21, c22, c23, T)
        s6 = _join4(c24, c25, c26, c27, T)
        s7 = _join4(c28, c29, c30, c31, T)
    else:
        for j in range(j0, j1):
            for r in tl.static_range(NT):
                me = m_e + 8 * r
                de, do = _mx_pair_ops(qw_ptr, sc_ptr, a_ptr + (row0 + me) * (K // 2),
                                      a_ptr + (row0 + me + 1) * (K // 2), me < M, me + 1 < M,
                                      col, n_mask, j, N, K, ACT)  # fmt: skip
                s0, s1, s2, s3, s4, s5, s6, s7 = _tile_add(
                    r, s0, s1, s2, s3, s4, s5, s6, s7, de, do)  # fmt: skip
    # the unpack's 2^-14
    _mma_store(s0 * 16384.0, s1 * 16384.0, s2 * 16384.0, s3 * 16384.0, s4 * 16384.0,
               s5 * 16384.0, s6 * 16384.0, s7 * 16384.0, m_e, col, n_mask, bias_ptr, out_ptr,
               ws_ptr, cnt_ptr, pid_n, M, N, HAS_BIAS, SPLIT_K, NT)  # fmt: skip


@triton.jit
def pair_fp16_kernel(x_ptr, out_ptr, K, stride_xm, BLOCK: tl.constexpr):
    """out[m] = fp16(x[m]) saturated, channels paired as the mma GEMVs read them: position
    8 r + 2 j + h holds channel 8 r + j + 4 h."""
    m = tl.program_id(0)
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    src = (p // 8) * 8 + (p % 8) // 2 + 4 * (p % 2)
    ok = p < K
    v = tl.load(x_ptr + m.to(tl.int64) * stride_xm + src, mask=ok, other=0.0).to(tl.float32)
    v = tl.minimum(tl.maximum(v, -65504.0), 65504.0)
    tl.store(out_ptr + m.to(tl.int64) * K + p, v.to(tl.float16), mask=ok)
