"""Fifth-pass decode kernel (issue 14): the GEMV for M <= 16 on the matrix unit, weights as
the register operand ("swap AB": y^T = W^T x^T).

Why swap the operands: the second pass's 16-row matrix-unit path (`gemv2_w4a16_kernel(DOT=True)`)
put the activations in the dot's first operand and the freshly unpacked weight planes in the
second, which Hopper's wgmma reads from shared memory only: every weight made a register ->
shared -> matrix-unit round trip (pass 2, run 1: qkv M = 16 29.7 us, 2.3x the FMA GEMV's M = 1).
Here the weight planes [BLOCK_N, G/8] are the first operand (registers), the activation planes
[G/8, 16] the second: 16 rows of them are 4 KB a group, loaded from L2 once per program and
group. The matrix unit does the multiply-add in fp32 for any M up to 16 at the same cost, so
one kernel serves the whole decode band (single stream and the 8-token speculative verify).

Why the unpack is 1.1 ops per weight (`_unpack`: one LOP3 builds an fp16 pair of nibbles j and
j + 4 of a word with the magic exponent, one SUB.F16X2 leaves c - z exactly, for 2 weights; one
shift per 8): the FMA GEMV spends AND + FADD + FFMA per weight (ncu, pass 3: ALU 44% + FMA 33%
at 41% DRAM). Plane j holds channels 8r + j of the group, so it pairs with the activation plane
of the same channels: the dot's K order is free.

Why GPI (groups per iteration): the loop's word loads are issued GPI groups ahead of their use
(16 B a thread a word row), so GPI x 8 KB a program are in flight per 128 columns.

The split-K finish is the pass-2 ticket (`kernels._ticket_finish`): no memset, no cast launch.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .fast_kernels import gdc_wait, nibble_pair_asm, prefetch_l2
from .kernels import _gemv_epilogue

_UNPACK_ASM = tl.constexpr(nibble_pair_asm("0x54005400"))
# int5 (HI): the same pairs with the fifth bits OR-ed in before the zero pair's subtraction. $11
# is the word's 8 fifth bits (a byte of the K-packed plane), spread into x (`_spread`'s
# placement): bit 4 + s for plane s < 4, bit 16 + s for s >= 4. A low-nibble pair (ulp 1) takes
# 16 at bits 4 / 20, a high-nibble pair (ulp 1/16) at bits 8 / 24: planes (0, 4) as they lie,
# (1, 5) << 3, (2, 6) >> 2, (3, 7) << 1. (The byte is loaded, not shifted out of its word by a
# per-row shift tensor, and spread here, not by Triton ops: both kept the planes out of the
# dot's operand layout, a shared-memory trip each, 10 a group.)
_UNPACK5_ASM = tl.constexpr(
    """
{
.reg .b32 t, u, h, x;
shl.b32 t, $11, 4;
and.b32 x, t, 0xF0;
shl.b32 t, $11, 16;
lop3.b32 x, t, 0xF00000, x, 0xea;
lop3.b32 t, $8, 0x000F000F, 0x64006400, 0xea;
lop3.b32 t, x, 0x00100010, t, 0xea;
sub.f16x2 t, t, $9;
mov.b32 {$0, $4}, t;
shl.b32 h, x, 3;
lop3.b32 t, $8, 0x00F000F0, 0x54005400, 0xea;
lop3.b32 t, h, 0x01000100, t, 0xea;
sub.f16x2 t, t, $10;
mov.b32 {$1, $5}, t;
shr.u32 u, $8, 8;
shr.u32 h, x, 2;
lop3.b32 t, u, 0x000F000F, 0x64006400, 0xea;
lop3.b32 t, h, 0x00100010, t, 0xea;
sub.f16x2 t, t, $9;
mov.b32 {$2, $6}, t;
shl.b32 h, x, 1;
lop3.b32 t, u, 0x00F000F0, 0x54005400, 0xea;
lop3.b32 t, h, 0x01000100, t, 0xea;
sub.f16x2 t, t, $10;
mov.b32 {$3, $7}, t;
}
"""
)


@triton.jit
def _unpack(q, z1, z64):
    """The 8 nibble planes c_j - z of int32 words as fp16, 1.25 ops per weight (module doc).

    (w & 0x000F000F) | 0x64006400 is the fp16 pair (1024 + c_0, 1024 + c_4) (ulp 1);
    (w & 0x00F000F0) | 0x54005400 is (64 + c_1, 64 + c_5) (ulp 1/16: bits 4..7 count
    sixteenths). One sub.f16x2 of (1024 + z) or (64 + z) leaves c - z exactly. z1 / z64:
    int32 words holding those fp16 pairs, per column.
    """
    return tl.inline_asm_elementwise(
        _UNPACK_ASM,
        "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r",
        [q, z1, z64],
        dtype=(tl.float16,) * 8,
        is_pure=True,
        pack=1,
    )


@triton.jit
def _spread(b):
    """Fifth-bit bytes b (bit s: plane s of the word row) spread as `_UNPACK5_ASM` does: planes
    0..3 at bits 4..7, planes 4..7 at bits 20..23."""
    return ((b << 4) & 0xF0) | ((b << 16) & 0xF00000)


@triton.jit
def _group_t(q, zi, s, ak, am, ASM: tl.constexpr, acc, HI: tl.constexpr = False, hx=None):
    """acc [BLOCK_N, BLOCK_M] += (planes of q) @ (activation planes at ak) * s (one group);
    HI: int5, hx the fifth-bit bytes of q's word rows (int32), zi the 5-bit zeros."""
    if ASM:
        z1 = tl.broadcast_to(((zi | 0x6400) * 65537)[:, None], q.shape)
        z64 = tl.broadcast_to((((zi << 4) | 0x5400) * 65537)[:, None], q.shape)
        if HI:
            p0, p1, p2, p3, p4, p5, p6, p7 = tl.inline_asm_elementwise(
                _UNPACK5_ASM, "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r,r", [q, z1, z64, hx],
                dtype=(tl.float16,) * 8, is_pure=True, pack=1,
            )  # fmt: skip
        else:
            p0, p1, p2, p3, p4, p5, p6, p7 = _unpack(q, z1, z64)
    elif HI:
        p0, p1, p2, p3, p4, p5, p6, p7 = _planes5_ops_t(q, zi, _spread(hx))
    else:
        p0, p1, p2, p3, p4, p5, p6, p7 = _planes_ops_t(q, zi)
    t = tl.dot(p0, tl.load(ak + 0, mask=am, other=0.0))
    t = tl.dot(p1, tl.load(ak + 1, mask=am, other=0.0), t)
    t = tl.dot(p2, tl.load(ak + 2, mask=am, other=0.0), t)
    t = tl.dot(p3, tl.load(ak + 3, mask=am, other=0.0), t)
    t = tl.dot(p4, tl.load(ak + 4, mask=am, other=0.0), t)
    t = tl.dot(p5, tl.load(ak + 5, mask=am, other=0.0), t)
    t = tl.dot(p6, tl.load(ak + 6, mask=am, other=0.0), t)
    t = tl.dot(p7, tl.load(ak + 7, mask=am, other=0.0), t)
    return acc + t * s[:, None]


@triton.jit
def _plane_t(q, zi, j: tl.constexpr):
    """Plain-op twin of one `_unpack` plane (exact: |c - z| <= 15)."""
    return (((q >> (4 * j)) & 15) - zi[:, None]).to(tl.float16)


@triton.jit
def _planes_ops_t(q, zi):
    """`_unpack` without inline assembly (the interpreter)."""
    return (
        _plane_t(q, zi, 0), _plane_t(q, zi, 1), _plane_t(q, zi, 2), _plane_t(q, zi, 3),
        _plane_t(q, zi, 4), _plane_t(q, zi, 5), _plane_t(q, zi, 6), _plane_t(q, zi, 7),
    )  # fmt: skip


