"""Triton kernels of the decode GEMVs on the FMA units: the FMA GEMV (`gemv2_w4a16_kernel`) and the
HFMA2 GEMV (`gemv_h2_kernel`).

Why a GEMV at M <= 2 (not a 16-row MMA tile): at M = 1 the H200's ncu run of the MMA kernel showed
the tensor pipe 15% active on 16-row tiles for a 1-row problem, the ALU doing the nibble unpack and
128 registers capping occupancy at 25%. Here the product is fp32 FMAs on the unpacked codes, so the
work per weight is what the unpack costs plus M FMAs, and the accumulator is small. It serves the
rows no faster path takes (`route.band`): gfx1201's M <= 2, NVIDIA's G = 64 layers at M = 1.
(Its 4-row form, its 16-row matrix-unit form and an earlier GEMV, which no dispatch picked on
either platform, were removed; their source: commit 11f6311.)

Why the unpack is one LOP3 + one FADD per weight: nibble j of a word sits at bits 4j..4j+3; for
j < 5, (w & (0xF << 4j)) | 0x4B000000 is the fp32 2^23 + c * 16^j exactly (the nibble lies inside
the 23-bit mantissa, bits 0..22), so subtracting 2^23 gives c * 16^j with no shift and no int ->
float convert; the 16^-j is folded into the activation (exact: a power of two). Nibbles 5..7 come
from one shift of the word by 12 (bits 8..19 then). One shift per 8 weights instead of 8.

Why the zero point is the row-sum correction: sum_k a_k (c_k - z) s = s * (sum_k a_k c_k) - s z rs
with rs = sum_k a_k over the group (the prologue writes it for the fp16 values read here, or the
kernel sums its own rotated values), so the loop touches only the codes.

Why the Givens layers can run inside the GEMV (ROT): a program needs the rotated activations of
its own 128-channel groups only, and at M <= 2 applying krot pair layers to them is ~1% of the
program's weight work; no prologue launch and no [P, M, K] round trip. The records are the
existing gv tables (partner index, cos, signed sin per channel and layer, channel scales).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .launch_kernels import _gemv_epilogue, gdc_wait, prefetch_l2
from .prologue_kernels import _rotated_group, _rotated_group_pre

MAGIC = tl.constexpr(0x4B000000)  # fp32 2^23


MAGIC_F = tl.constexpr(8388608.0)


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
def _row_sum2(rs_ptr, row0, row: tl.constexpr, M, ngroups, g, RS: tl.constexpr,
              ROT: tl.constexpr, rsv, offs_m):  # fmt: skip
    """`_row_sum`, or with ROT the in-kernel row sums rsv [BLOCK_M] (row `row` of them)."""
    if ROT:
        r = tl.sum(tl.where(offs_m == row, rsv, 0.0), axis=0)
    else:
        r = _row_sum(rs_ptr, row0, row, M, ngroups, g, RS)
    return r


@triton.jit
def gemv2_w4a16_kernel(
    a_ptr,  # [P, M, K] fp32 prologue output, NIBBLE_SCALED (prologue.rotate_scale, rotate_slices)
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
    gi_ptr=None,  # ROT: [P, KROT, K] int32 group-local partners (repack.givens_tables)
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
