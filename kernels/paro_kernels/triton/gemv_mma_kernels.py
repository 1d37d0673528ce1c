"""Triton kernel of the mma.sync decode GEMV (`gemv_mma_kernel`): the unpacked int4 / int5 weights
as the A operand of `mma.sync.m16n8k16` straight from the thread's registers, fp32 accumulation;
its lane mapping and instruction counts are in the section note below.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemv_fma_kernels import _pair_f32


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
    """`_mma_step` against four activation tiles (`mma_word_asm(4)`, H100 2026-12-05): acc
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
def _mma_chunk(a_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K):
    """A CHUNKED program's 32-row chunk (program_id(2)): its activation, output, split-K
    workspace and ticket pointers moved to the chunk, and its rows (at most 32)."""
    m0 = tl.program_id(2) * 32
    a_ptr += m0 * (K // 2)
    out_ptr += m0 * N
    ws_ptr += m0 * N
    cnt_ptr += tl.program_id(2) * tl.num_programs(0)
    return a_ptr, out_ptr, ws_ptr, cnt_ptr, tl.minimum(M - m0, 32)


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
    CHUNKED: tl.constexpr = False,  # M > 32: grid axis 2 takes 32-row chunks (NT = 4 each)
):
    """out[:M, n-block] = sum over this split's groups of a_p @ dequant(Q); section note above.
    CHUNKED: this program's rows are chunk program_id(2) of 32 (rows 32 c .. 32 c + 31); the
    chunks of one column tile and split run in the same wave and read the same weight words,
    so the words come from DRAM about once and from L2 after."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    _, part, gid, tig, _, col, n_mask = _quad_lanes(pid_n, T, N, b1, b2)
    ngroups = K // G
    per = tl.cdiv(ngroups, SPLIT_K)
    g0 = pid_k * per
    g1 = tl.minimum(g0 + per, ngroups)
    rows = M  # the program's output rows (a plane of a_ptr keeps M rows)
    if CHUNKED:
        a_ptr, out_ptr, ws_ptr, cnt_ptr, rows = _mma_chunk(a_ptr, out_ptr, ws_ptr, cnt_ptr, M,
                                                           N, K)  # fmt: skip
    row0, m_e, a_rows, a_ok, ah_ok = _mma_rows(a_ptr, part, gid, tig, M, K)
    if CHUNKED:
        a_ok = (gid < rows)[None, :, None]
        ah_ok = (gid + 8 < rows)[None, :, None]
    a_hi = 8 * (K // 2)  # words between activation rows gid and gid + 8
    # the thread's outputs: rows 8 t + 2 tig (s_2t) and 8 t + 2 tig + 1 (s_2t+1) of tile t
    s0, s1, s2, s3, s4, s5, s6, s7 = _zeros8(T)
    if ASM:
        # prmt: byte tig of a fifth-bit word, zeros above (built in the words' layout and
        # split as they are: no layout conversion)
        sel = _split4((0x4440 + tig)[None, :, None] + tl.zeros((1, T, 4), tl.int32), T)[0]
        a2_ok = (gid + 16 < rows)[None, :, None]
        a3_ok = (gid + 24 < rows)[None, :, None]
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
                                        a_ptr + (row0 + me + 1) * (K // 2), me < rows,
                                        me + 1 < rows, zi, col, n_mask, g, N, G, qh_ptr,
                                        HI)  # fmt: skip
                s0, s1, s2, s3, s4, s5, s6, s7 = _tile_add(
                    r, s0, s1, s2, s3, s4, s5, s6, s7, de * sg, do * sg)  # fmt: skip
    _mma_store(s0, s1, s2, s3, s4, s5, s6, s7, m_e, col, n_mask, bias_ptr, out_ptr, ws_ptr,
               cnt_ptr, pid_n, rows, N, HAS_BIAS, SPLIT_K, NT)  # fmt: skip


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