@triton.jit
def _plane5_t(q, zi, hx, j: tl.constexpr):
    """Plain-op int5 plane j: the nibble plus 16 x its fifth bit (bit 4 + j of the spread hx for
    j < 4, 16 + j above), minus the 5-bit zero (exact: |c - z| <= 31)."""
    sh: tl.constexpr = 4 + j if j < 4 else 16 + j
    c = ((q >> (4 * j)) & 15) + ((hx >> sh) & 1) * 16
    return (c - zi[:, None]).to(tl.float16)


@triton.jit
def _planes5_ops_t(q, zi, hx):
    """`_UNPACK5_ASM` without inline assembly (the interpreter, gfx1201)."""
    return (
        _plane5_t(q, zi, hx, 0), _plane5_t(q, zi, hx, 1), _plane5_t(q, zi, hx, 2),
        _plane5_t(q, zi, hx, 3), _plane5_t(q, zi, hx, 4), _plane5_t(q, zi, hx, 5),
        _plane5_t(q, zi, hx, 6), _plane5_t(q, zi, hx, 7),
    )  # fmt: skip


@triton.jit
def gemv3_w4a16_kernel(
    a_ptr,  # [P, M, K] fp16 prologue output (host.rotate_scale / rotate_slices(f16=True))
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
    G: tl.constexpr,  # 128 (the planes are G / 8 = 16 word rows: one dot K step)
    BLOCK_M: tl.constexpr,  # 16
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GPI: tl.constexpr,  # groups per loop iteration (their words loaded before the first dot)
    ASM: tl.constexpr,  # the PTX unpack (NVIDIA); else plain ops (the interpreter)
    PDL: tl.constexpr = False,  # launched dependent on the prologue: prefetch, then wait for it
    HI: tl.constexpr = False,  # int5: fifth bits in qh_ptr, zp_ptr holds the 5-bit zeros
    qh_ptr=None,  # HI: [K/32, N] int32 fifth-bit planes (bit b of word w = row 32 w + b)
):
    """out[:M, n-block] = sum over this split's groups of a_p @ dequant(Q); module doc."""
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
    offs_r = tl.arange(0, G // 8)
    q_base = qw_ptr + offs_r[None, :] * N + offs_n[:, None]  # [BLOCK_N, G/8] words
    if HI:  # word row r's fifth bits: byte r % 4 of fifth-bit word r // 4, as a byte load
        h_base = qh_ptr.to(tl.pointer_type(tl.uint8)) + (
            ((offs_r // 4)[None, :] * N + offs_n[:, None]) * 4 + (offs_r % 4)[None, :]
        )
    a_base = a_ptr + (row0 + offs_m)[None, :] * K + (offs_r * 8)[:, None]  # [G/8, BLOCK_M]
    am = m_mask[None, :]
    nm = n_mask[:, None]
    if PDL:
        prefetch_l2(qw_ptr, n0, N, g0, g1, G, BLOCK_N)
        gdc_wait()  # the prologue's xr is complete and visible past here
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for gg in range(g0, g1, GPI):
        q0 = tl.load(q_base + gg * (G // 8) * N, mask=nm, other=0)
        s0 = tl.load(sc_ptr + gg * N + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        z0 = tl.load(zp_ptr + gg * N + offs_n, mask=n_mask, other=0).to(tl.int32)
        h0 = q0
        if HI:
            h0 = tl.load(h_base + gg * (G // 32) * N * 4, mask=nm, other=0).to(tl.int32)
        if GPI > 1:
            ok = n_mask & (offs_n * 0 + gg + 1 < g1)
            q1 = tl.load(q_base + (gg + 1) * (G // 8) * N, mask=ok[:, None], other=0)
            s1 = tl.load(sc_ptr + (gg + 1) * N + offs_n, mask=ok, other=0.0).to(tl.float32)
            z1 = tl.load(zp_ptr + (gg + 1) * N + offs_n, mask=ok, other=0).to(tl.int32)
            h1 = q1
            if HI:
                h1 = tl.load(h_base + (gg + 1) * (G // 32) * N * 4, mask=ok[:, None],
                             other=0).to(tl.int32)  # fmt: skip
        acc = _group_t(q0, z0, s0, a_base + gg * G, am, ASM, acc, HI, h0)
        if GPI > 1:
            # a group past g1 has s = 0 (and in-range activations: its dots add zeros)
            acc = _group_t(q1, z1, s1, a_base + tl.minimum(gg + 1, ngroups - 1) * G, am, ASM,
                           acc, HI, h1)  # fmt: skip

    y = tl.trans(acc)  # [BLOCK_M, BLOCK_N]
    _gemv_epilogue(y, ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, offs_m, m_mask, offs_n,
                   n_mask, N, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip


# --------------------------------------------------------------------------- the HFMA2 GEMV
#
# Ninth pass (issue 14): the M <= 2 decode GEMV with the multiply-adds in packed fp16
# (`fma.rn.f16x2`), two weights an instruction. The FMA GEMV (`gemv2_w4a16_kernel`) spends
# AND + FADD + FFMA per weight plus a magic-exponent build per word, ~3.4 instructions a weight,
# and ncu called it issue-bound (ALU 44% + FMA 34% at 42% DRAM, BENCH.md pass 5). Here a word of
# 8 nibbles costs 4 LOP3 + 1 SHR (fp16 pairs with the magic exponent), 4 SUB.F16X2 (c - z,
# exact), 4 FMA.F16X2 into one fp16 pair per row, 2 CVT + 1 FADD to fp32 and 1 FADD into the
# row's sum: 17 instructions for 8 weights at M = 1 (2.1 a weight), 26 at M = 2.
#
# Range (why the activations come scaled by 2^-H2_SHIFT): the prologue writes xr / 64 in fp16
# (`rotate_slice_kernel(PAIRED=True)`), so |a| <= 65504 / 64 < 1024; |c - z| <= 15, so a product
# is < 15360 and the fp16 pair sums four of them (< 61440 < 65504): no input overflows. Each
# product and partial sum is rounded to fp16 (2^-11 relative), far under the bf16 output's 2^-8;
# values under 2^-8 land subnormal (absolute error <= 2^-19 of a).
#
# Activation pairs: the word's lop3 pairs are nibbles (j, j + 4), so the prologue writes channel
# 8r + j at 8r + 2j and 8r + j + 4 at 8r + 2j + 1: one int32 load is the fp16 pair (a_j, a_j+4).
#
# int5 (HI, I8 PG ZPE weights): the fifth bits OR-ed into each pair before the zero's subtraction
# as `_UNPACK5_ASM` does (11 more instructions a word: 28 for 8 weights at M = 1); |c - z| <= 31,
# so its prologue writes xr / 128 (H2_SHIFT5) and the same bound holds (< 63488).

H2_SHIFT = 6
H2_SHIFT5 = 7
H2_SCALE = tl.constexpr(float(1 << H2_SHIFT))
H2_SCALE5 = tl.constexpr(float(1 << H2_SHIFT5))


def h2_word_asm(rows: int, hi: bool = False) -> str:
    """PTX of one int32 word of codes against `rows` activation rows: outputs $0..$rows-1 the
    fp32 sums of the 8 products (c - z) a; inputs the word, the column's zero pairs (1024 + z,
    64 + z), with `hi` the word row's fifth-bit byte (bit s: plane s), then per row the 4
    activation pairs (a_j, a_j+4)."""
    q, z1, z64, hb = (f"${rows + i}" for i in range(4))
    first = rows + (4 if hi else 3)
    lines = [
        "{",
        ".reg .b32 t0, t1, t2, t3, u, s, x, h;",
        ".reg .f16 l, hh;",
        ".reg .f32 fl, fh;",
        f"lop3.b32 t0, {q}, 0x000F000F, 0x64006400, 0xea;",
        f"lop3.b32 t1, {q}, 0x00F000F0, 0x54005400, 0xea;",
        f"shr.u32 u, {q}, 8;",
        "lop3.b32 t2, u, 0x000F000F, 0x64006400, 0xea;",
        "lop3.b32 t3, u, 0x00F000F0, 0x54005400, 0xea;",
    ]
    if hi:  # planes 0..3 to bits 4..7, 4..7 to 20..23 (x); each pair's fifth bits into place
        lines += [
            f"shl.b32 h, {hb}, 4;",
            "and.b32 x, h, 0xF0;",
            f"shl.b32 h, {hb}, 16;",
            "lop3.b32 x, h, 0xF00000, x, 0xea;",
            "lop3.b32 t0, x, 0x00100010, t0, 0xea;",
            "shl.b32 h, x, 3;",
            "lop3.b32 t1, h, 0x01000100, t1, 0xea;",
            "shr.u32 h, x, 2;",
            "lop3.b32 t2, h, 0x00100010, t2, 0xea;",
            "shl.b32 h, x, 1;",
            "lop3.b32 t3, h, 0x01000100, t3, 0xea;",
        ]
    lines += [
        f"sub.f16x2 t0, t0, {z1};",
        f"sub.f16x2 t1, t1, {z64};",
        f"sub.f16x2 t2, t2, {z1};",
        f"sub.f16x2 t3, t3, {z64};",
    ]
    for i in range(rows):
        a = [f"${first + 4 * i + j}" for j in range(4)]
        lines += [
            f"mul.rn.f16x2 s, t0, {a[0]};",
            f"fma.rn.f16x2 s, t1, {a[1]}, s;",
            f"fma.rn.f16x2 s, t2, {a[2]}, s;",
            f"fma.rn.f16x2 s, t3, {a[3]}, s;",
            "mov.b32 {l, hh}, s;",
            "cvt.f32.f16 fl, l;",
            "cvt.f32.f16 fh, hh;",
            f"add.f32 ${i}, fl, fh;",
        ]
    return "\n".join([*lines, "}"])


_H2_ASM1 = tl.constexpr(h2_word_asm(1))
_H2_ASM2 = tl.constexpr(h2_word_asm(2))
_H2_ASM1_HI = tl.constexpr(h2_word_asm(1, hi=True))
_H2_ASM2_HI = tl.constexpr(h2_word_asm(2, hi=True))


@triton.jit
def _pair_f32(a, hi: tl.constexpr):
    """One fp16 half of int32 pair words as fp32 (the plain-op path)."""
    v = (a >> 16) if hi else a
    return (v & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _h2_ops(q, zi, a0, a1, a2, a3, hb, HI: tl.constexpr):
    """`h2_word_asm(1, HI)` without inline assembly (the interpreter): fp32 products, exact
    c - z; hb: the fifth-bit bytes (HI)."""
    t = tl.zeros(q.shape, tl.float32)
    for j in tl.static_range(4):
        aj = a0 if j == 0 else a1 if j == 1 else a2 if j == 2 else a3
        lo = (q >> (4 * j)) & 15
        hi = (q >> (4 * j + 16)) & 15
        if HI:
            lo += ((hb >> j) & 1) * 16
            hi += ((hb >> (j + 4)) & 1) * 16
        t += (lo - zi).to(tl.float32) * _pair_f32(aj, False)
        t += (hi - zi).to(tl.float32) * _pair_f32(aj, True)
    return t


@triton.jit
def _h2_pairs(a_row, wr, ok):
    """The 4 activation pair words of word rows wr (int32 [KW] -> [KW, 1] each; 0 where not ok)."""
    a0 = tl.load(a_row + wr * 4 + 0, mask=ok, other=0)[:, None]
    a1 = tl.load(a_row + wr * 4 + 1, mask=ok, other=0)[:, None]
    a2 = tl.load(a_row + wr * 4 + 2, mask=ok, other=0)[:, None]
    a3 = tl.load(a_row + wr * 4 + 3, mask=ok, other=0)[:, None]
    return a0, a1, a2, a3


# Tenth pass (issue 14): the rotation inside the HFMA2 GEMV, one launch (the launch's first
# programs rotated each group once into a scratch and published it through per-group flags; the
# GEMV programs waited on them), and in the eleventh pass its co-resident variant (a cooperative
# one-wave grid, every program rotating before its GEMV item). Measured on the H200 (BENCH.md
# tenth and eleventh passes) and never served: int4 M = 1 1.07-1.34x slower than the prologue
# op (ncu, gate_up M = 1: the rotators took first-wave slots and the GEMV programs waited in
# theirs, 2.12 waves against 1.72), M = 2 1.19-1.43x; the co-resident variant slower on every
# int4 cell and 1.2-1.7x on int5. Removed in the nineteenth pass (its source: commit f8fbdeb).


@triton.jit
def gemv_h2_kernel(
    a_ptr,  # [P, M, K/2] int32: the paired fp16 prologue output / 2^H2_SHIFT (module note)
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
    BLOCK_M: tl.constexpr,  # 1 or 2
    BLOCK_N: tl.constexpr,
    KW: tl.constexpr,  # int32 word rows per chunk; divides G / 8
    SPLIT_K: tl.constexpr,
    ASM: tl.constexpr,  # the packed-fp16 PTX (NVIDIA); else fp32 plain ops (the interpreter)
    PDL: tl.constexpr = False,  # launched dependent on the prologue: prefetch, then wait for it
    HI: tl.constexpr = False,  # int5: fifth bits in qh_ptr, zp_ptr the 5-bit zeros, xr / 128
    qh_ptr=None,  # HI: [K/32, N] int32 fifth-bit planes (bit b of word w = row 32 w + b)
):
    """out[:M, n-block] = sum over this split's groups of a_p @ dequant(Q); section note above."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0 = pid_n * BLOCK_N
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    nm2 = n_mask[None, :]
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    ngroups = K // G
    per = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per
    g1 = tl.minimum(g0 + per, ngroups)
    offs_r = tl.arange(0, KW)
    q_base = qw_ptr + offs_r[:, None] * N + offs_n[None, :]
    a_row0 = a_ptr + (part * M).to(tl.int64) * (K // 2)
    a_row1 = a_row0 + K // 2
    row1 = (offs_r * 0 + 1) < M
    if HI:  # word row r's fifth bits: byte r % 4 of fifth-bit word r // 4, as a byte load
        h_base = qh_ptr.to(tl.pointer_type(tl.uint8)) + offs_n[None, :] * 4
    if PDL:
        prefetch_l2(qw_ptr, n0, N, g0, g1, G, BLOCK_N)
        gdc_wait()  # the prologue's xr is complete and visible past here
    acc0 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        zi = tl.load(zp_ptr + g * N + offs_n[None, :], mask=nm2, other=0).to(tl.int32)
        z1 = tl.broadcast_to((zi | 0x6400) * 65537, (KW, BLOCK_N))
        z64 = tl.broadcast_to(((zi << 4) | 0x5400) * 65537, (KW, BLOCK_N))
        d0 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
        d1 = tl.zeros((1, BLOCK_N), dtype=tl.float32)
        for ci in tl.static_range(G // (8 * KW)):
            wr = g * (G // 8) + ci * KW + offs_r
            q = tl.load(q_base + (g * (G // 8) + ci * KW) * N, mask=nm2, other=0)
            hb = q
            if HI:
                hp = h_base + ((wr // 4) * N * 4 + wr % 4)[:, None]
                hb = tl.load(hp, mask=nm2, other=0).to(tl.int32)
            a0, a1, a2, a3 = _h2_pairs(a_row0, wr, offs_r >= 0)
            if BLOCK_M == 1:
                if ASM and HI:
                    e0 = tl.inline_asm_elementwise(
                        _H2_ASM1_HI, "=f,r,r,r,r,r,r,r,r", [q, z1, z64, hb, a0, a1, a2, a3],
                        dtype=tl.float32, is_pure=True, pack=1,
                    )  # fmt: skip
                elif ASM:
                    e0 = tl.inline_asm_elementwise(
                        _H2_ASM1, "=f,r,r,r,r,r,r,r", [q, z1, z64, a0, a1, a2, a3],
                        dtype=tl.float32, is_pure=True, pack=1,
                    )  # fmt: skip
                else:
                    e0 = _h2_ops(q, zi, a0, a1, a2, a3, hb, HI)
                d0 += tl.sum(e0, axis=0, keep_dims=True)
            else:
                c0, c1, c2, c3 = _h2_pairs(a_row1, wr, row1)
                if ASM and HI:
                    e0, e1 = tl.inline_asm_elementwise(
                        _H2_ASM2_HI, "=f,=f,r,r,r,r,r,r,r,r,r,r,r,r",
                        [q, z1, z64, hb, a0, a1, a2, a3, c0, c1, c2, c3],
                        dtype=(tl.float32, tl.float32), is_pure=True, pack=1,
                    )  # fmt: skip
                elif ASM:
                    e0, e1 = tl.inline_asm_elementwise(
                        _H2_ASM2, "=f,=f,r,r,r,r,r,r,r,r,r,r,r",
                        [q, z1, z64, a0, a1, a2, a3, c0, c1, c2, c3],
                        dtype=(tl.float32, tl.float32), is_pure=True, pack=1,
                    )  # fmt: skip
                else:
                    e0 = _h2_ops(q, zi, a0, a1, a2, a3, hb, HI)
                    e1 = _h2_ops(q, zi, c0, c1, c2, c3, hb, HI)
                d0 += tl.sum(e0, axis=0, keep_dims=True)
                d1 += tl.sum(e1, axis=0, keep_dims=True)
        s = tl.load(sc_ptr + g * N + offs_n[None, :], mask=nm2, other=0.0).to(tl.float32)
        s = s * (H2_SCALE5 if HI else H2_SCALE)
        acc0 += d0 * s
        if BLOCK_M > 1:
            acc1 += d1 * s
    acc = tl.where(offs_m[:, None] == 0, acc0, acc1)
    _gemv_epilogue(acc, ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, offs_m, m_mask, offs_n,
                   n_mask, N, HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip


# --------------------------------------------------------------------------- the mma.sync GEMV
#
# Twelfth pass (issue 14): the decode GEMV (M <= 16) with the multiply-adds on the matrix unit
# through `mma.sync.m16n8k16` (fp16 in, fp32 accumulate), the unpacked weights as the A operand
# straight from the thread's registers. The HFMA2 GEMV's ncu (tenth pass, gate_up M = 1): 158
# registers, 3 programs an SM, ALU 30% + FMA 29% of peak, 5.4 cycles between a warp's issues,
# 53% DRAM: its 17 instructions per word (8 weights; 26 at M = 2) are ~75% of the weight
# stream's time at the HBM rate, and the loads and the math did not overlap enough to hide
# them. Here a word costs its unpack (4 LOP3 + 1 SHR + 4 SUB.F16X2: 8 exact fp16 c - z) and one
# quarter-warp share of an mma: ~10 issue slots, at any M <= 8 (the mma's 8 B columns); at
# M = 9..16 a second activation tile (NT = 2: B column gid is activation row gid + 8, outputs
# rows 8 + 2 tig, 9 + 2 tig) adds one mma a word on the same unpack.
#
# Lane mapping (PTX ISA, m16n8k16 .f16 fragments; lane = 4 gid + tig): A row gid holds k slots
# (2 tig, 2 tig + 1) in register 0 and (2 tig + 8, + 9) in register 2, row gid + 8 the same in
# registers 1 and 3; B column gid holds k slots (2 tig, + 1) and (2 tig + 8, + 9); D row gid
# columns (2 tig, 2 tig + 1) in d0, d1, row gid + 8 in d2, d3. A thread loads, per word row
# it owns (row 4 i + tig of the group, i < G / 32), the int32 words of 4 adjacent output
# columns (one 16-byte load) and the 4 paired activation words of that word row (the paired
# prologue's layout: word j = channels (8r + j, 8r + j + 4), the pairs the LOP3 unpack yields).
# Columns (0, 1) of the 4 are A rows (gid, gid + 8) of one mma pair, columns (2, 3) of another;
# nibbles (0, 4), (1, 5) of a word feed the first mma of a pair, (2, 6), (3, 7) the second, at
# the k slots of the same activation pairs: a quad (the 4 lanes of a gid) spans 4 word rows,
# 32 channels an mma pair. The thread supplies B column gid, so activation row gid (zero past
# M), and receives D columns 2 tig and 2 tig + 1: output rows 2 tig, 2 tig + 1 of its 4
# columns. The mma sums over the quad's k slots and the accumulator over the group's G / 32
# word rows; the group's fp32 sums then take the column's scale. No fp16 accumulation, so the
# activations come unscaled (pair shift 0).
#
# A thread owns 4 columns (a column quad, shared by the 4 lanes of its gid: a program T columns,
# T = 32 num_warps threads): per group 4 words and 4 activation words per word row, loaded
# together before the group's mmas (one memory round trip a group; the first cut's PTX had each
# row's load right before its mma), 8 sums and 8 totals: 56 registers (sm_90 build; the HFMA2
# GEMV's 158), 9 programs of 4 warps an SM; 96 with two tiles. (Two quads a thread gave wrong
# sums on the H200, Triton 3.6: the asm instances' lane mapping needs one quad a thread, which
# the kernel now is; the next group's loads issued under this group's math (123 registers, 4
# programs an SM) measured 1.05-1.2x slower at M = 1-2. BENCH.md twelfth pass.)
# The interpreter (no mma) computes the same per-(column, row) group sums with plain ops.
#
# Thirteenth pass: int5 (HI, I8 PG ZPE weights) on the same mapping. Word row 4 i + tig's 8
# fifth bits are byte tig of fifth-bit row G / 32 g + i ([K/32, N] words): the thread loads that
# row's 4 columns' words (one more 16-byte load a word row, the same 16 bytes for the 4 lanes of
# a gid, in the group's one round trip), PRMT takes its byte (selector 0x4440 + tig), a multiply
# by 0x1001 copies it to bits 12..19, and 4 shift + LOP3 pairs put each pair's fifth bits at bit
# 4 / 20 (the 1024-magic halves) or 8 / 24 (the 64-magic ones) before the zero's subtraction:
# 10 more instructions a word, exact c - z in [-31, 31]. 71 registers at M = 2..8 (64 at M = 1),
# 97 with two tiles. (The shifts written as multiplies compile to the same SASS: ptxas already
# issues the left shifts as IMAD.SHL.)


def mma_word_asm(tiles: int = 1, hi: bool = False) -> str:
    """PTX of one word row against 4 adjacent columns (one column quad) and `tiles` 8-row
    activation tiles: outputs per tile t at 8 t + (0..3) the fp32 sums of output row 8 t + 2 tig
    for columns 0..3, at 8 t + (4..7) row 8 t + 2 tig + 1; inputs the 4 words, the 4 columns'
    zero pairs (1024 + z, 1024 + z) and (64 + z, 64 + z), with `hi` (int5) the 4 columns'
    fifth-bit words and the `prmt` selector of the thread's byte in them (0x4440 + tig), per
    tile the 4 paired activation words of the word row (B column gid: row 8 t + gid), then per
    tile the running sums as its outputs are laid out."""
    base = 8 * tiles
    act = base + 12 + (5 if hi else 0)
    acc = act + 4 * tiles
    lines = ["{", ".reg .b32 u, v, w, x<4>, y<4>;", ".reg .f32 d<4>;"]
    for half in range(2):  # columns (0, 1), then (2, 3)
        for col, r in ((2 * half, "x"), (2 * half + 1, "y")):
            q, z1, z64 = f"${base + col}", f"${base + 4 + col}", f"${base + 8 + col}"
            lines += [
                f"lop3.b32 {r}0, {q}, 0x000F000F, 0x64006400, 0xea;",
                f"lop3.b32 {r}1, {q}, 0x00F000F0, 0x54005400, 0xea;",
                f"shr.u32 u, {q}, 8;",
                f"lop3.b32 {r}2, u, 0x000F000F, 0x64006400, 0xea;",
                f"lop3.b32 {r}3, u, 0x00F000F0, 0x54005400, 0xea;",
            ]
            if hi:  # the word row's 8 fifth bits (planes 0..3 at bits 0..3 and 12..15 of w,
                # 4..7 at 4..7 and 16..19), each pair's into its halves' bit 4 / 8 (_UNPACK5_ASM)
                lines += [
                    f"prmt.b32 v, ${base + 12 + col}, 0, ${base + 16};",
                    "mul.lo.u32 w, v, 0x1001;",
                    "shl.b32 v, w, 4;",
                    f"lop3.b32 {r}0, v, 0x00100010, {r}0, 0xea;",
                    "shl.b32 v, w, 7;",
                    f"lop3.b32 {r}1, v, 0x01000100, {r}1, 0xea;",
                    "shl.b32 v, w, 2;",
                    f"lop3.b32 {r}2, v, 0x00100010, {r}2, 0xea;",
                    "shl.b32 v, w, 5;",
                    f"lop3.b32 {r}3, v, 0x01000100, {r}3, 0xea;",
                ]
            lines += [
                f"sub.f16x2 {r}0, {r}0, {z1};",
                f"sub.f16x2 {r}1, {r}1, {z64};",
                f"sub.f16x2 {r}2, {r}2, {z1};",
                f"sub.f16x2 {r}3, {r}3, {z64};",
            ]
        c0, c1 = 2 * half, 2 * half + 1
        mma = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
        for t in range(tiles):
            a, o, ci = act + 4 * t, 8 * t, acc + 8 * t
            ce = f"${ci + c0}, ${ci + 4 + c0}, ${ci + c1}, ${ci + 4 + c1}"
            de = f"${o + c0}, ${o + 4 + c0}, ${o + c1}, ${o + 4 + c1}"
            lines += [
                f"{mma} {{d0, d1, d2, d3}}, {{x0, y0, x1, y1}}, {{${a}, ${a + 1}}}, {{{ce}}};",
                f"{mma} {{{de}}}, {{x2, y2, x3, y3}}, {{${a + 2}, ${a + 3}}}, {{d0, d1, d2, d3}};",
            ]
    return "\n".join([*lines, "}"])


def _mma_constraints(tiles: int, hi: bool) -> str:
    """`mma_word_asm(tiles, hi)`'s operand constraints."""
    ins = 12 + (5 if hi else 0) + 4 * tiles
    return ",".join(["=f"] * (8 * tiles) + ["r"] * ins + ["f"] * (8 * tiles))


_MMA_ASM = tl.constexpr(mma_word_asm())
_MMA_CONSTRAINTS = tl.constexpr(_mma_constraints(1, False))
_MMA_ASM2 = tl.constexpr(mma_word_asm(2))
_MMA_CONSTRAINTS2 = tl.constexpr(_mma_constraints(2, False))
_MMA_ASM5 = tl.constexpr(mma_word_asm(1, hi=True))
_MMA_CONSTRAINTS5 = tl.constexpr(_mma_constraints(1, True))
_MMA_ASM25 = tl.constexpr(mma_word_asm(2, hi=True))
_MMA_CONSTRAINTS25 = tl.constexpr(_mma_constraints(2, True))
_MMA_ASM4 = tl.constexpr(mma_word_asm(4))
_MMA_CONSTRAINTS4 = tl.constexpr(_mma_constraints(4, False))
_MMA_ASM45 = tl.constexpr(mma_word_asm(4, hi=True))
_MMA_CONSTRAINTS45 = tl.constexpr(_mma_constraints(4, True))


@triton.jit
def _split4(x, T: tl.constexpr):
    """[1, T, 4] -> its 4 [1, T] slices along the last (in-thread) axis."""
    a, b = tl.split(tl.reshape(x, (1, T, 2, 2)))
    e0, e2 = tl.split(a)
    e1, e3 = tl.split(b)
    return e0, e1, e2, e3


@triton.jit
def _join4(e0, e1, e2, e3, T: tl.constexpr):
    """`_split4`'s inverse."""
    return tl.reshape(tl.join(tl.join(e0, e2), tl.join(e1, e3)), (1, T, 4))


@triton.jit
def _mma_word(qw_ptr, a_rows, a_ok, col, n_mask, g, N, G: tl.constexpr, tig, i: tl.constexpr,
              a_hi, ah_ok, NT: tl.constexpr):  # fmt: skip
    """The thread's words (its column quad) and activation pairs of its word row i of group g
    (NT = 2: also of activation row gid + 8, `a_hi` further; else `a` again, unused)."""
    w = (g * (G // 8) + 4 * i + tig)[None, :, None]
    q = tl.load(qw_ptr + w * N + col, mask=n_mask, other=0)
    ap = a_rows + w * 4 + tl.arange(0, 4)[None, None, :]
    a = tl.load(ap, mask=a_ok, other=0)
    ah = a
    if NT >= 2:
        ah = tl.load(ap + a_hi, mask=ah_ok, other=0)
    return q, a, ah


@triton.jit
def _mma_loads(qw_ptr, sc_ptr, zp_ptr, a_rows, a_ok, col, n_mask, g, N, G: tl.constexpr, tig,
               a_hi, ah_ok, NT: tl.constexpr, qh_ptr, HI: tl.constexpr):  # fmt: skip
    """Everything group g's sums read, issued together (one memory round trip, not one a word
    row as the first cut's PTX had it): the thread's words and activation pairs of its G / 32
    word rows (G = 64: rows 2, 3 repeat 0, 1, unused), with HI their fifth-bit words (word row
    4 i + tig's 8 bits are byte tig of fifth-bit row G / 32 g + i, the same 16 bytes for the 4
    lanes of a gid), the zero codes and the scales."""
    q0, a0, h0 = _mma_word(qw_ptr, a_rows, a_ok, col, n_mask, g, N, G, tig, 0, a_hi, ah_ok, NT)
    q1, a1, h1 = _mma_word(qw_ptr, a_rows, a_ok, col, n_mask, g, N, G, tig, 1, a_hi, ah_ok, NT)
    q2, a2, h2, q3, a3, h3 = q0, a0, h0, q1, a1, h1
    if G // 32 == 4:
        q2, a2, h2 = _mma_word(qw_ptr, a_rows, a_ok, col, n_mask, g, N, G, tig, 2, a_hi, ah_ok,
                               NT)  # fmt: skip
        q3, a3, h3 = _mma_word(qw_ptr, a_rows, a_ok, col, n_mask, g, N, G, tig, 3, a_hi, ah_ok,
                               NT)  # fmt: skip
    b0, b1, b2, b3 = q0, q1, q2, q3
    if HI:
        b0 = tl.load(qh_ptr + (g * (G // 32)) * N + col, mask=n_mask, other=0)
        b1 = tl.load(qh_ptr + (g * (G // 32) + 1) * N + col, mask=n_mask, other=0)
        b2, b3 = b0, b1
        if G // 32 == 4:
            b2 = tl.load(qh_ptr + (g * (G // 32) + 2) * N + col, mask=n_mask, other=0)
            b3 = tl.load(qh_ptr + (g * (G // 32) + 3) * N + col, mask=n_mask, other=0)
    zi = tl.load(zp_ptr + g * N + col, mask=n_mask, other=0).to(tl.int32)
    s = tl.load(sc_ptr + g * N + col, mask=n_mask, other=0.0).to(tl.float32)
    return q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, b0, b1, b2, b3, zi, s


@triton.jit
def _mma_step(q, a, za0, za1, za2, za3, zb0, zb1, zb2, zb3, e0, e1, e2, e3, o0, o1, o2, o3,
              T: tl.constexpr, hq, sel, HI: tl.constexpr):  # fmt: skip
    """One word row through `mma_word_asm`: the running sums e (row 2 tig), o (2 tig + 1); HI:
    hq the fifth-bit words, sel the byte selector."""
    q0, q1, q2, q3 = _split4(q, T)
    a0, a1, a2, a3 = _split4(tl.broadcast_to(a, (1, T, 4)), T)
    if HI:
        h0, h1, h2, h3 = _split4(hq, T)
        return tl.inline_asm_elementwise(
            _MMA_ASM5, _MMA_CONSTRAINTS5,
            [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, h0, h1, h2, h3, sel,
             a0, a1, a2, a3, e0, e1, e2, e3, o0, o1, o2, o3],
            dtype=(tl.float32,) * 8, is_pure=True, pack=1,
        )  # fmt: skip
    return tl.inline_asm_elementwise(
        _MMA_ASM, _MMA_CONSTRAINTS,
        [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, a0, a1, a2, a3,
         e0, e1, e2, e3, o0, o1, o2, o3],
        dtype=(tl.float32,) * 8, is_pure=True, pack=1,
    )  # fmt: skip


@triton.jit
def _mma_step2(q, a, ah, za0, za1, za2, za3, zb0, zb1, zb2, zb3, e0, e1, e2, e3, o0, o1, o2,
               o3, f0, f1, f2, f3, p0, p1, p2, p3, T: tl.constexpr, hq, sel,
               HI: tl.constexpr):  # fmt: skip
    """`_mma_step` against two activation tiles (`mma_word_asm(2)`): rows 2 tig, 2 tig + 1 (e,
    o) and 8 + 2 tig, 9 + 2 tig (f, p), one unpack for both."""
    q0, q1, q2, q3 = _split4(q, T)
    a0, a1, a2, a3 = _split4(tl.broadcast_to(a, (1, T, 4)), T)
    b0, b1, b2, b3 = _split4(tl.broadcast_to(ah, (1, T, 4)), T)
    if HI:
        h0, h1, h2, h3 = _split4(hq, T)
        return tl.inline_asm_elementwise(
            _MMA_ASM25, _MMA_CONSTRAINTS25,
            [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, h0, h1, h2, h3, sel,
             a0, a1, a2, a3, b0, b1, b2, b3, e0, e1, e2, e3, o0, o1, o2, o3,
             f0, f1, f2, f3, p0, p1, p2, p3],
            dtype=(tl.float32,) * 16, is_pure=True, pack=1,
        )  # fmt: skip
    return tl.inline_asm_elementwise(
        _MMA_ASM2, _MMA_CONSTRAINTS2,
        [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, a0, a1, a2, a3,
         b0, b1, b2, b3, e0, e1, e2, e3, o0, o1, o2, o3, f0, f1, f2, f3, p0, p1, p2, p3],
        dtype=(tl.float32,) * 16, is_pure=True, pack=1,
    )  # fmt: skip


@triton.jit
def _mma_act(a_rows, ok, g, G: tl.constexpr, tig, i: tl.constexpr):
    """The thread's 4 activation pair words of word row i of group g (`_mma_word`'s)."""
    w = (g * (G // 8) + 4 * i + tig)[None, :, None]
    return tl.load(a_rows + w * 4 + tl.arange(0, 4)[None, None, :], mask=ok, other=0)


@triton.jit
def _mma_step4(q, a, ah, a2, a3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, acc, T: tl.constexpr,
               hq, sel, HI: tl.constexpr):  # fmt: skip
    """`_mma_step` against four activation tiles (`mma_word_asm(4)`, twenty-fourth pass): acc
    the 32 running sums in the asm's output order (tile t: rows 8 t + 2 tig, 8 t + 2 tig + 1),
    one unpack for all four."""
    q0, q1, q2, q3 = _split4(q, T)
    b0, b1, b2, b3 = _split4(tl.broadcast_to(a, (1, T, 4)), T)
    b4, b5, b6, b7 = _split4(tl.broadcast_to(ah, (1, T, 4)), T)
    b8, b9, b10, b11 = _split4(tl.broadcast_to(a2, (1, T, 4)), T)
    b12, b13, b14, b15 = _split4(tl.broadcast_to(a3, (1, T, 4)), T)
    (c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
     c16, c17, c18, c19, c20, c21, c22, c23,
     c24, c25, c26, c27, c28, c29, c30, c31) = acc  # fmt: skip
    if HI:
        h0, h1, h2, h3 = _split4(hq, T)
        return tl.inline_asm_elementwise(
            _MMA_ASM45, _MMA_CONSTRAINTS45,
            [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3, h0, h1, h2, h3, sel,
             b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15,
             c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
             c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31],
            dtype=(tl.float32,) * 32, is_pure=True, pack=1,
        )  # fmt: skip
    return tl.inline_asm_elementwise(
        _MMA_ASM4, _MMA_CONSTRAINTS4,
        [q0, q1, q2, q3, za0, za1, za2, za3, zb0, zb1, zb2, zb3,
         b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15,
         c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15,
         c16, c17, c18, c19, c20, c21, c22, c23, c24, c25, c26, c27, c28, c29, c30, c31],
        dtype=(tl.float32,) * 32, is_pure=True, pack=1,
    )  # fmt: skip


@triton.jit
def _mma_group4(q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, c0, c1, c2, c3, d0, d1, d2, d3,
                b0, b1, b2, b3, zi, sel, T: tl.constexpr, G: tl.constexpr,
                HI: tl.constexpr):  # fmt: skip
    """`_mma_group` against four activation tiles: per word row i the pair words a (rows gid),
    h (gid + 8), c (gid + 16), d (gid + 24); the group's 8 fp32 sums [1, T, 4] (tile t: rows
    8 t + 2 tig, 8 t + 2 tig + 1)."""
    z1 = (zi | 0x6400) * 65537
    z64 = ((zi << 4) | 0x5400) * 65537
    za0, za1, za2, za3 = _split4(z1, T)
    zb0, zb1, zb2, zb3 = _split4(z64, T)
    e = tl.zeros((1, T), tl.float32)
    acc = (e, e, e, e, e, e, e, e, e, e, e, e, e, e, e, e,
           e, e, e, e, e, e, e, e, e, e, e, e, e, e, e, e)  # fmt: skip
    for i in tl.static_range(G // 32):
        q = q0 if i == 0 else q1 if i == 1 else q2 if i == 2 else q3
        a = a0 if i == 0 else a1 if i == 1 else a2 if i == 2 else a3
        ah = h0 if i == 0 else h1 if i == 1 else h2 if i == 2 else h3
        ac = c0 if i == 0 else c1 if i == 1 else c2 if i == 2 else c3
        ad = d0 if i == 0 else d1 if i == 1 else d2 if i == 2 else d3
        hq = b0 if i == 0 else b1 if i == 1 else b2 if i == 2 else b3
        acc = _mma_step4(q, a, ah, ac, ad, za0, za1, za2, za3, zb0, zb1, zb2, zb3, acc, T, hq,
                         sel, HI)  # fmt: skip
    (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
     s16, s17, s18, s19, s20, s21, s22, s23,
     s24, s25, s26, s27, s28, s29, s30, s31) = acc  # fmt: skip
    return (_join4(s0, s1, s2, s3, T), _join4(s4, s5, s6, s7, T), _join4(s8, s9, s10, s11, T),
            _join4(s12, s13, s14, s15, T), _join4(s16, s17, s18, s19, T),
            _join4(s20, s21, s22, s23, T), _join4(s24, s25, s26, s27, T),
            _join4(s28, s29, s30, s31, T))  # fmt: skip


@triton.jit
def _mma_group(q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, b0, b1, b2, b3, zi, sel,
               T: tl.constexpr, G: tl.constexpr, NT: tl.constexpr,
               HI: tl.constexpr):  # fmt: skip
    """The group's fp32 sums of the thread's quad of columns for output rows 2 tig, 2 tig + 1
    (and with NT = 2 rows 8 + 2 tig, 9 + 2 tig; else zeros) from `_mma_loads`' words (HI: and
    fifth-bit words b, byte selector sel), one step a word row (section note)."""
    z1 = (zi | 0x6400) * 65537
    z64 = ((zi << 4) | 0x5400) * 65537
    za0, za1, za2, za3 = _split4(z1, T)
    zb0, zb1, zb2, zb3 = _split4(z64, T)
    e = tl.zeros((1, T), tl.float32)
    e0, e1, e2, e3, o0, o1, o2, o3 = e, e, e, e, e, e, e, e
    f0, f1, f2, f3, p0, p1, p2, p3 = e, e, e, e, e, e, e, e
    for i in tl.static_range(G // 32):
        q = q0 if i == 0 else q1 if i == 1 else q2 if i == 2 else q3
        a = a0 if i == 0 else a1 if i == 1 else a2 if i == 2 else a3
        hq = b0 if i == 0 else b1 if i == 1 else b2 if i == 2 else b3
        if NT == 2:
            ah = h0 if i == 0 else h1 if i == 1 else h2 if i == 2 else h3
            (e0, e1, e2, e3, o0, o1, o2, o3, f0, f1, f2, f3, p0, p1, p2, p3) = _mma_step2(
                q, a, ah, za0, za1, za2, za3, zb0, zb1, zb2, zb3, e0, e1, e2, e3, o0, o1, o2,
                o3, f0, f1, f2, f3, p0, p1, p2, p3, T, hq, sel, HI)  # fmt: skip
        else:
            e0, e1, e2, e3, o0, o1, o2, o3 = _mma_step(q, a, za0, za1, za2, za3, zb0, zb1, zb2,
                                                       zb3, e0, e1, e2, e3, o0, o1, o2, o3,
                                                       T, hq, sel, HI)  # fmt: skip
    return (_join4(e0, e1, e2, e3, T), _join4(o0, o1, o2, o3, T), _join4(f0, f1, f2, f3, T),
            _join4(p0, p1, p2, p3, T))  # fmt: skip


@triton.jit
def _mma_group_ops(qw_ptr, a_e, a_o, ok_e, ok_o, zi, col, n_mask, g, N, G: tl.constexpr,
                   qh_ptr, HI: tl.constexpr):  # fmt: skip
    """`_mma_group` with plain ops (the interpreter), two output rows: every word row of the
    group against the activation rows a_e / a_o ([1, T, 1] row pointers); HI: the fifth bits
    (bit s of byte r % 4 of fifth-bit word r // 4: plane s of word row r)."""
    de = tl.zeros(col.shape, tl.float32)
    do = tl.zeros(col.shape, tl.float32)
    for r in tl.static_range(G // 8):
        w = g * (G // 8) + r
        q = tl.load(qw_ptr + w * N + col, mask=n_mask, other=0)
        hb = q * 0
        if HI:
            hb = tl.load(qh_ptr + (w // 4) * N + col, mask=n_mask, other=0) >> (8 * (r % 4))
        for j in tl.static_range(4):
            ae = tl.load(a_e + w * 4 + j, mask=ok_e, other=0)
            ao = tl.load(a_o + w * 4 + j, mask=ok_o, other=0)
            lo = (((q >> (4 * j)) & 15) + 16 * ((hb >> j) & 1) - zi).to(tl.float32)
            hi = (((q >> (4 * j + 16)) & 15) + 16 * ((hb >> (j + 4)) & 1) - zi).to(tl.float32)
            de += lo * _pair_f32(ae, False) + hi * _pair_f32(ae, True)
            do += lo * _pair_f32(ao, False) + hi * _pair_f32(ao, True)
    return de, do


@triton.jit
def _mma_out(y, m, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS: tl.constexpr,
             SPLIT_K: tl.constexpr):  # fmt: skip
    """One output row set of the thread: stored (+ bias), or added into the split-K workspace."""
    out_offs = m.to(tl.int64) * N + col
    mask = (m < M) & n_mask
    if SPLIT_K == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + col, mask=n_mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + out_offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ws_ptr + out_offs, y, mask=mask, sem="relaxed")


@triton.jit
def _quad_lanes(pid_n, T: tl.constexpr, N, b1, b2):
    """The mma GEMVs' lane mapping (section note): the program's first column n0, its plane, each
    thread's gid and tig, its column quad and the quad's 4 columns [1, T, 4] (16-byte aligned
    runs) with their mask."""
    n0 = pid_n * T
    part = (n0 >= b1).to(tl.int32) + (n0 >= b2).to(tl.int32)
    t = tl.arange(0, T)
    lane = t % 32
    gid = lane // 4
    tig = lane % 4
    quad = (t // 32) * 8 + gid
    col = n0 + quad[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]
    col = tl.max_contiguous(tl.multiple_of(col, (1, 1, 4)), (1, 1, 4))  # 16-byte loads
    return n0, part, gid, tig, quad, col, col < N


@triton.jit
def _mma_rows(a_ptr, part, gid, tig, M, K):
    """The mma GEMVs' activation rows: the plane's first row, each thread's first output row
    2 tig [1, T, 1], its B operand's row pointers (activation row gid of the plane, [P, M, K/2]
    int32 words) and whether that row and row gid + 8 exist."""
    row0 = (part * M).to(tl.int64)
    a_rows = a_ptr + (row0 + gid[None, :, None]) * (K // 2)
    return (
        row0,
        (2 * tig)[None, :, None],
        a_rows,
        (gid < M)[None, :, None],
        (gid + 8 < M)[None, :, None],
    )


@triton.jit
def _zeros8(T: tl.constexpr):
    """The mma GEMVs' eight zero row sums [1, T, 4] (`_mma_store`'s order)."""
    z = tl.zeros((1, T, 4), tl.float32)
    return z, z, z, z, z, z, z, z


@triton.jit
def _tile_add(r: tl.constexpr, s0, s1, s2, s3, s4, s5, s6, s7, de, do):
    """The plain-op paths (the interpreter): tile r's two row sums (rows 8 r + 2 tig and
    8 r + 2 tig + 1) added into the thread's eight."""
    if r == 0:
        s0 += de
        s1 += do
    elif r == 1:
        s2 += de
        s3 += do
    elif r == 2:
        s4 += de
        s5 += do
    else:
        s6 += de
        s7 += do
    return s0, s1, s2, s3, s4, s5, s6, s7


@triton.jit
def _mma_store(s0, s1, s2, s3, s4, s5, s6, s7, m_e, col, n_mask, bias_ptr, out_ptr, ws_ptr,
               cnt_ptr, pid_n, M, N, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
               NT: tl.constexpr):  # fmt: skip
    """The mma GEMVs' outputs: the thread's rows 8 t + 2 tig (s_2t) and 8 t + 2 tig + 1
    (s_2t+1) of its 4 columns for tiles t < NT (1, 2 or 4), stored, or added into the split-K
    workspace and the last split's ticket finishing the tile."""
    _mma_out(s0, m_e, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
    _mma_out(s1, m_e + 1, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
    if NT >= 2:
        _mma_out(s2, m_e + 8, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
        _mma_out(s3, m_e + 9, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
    if NT == 4:
        _mma_out(s4, m_e + 16, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
        _mma_out(s5, m_e + 17, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
        _mma_out(s6, m_e + 24, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
        _mma_out(s7, m_e + 25, col, n_mask, bias_ptr, out_ptr, ws_ptr, M, N, HAS_BIAS, SPLIT_K)
    if SPLIT_K > 1:
        _mma_finish(ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, m_e, col, n_mask, M, N, HAS_BIAS,
                    SPLIT_K, NT)  # fmt: skip


@triton.jit
def gemv_mma_kernel(
    a_ptr,  # [P, M, K/2] int32: the paired fp16 prologue output, pair shift 0
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
    G: tl.constexpr,  # a multiple of 32
    T: tl.constexpr,  # threads a program (32 num_warps) = its columns (T / 4 quads of 4)
    SPLIT_K: tl.constexpr,
    ASM: tl.constexpr,  # the mma PTX (NVIDIA); else plain ops (the interpreter)
    NT: tl.constexpr = 1,  # 8-row activation tiles: 1 (M <= 8), 2 (M <= 16) or 4 (M <= 32)
    HI: tl.constexpr = False,  # int5: fifth bits in qh_ptr, zp_ptr holds the 5-bit zeros
    qh_ptr=None,  # HI: [K/32, N] int32 fifth-bit planes (bit b of word w = row 32 w + b)
):
    """out[:M, n-block] = sum over this split's groups of a_p @ dequant(Q); section note above."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    _, part, gid, tig, _, col, n_mask = _quad_lanes(pid_n, T, N, b1, b2)
    ngroups = K // G
    per = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per
    g1 = tl.minimum(g0 + per, ngroups)
    row0, m_e, a_rows, a_ok, ah_ok = _mma_rows(a_ptr, part, gid, tig, M, K)
    a_hi = 8 * (K // 2)  # words between activation rows gid and gid + 8
    # the thread's outputs: rows 8 t + 2 tig (s_2t) and 8 t + 2 tig + 1 (s_2t+1) of tile t
    s0, s1, s2, s3, s4, s5, s6, s7 = _zeros8(T)
    if ASM:
        # prmt: byte tig of a fifth-bit word, zeros above (built in the words' layout and
        # split as they are: no layout conversion)
        sel = _split4((0x4440 + tig)[None, :, None] + tl.zeros((1, T, 4), tl.int32), T)[0]
        a2_ok = (gid + 16 < M)[None, :, None]
        a3_ok = (gid + 24 < M)[None, :, None]
        for g in range(g0, g1):
            q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, v0, v1, v2, v3, zi, sg = _mma_loads(
                qw_ptr, sc_ptr, zp_ptr, a_rows, a_ok, col, n_mask, g, N, G, tig, a_hi, ah_ok, NT,
                qh_ptr, HI,
            )  # fmt: skip
            if NT == 4:  # the third and fourth tiles' pair words, then one unpack for all four
                c0 = _mma_act(a_rows + 2 * a_hi, a2_ok, g, G, tig, 0)
                d0 = _mma_act(a_rows + 3 * a_hi, a3_ok, g, G, tig, 0)
                c1 = _mma_act(a_rows + 2 * a_hi, a2_ok, g, G, tig, 1)
                d1 = _mma_act(a_rows + 3 * a_hi, a3_ok, g, G, tig, 1)
                c2, d2, c3, d3 = c0, d0, c1, d1
                if G // 32 == 4:
                    c2 = _mma_act(a_rows + 2 * a_hi, a2_ok, g, G, tig, 2)
                    d2 = _mma_act(a_rows + 3 * a_hi, a3_ok, g, G, tig, 2)
                    c3 = _mma_act(a_rows + 2 * a_hi, a2_ok, g, G, tig, 3)
                    d3 = _mma_act(a_rows + 3 * a_hi, a3_ok, g, G, tig, 3)
                t0, t1, t2, t3, t4, t5, t6, t7 = _mma_group4(
                    q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, c0, c1, c2, c3, d0, d1, d2,
                    d3, v0, v1, v2, v3, zi, sel, T, G, HI,
                )  # fmt: skip
                s0 += t0 * sg
                s1 += t1 * sg
                s2 += t2 * sg
                s3 += t3 * sg
                s4 += t4 * sg
                s5 += t5 * sg
                s6 += t6 * sg
                s7 += t7 * sg
            else:
                de, do, df, dp = _mma_group(q0, q1, q2, q3, a0, a1, a2, a3, h0, h1, h2, h3, v0,
                                            v1, v2, v3, zi, sel, T, G, NT, HI)  # fmt: skip
                s0 += de * sg
                s1 += do * sg
                if NT == 2:
                    s2 += df * sg
                    s3 += dp * sg
    else:
        for g in range(g0, g1):
            zi = tl.load(zp_ptr + g * N + col, mask=n_mask, other=0).to(tl.int32)
            sg = tl.load(sc_ptr + g * N + col, mask=n_mask, other=0.0).to(tl.float32)
            for r in tl.static_range(NT):
                me = m_e + 8 * r
                de, do = _mma_group_ops(qw_ptr, a_ptr + (row0 + me) * (K // 2),
                                        a_ptr + (row0 + me + 1) * (K // 2), me < M, me + 1 < M,
                                        zi, col, n_mask, g, N, G, qh_ptr, HI)  # fmt: skip
                s0, s1, s2, s3, s4, s5, s6, s7 = _tile_add(
                    r, s0, s1, s2, s3, s4, s5, s6, s7, de * sg, do * sg)  # fmt: skip
    _mma_store(s0, s1, s2, s3, s4, s5, s6, s7, m_e, col, n_mask, bias_ptr, out_ptr, ws_ptr,
               cnt_ptr, pid_n, M, N, HAS_BIAS, SPLIT_K, NT)  # fmt: skip


@triton.jit
def _mma_finish(ws_ptr, out_ptr, cnt_ptr, bias_ptr, tile, m_e, col, n_mask, M, N,
                HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, NT: tl.constexpr):  # fmt: skip
    """The split-K ticket (`kernels._ticket_finish`) for the thread-shaped outputs: the last
    split of the column tile writes each thread's rows and zeroes its workspace."""
    tl.debug_barrier()  # every thread's partial is in before the ticket is taken
    ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
    if ticket == SPLIT_K - 1:
        for h in tl.static_range(2 * NT):
            m = m_e + h % 2 + 8 * (h // 2)
            out_offs = m.to(tl.int64) * N + col
            mask = (m < M) & n_mask
            tot = tl.load(ws_ptr + out_offs, mask=mask, other=0.0, volatile=True)
            if HAS_BIAS:
                tot += tl.load(bias_ptr + col, mask=n_mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + out_offs, tot.to(out_ptr.dtype.element_ty), mask=mask)
            tl.store(ws_ptr + out_offs, tl.zeros_like(tot), mask=mask)
        tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed")
