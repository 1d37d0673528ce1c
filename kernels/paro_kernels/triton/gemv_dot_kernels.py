"""Triton kernel of the matrix-unit decode GEMV (M <= 16) with the weights as the register operand
("swap AB": y^T = W^T x^T), through `tl.dot`.

Why swap the operands: a 16-row matrix-unit GEMV with the activations in the dot's first operand
and the freshly unpacked weight planes in the second makes Hopper's wgmma read the weights from
shared memory: every weight made a register -> shared -> matrix-unit round trip (H200
2026-12-01: qkv M = 16 29.7 us, 2.3x the FMA GEMV's M = 1). Here the weight planes
[BLOCK_N, G/8] are the first operand (registers), the activation planes [G/8, 16] the second:
16 rows of them are 4 KB a group, loaded from L2 once per program and group. The matrix unit
does the multiply-add in fp32 for any M up to 16 at the same cost.

Why the unpack is 1.1 ops per weight (`_unpack`: one LOP3 builds an fp16 pair of nibbles j and
j + 4 of a word with the magic exponent, one SUB.F16X2 leaves c - z exactly, for 2 weights; one
shift per 8): the FMA GEMV spends AND + FADD + FFMA per weight (ncu: ALU 44% + FMA 33% at 41%
DRAM). Plane j holds channels 8r + j of the group, so it pairs with the activation plane of the
same channels: the dot's K order is free.

Why GPI (groups per iteration): the loop's word loads are issued GPI groups ahead of their use
(16 B a thread a word row), so GPI x 8 KB a program are in flight per 128 columns.

The split-K finish is the shared ticket (`launch_kernels._ticket_finish`): no memset, no cast.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .launch_kernels import _gemv_epilogue, gdc_wait, nibble_pair_asm, prefetch_l2

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
    a_ptr,  # [P, M, K] fp16 prologue output (prologue.rotate_scale / rotate_slices(f16=True))
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
