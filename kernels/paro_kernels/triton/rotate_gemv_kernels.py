"""The decode linear in one launch (NVIDIA): the Givens records rotation and the mma.sync GEMV as
two kinds of programs of one grid (`rotate_gemv_mma_kernel`).

Why one launch: at 2-32 rows the records prologue was a launch of its own before the GEMV, and
the GEMV could not start streaming its weights until it ended (H100 2026-12-06: qkv at M = 16,
the op 22.7 us = the prologue ~6.5 + the GEMV 14.8, docs/kernels.md). Here the rotation
programs take the first roles of the launch (`launch_kernels.take_role`) and the GEMV programs
issue each group's weight loads before they wait for that group's rotation
(`gemv_mma_kernels.gemv_mma_program(WAIT=True)`), so the weight stream and the rotation
overlap, and nothing is computed twice: each (group, partition, row block) is rotated by one
program, as `prologue_kernels.givens_paired_kernel` does it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemv_mma_kernels import gemv_mma_program
from .launch_kernels import signal_ready, take_role
from .prologue_kernels import givens_paired_rows


@triton.jit
def rotate_gemv_mma_kernel(
    x_ptr,  # [M, K] bf16/fp16, rows stride_xm, unit stride along K
    gi_ptr,  # [P, KROT, K] int32 Givens partners (`givens_paired_kernel`'s)
    gc_ptr,  # [P, 2 KROT + 1, K] fp32 channel scales, cos, signed sin
    xr_ptr,  # [P, M, K] fp16: the rotation programs' output (pair shift 0)
    a_ptr,  # the same memory as int32 pair words [P, M, K/2]: what the GEMV programs read
    qw_ptr,  # [K/8, N] int32 codes (`gemv_mma_kernel`'s operands from here on)
    sc_ptr,
    zp_ptr,
    bias_ptr,
    ws_ptr,
    cnt_ptr,
    out_ptr,
    ctr_ptr,  # [1 + K/G] int32 zero on entry and on exit: role ticket, per-group counts
    M,
    N,
    K,
    b1,
    b2,
    stride_xm,
    TILES,  # column tiles of the GEMV (cdiv(N, T)): the consumers of each group
    P: tl.constexpr,  # partitions (rotation runs)
    KROT: tl.constexpr,
    ROWS: tl.constexpr,  # rows a rotation program
    RB: tl.constexpr,  # row blocks (cdiv(M, ROWS))
    HAS_BIAS: tl.constexpr,
    G: tl.constexpr,
    T: tl.constexpr,
    SPLIT_K: tl.constexpr,
    ASM: tl.constexpr,
    NT: tl.constexpr = 1,
    HI: tl.constexpr = False,
    qh_ptr=None,
):
    """out = the mma GEMV of the records-rotated x: grid (K/G P RB + TILES SPLIT_K,); roles
    below K/G P RB rotate (group, partition, row block), the rest are GEMV programs (column
    tile, split)."""
    nrot = (K // G) * P * RB
    role = take_role(ctr_ptr, nrot + TILES * SPLIT_K)
    if role < nrot:
        g = role // (P * RB)
        p = (role // RB) % P
        givens_paired_rows(x_ptr, gi_ptr, gc_ptr, xr_ptr, M, K, stride_xm, g, p, role % RB,
                           KROT, G, ROWS, 1.0, True)  # fmt: skip
        signal_ready(ctr_ptr, g)
    else:
        u = role - nrot
        gemv_mma_program(u % TILES, u // TILES, a_ptr, qw_ptr, sc_ptr, zp_ptr, bias_ptr, ws_ptr,
                         cnt_ptr, out_ptr, M, N, K, b1, b2, HAS_BIAS, G, T, SPLIT_K, ASM, NT, HI,
                         qh_ptr, False, True, ctr_ptr, P * RB, TILES)  # fmt: skip
