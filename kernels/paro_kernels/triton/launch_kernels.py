"""@triton.jit helpers every kernel family shares: programmatic dependent launch (PDL), the L2
prefetch of a program's word rows, the split-K ticket epilogue and the nibble-pair unpack PTX.

Why split-K ends in the kernel: each split adds its fp32 partial into a workspace with atomics,
then takes a ticket on its column block's counter; the last split reads the sums back, writes the
output (+ bias) in the output dtype and leaves the workspace and the counter zeroed for the next
call. No memset and no cast launch per linear (H200 2026-11-29: 5-8 us of a 15-45 us op).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm_kernels import _ticket_finish

try:  # Triton >= 3.4 (PDL: programmatic dependent launch, NVIDIA sm_90+)
    from triton.language.extra.cuda import gdc_launch_dependents as gdc_launch_dependents
    from triton.language.extra.cuda import gdc_wait as gdc_wait
except ImportError:  # pragma: no cover - older Triton: no PDL (the host never sets it then)
    gdc_launch_dependents = gdc_wait = None


def nibble_pair_asm(high_magic: str) -> str:
    """The PTX of the 8-plane nibble unpack: per nibble pair one lop3 into an fp16 pair (low
    nibbles of each byte with 0x64006400, high nibbles with `high_magic`) and one sub.f16x2 of
    the column's zero pair. 0x64006400 leaves the high planes x16; 0x54005400 (ulp 1/16) does not
    (`gemv_dot_kernels._unpack`)."""
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
def _gemv_epilogue(y, ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, offs_m, m_mask, offs_n, n_mask,
                   N, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):  # fmt: skip
    """The decode GEMVs' store of fp32 y [BLOCK_M, BLOCK_N]: (+ bias) as the output dtype, or
    under split-K into the fp32 workspace with the last split finishing (`_ticket_finish`)."""
    out_offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            y += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + out_offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ws_ptr + out_offs, y, mask=mask, sem="relaxed")
        _ticket_finish(ws_ptr, out_ptr, cnt_ptr, bias_ptr, pid_n, out_offs, mask, offs_n, n_mask,
                       HAS_BIAS, SPLIT_K, BLOCK_M, BLOCK_N)  # fmt: skip
