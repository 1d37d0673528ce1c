"""Triton kernels of the MXFP4 mma.sync decode GEMV (M <= 32, NVIDIA) and the fp16 pairing
of its activations; the lane mapping is in the section note below.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemv_fma_kernels import _pair_f32
from .gemv_mma_kernels import (
    _join4,
    _mma_chunk,
    _mma_rows,
    _mma_store,
    _quad_lanes,
    _split4,
    _tile_add,
    _zeros8,
)
from .mx_gemv_kernels import _e2m1

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
    pairing, av = _act_pairs(tiles, mode, act)
    lines += pairing
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


def _act_pairs(tiles: int, mode: int, act: int) -> tuple[list[str], list[str]]:
    """`mx_mma_asm`'s B operands: the paired fp16 words at operands $act.. as they come
    (ACT_PAIRED), or the PTX that pairs the rows' own channels into a<..> (ACT_BF16 / ACT_F16)
    and those registers' names."""
    if not mode:
        return [], [f"${act + i}" for i in range(8 * tiles)]
    lines = [f".reg .b32 a<{8 * tiles}>;", ".reg .f32 f<8>;"]
    for t in range(tiles):
        for row in range(2):  # the low block's row, then the high block's
            w = [f"${act + 8 * t + 4 * row + i}" for i in range(4)]
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
    return lines, [f"a{i}" for i in range(8 * tiles)]


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
    CHUNKED: tl.constexpr = False,  # M > 32: grid axis 2 takes 32-row chunks (NT = 4 each)
):
    """out[:M, n-block] = sum over this split's block pairs of a_p @ W^T; section note above.
    CHUNKED: this program's rows are chunk program_id(2) of 32, as `gemv_mma_kernel`'s."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n0, part, gid, tig, quad, col, n_mask = _quad_lanes(pid_n, T, N, b1, b2)
    npairs = tl.cdiv(K, 64)
    per = tl.cdiv(tl.cdiv(npairs, SPLIT_K), U) * U
    j0 = pid_k * per
    j1 = tl.minimum(j0 + per, npairs)
    rows = M  # the program's output rows (a plane of a_ptr keeps M rows)
    if CHUNKED:
        a_ptr, out_ptr, ws_ptr, cnt_ptr, rows = _mma_chunk(a_ptr, out_ptr, ws_ptr, cnt_ptr, M,
                                                           N, K)  # fmt: skip
    row0, m_e, a_rows, _, _ = _mma_rows(a_ptr, part, gid, tig, M, K)
    left = (rows - gid)[None, :, None]  # the thread's B rows gid + 8 t exist while left > 8 t
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
                                      a_ptr + (row0 + me + 1) * (K // 2), me < rows,
                                      me + 1 < rows,
                                      col, n_mask, j, N, K, ACT)  # fmt: skip
                s0, s1, s2, s3, s4, s5, s6, s7 = _tile_add(
                    r, s0, s1, s2, s3, s4, s5, s6, s7, de, do)  # fmt: skip
    # the unpack's 2^-14
    _mma_store(s0 * 16384.0, s1 * 16384.0, s2 * 16384.0, s3 * 16384.0, s4 * 16384.0,
               s5 * 16384.0, s6 * 16384.0, s7 * 16384.0, m_e, col, n_mask, bias_ptr, out_ptr,
               ws_ptr, cnt_ptr, pid_n, rows, N, HAS_BIAS, SPLIT_K, NT)  # fmt: skip


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
