"""Host side of the prefill paths on the vendor GEMM: the weights rotated and dequantized once a
call (W' in x.dtype, or 8-bit codes with a scale an output channel) and then cuBLAS /
hipBLASLt.

    dequant   W' in x.dtype = rotated, dequantized weights in one reused scratch per device
              (`dequant_weights`: stored [N, K] on NVIDIA, the vendor GEMM's `F.linear`
              operand, [K, N] on gfx1201), then y = x @ W' through torch: no casts (bf16 W' is
              the bf16 floor of a bf16-weight GEMM: 2.2-2.7e-3 relative in the H200 tests,
              fp16 W' 1.7e-3)
    w8        W' as fp8 / int8 codes [N, K] with max |W'| per output channel (`w8_amax`, a
              load-time constant), per-token 8-bit activations, `torch._scaled_mm` rowwise
              (fp8) or `torch._int_mm` + one epilogue pass (int8)
"""

from __future__ import annotations

import torch

from .._contract import require
from . import launch
from .dequant_kernels import (
    cast_fp16_kernel,
    dequant_rotate_kernel,
    dequant_rotate_t_kernel,
    int_mm_epilogue_kernel,
    quant_rows_kernel,
)
from .weights import Prepared

DEQUANT_BLOCK_N = 64


DEQUANT_WARPS = 4


DEQUANT_STAGES = 3


DEQUANT_PROGRAMS_PER_SM = 2


# H200 2026-12-01: the transposed kernel (codes in the dot's register operand, the block in shared
# memory) and W' in x.dtype (no fp16 casts of x and y); the configs below are the sweep's.
# Sweep (H200 2026-12-01, run 1, the weight pass alone, bf16 W'; one split count
# per partition then): the old kernel 121.7 / 31.4 / 137.0 / 83.1 / 94.7 us (qkv / o_proj / gate_up
# / down / in_proj), the transposed one at 64 columns, 4 warps, 3 stages, 4 programs per SM 72.6 /
# 27.7 / 115.4 / 65.5 / 67.1 (best or within 12% of the best of 9 configs on every shape: 128
# columns or 8 warps 1.1-2x slower, 2 stages +5-18%, 1 stage +12-30%).
# Run 3 (balanced split, as served, bf16 x / W' / y, cuBLAS bf16 in the same run): M = 2048
# qkv 268.6 us vs cuBLAS 208.4 (0.78x), o_proj 0.77x, gate_up 0.77x, down 0.75x, in_proj 0.77x;
# M = 8192 0.84-0.93x (H200 2026-12-01's fp16 path: 0.53-0.73x). ncu (qkv M = 2048): 55.9 us, 158
# registers, 15.5% achieved occupancy, DRAM 29% (the old kernel 119.6 us, 168, 13%, 13%).
DEQUANT_TRANS = True


DEQUANT_T_BLOCK_N = 64


DEQUANT_T_WARPS = 4


DEQUANT_T_STAGES = 3


DEQUANT_T_PROGRAMS_PER_SM = 4


def dequant_rotate(
    w: Prepared,
    out: torch.Tensor | None = None,
    block_n: int = 0,
    num_warps: int = 0,
    nsplit: int = 0,
    dtype: torch.dtype = torch.float16,
    trans: bool | None = None,
    num_stages: int = 0,
    programs_per_sm: int = 0,
    out8: int = 0,
    amax: torch.Tensor | None = None,
    nk: bool = False,
) -> torch.Tensor:
    """W' [K, N] in `dtype` (that of `out` when given): each partition's rotated, dequantized
    weights (in the shared scratch); `trans` picks `dequant_rotate_t_kernel` (default: per
    platform, `dequant_trans`); `nk` (that kernel only): stored [N, K] into `out` instead."""

    qweight, qweight_hi, scales, zeros = w.qweight, w.qweight_hi, w.scales, w.zeros
    rot_hi, rot_lo, bounds, group_size = w.rot_hi, w.rot_lo, w.bounds, w.group_size
    k, n = qweight.shape[0] * 8, qweight.shape[1]
    g = group_size
    p = rot_hi.shape[0]
    hip = launch.is_hip()
    if out is None:
        out = launch.scratch("dequant_w", k * n, dtype, qweight.device)[: k * n].view(k, n)
    use_t = dequant_trans(hip) if trans is None else trans
    b = (*bounds, n, n)[:2]
    pps = programs_per_sm or dequant_programs_per_sm(hip, use_t)
    bn = block_n or dequant_block_n(hip, use_t)
    qh = qweight_hi if qweight_hi is not None else qweight
    bits = 5 if qweight_hi is not None else 4
    nw, ns = num_warps or dequant_warps(hip, use_t), num_stages or dequant_stages(hip, use_t)
    if use_t:
        # the same blocks per program in every partition, ~pps programs per SM in all
        blocks = [-(-(hi - lo) // bn) for lo, hi in zip((0, *bounds), (*bounds, n), strict=True)]
        per = max(1, -(-sum(blocks) * (k // g) // (pps * launch.sm_count(qweight.device))))
        if nsplit:
            per = -(-max(blocks) // nsplit)
        progs = [-(-nb // per) for nb in blocks]
        c = [sum(progs[:1]), sum(progs[:2])]
        dequant_rotate_t_kernel[(k // g, sum(progs))](
            qweight, qh, scales, zeros, rot_hi, rot_lo, out, n, k, b[0], b[1], per, c[0], c[1],
            G=g, BLOCK_N=bn, BITS=bits, OUT8=out8, NK=nk, amax_ptr=amax,
            num_warps=nw, num_stages=ns,
        )  # fmt: skip
        return out
    require(not out8 and not nk, "out8/nk", "the transposed kernel only", (out8, nk))
    nsplit = nsplit or max(1, -(-pps * launch.sm_count(qweight.device) // ((k // g) * p)))
    dequant_rotate_kernel[(k // g, p, nsplit)](
        qweight, qh, scales, zeros, rot_hi, rot_lo, out, n, k, b[0], b[1],
        G=g, BLOCK_N=bn, BITS=bits, NSPLIT=nsplit, num_warps=nw, num_stages=ns,
    )  # fmt: skip
    return out


# NVIDIA: W' stored [N, K] (each output channel's K weights contiguous), the operand layout of
# `F.linear`. H100 2026-12-06, qkv M = 2048 under Nsight Compute
# (benchmarks/results/ncu-2026-12-06-h100-prologue-prefill-layout.csv; [K, N] / [N, K]): the
# dequant kernel 60.1 / 51.1 us, cuBLAS's bf16 GEMM 212.4 / 191.6 us (an NNT kernel / a TNN one).
# The op, same run (benchmarks/results/bench-2026-12-06-h100-prefill-layout.json, forced
# `path-dequant-kn` / `path-dequant`, us): M = 2048 qkv 273.3 / 245.0, down 304.6 / 291.2,
# in_proj 288.6 / 278.8, o_proj 113.9 / 112.6, gate_up 634.7 / 634.0; M = 8192 within this
# bench's noise either way (0.97-1.02x; two timings of one op there differ by 2-10%).
DEQUANT_NK = True


def dequant_weights(w: Prepared, dtype: torch.dtype, nk: bool | None = None) -> torch.Tensor:
    """W' [K, N] in `dtype` for `dequant_linear`, in the shared scratch: where `nk` (default
    `dequant_nk`) the transposed view of W' stored [N, K], else stored [K, N]."""
    if not (dequant_nk(launch.is_hip()) if nk is None else nk):
        return dequant_rotate(w, dtype=dtype)
    k, n = w.qweight.shape[0] * 8, w.qweight.shape[1]
    out = launch.scratch("dequant_w", k * n, dtype, w.qweight.device)[: k * n].view(n, k)
    return dequant_rotate(w, out=out, trans=True, nk=True).t()


def dequant_nk(hip: bool) -> bool:
    """W' stored [N, K] (DEQUANT_NK) where the transposed kernel serves (it alone writes that)."""
    return dequant_trans(hip) and DEQUANT_NK


def dequant_trans(hip: bool) -> bool:
    """The transposed dequant kernel (`dequant_rotate_t_kernel`) on NVIDIA; gfx1201 keeps the
    kernel its AOT budget was measured on."""
    return not hip and DEQUANT_TRANS


def dequant_programs_per_sm(hip: bool, trans: bool = False) -> int:
    """Programs per SM the column splits aim for (see `dequant_block_n`)."""
    return DEQUANT_T_PROGRAMS_PER_SM if trans and not hip else DEQUANT_PROGRAMS_PER_SM


def dequant_block_n(hip: bool, trans: bool = False) -> int:
    """Columns per dequant block. gfx1201 (AOT, Triton 3.9): every 64-column build spilled
    (3-5 VGPRs at 8 waves, 1-3 stages); 32 columns, 4 waves, 2 stages: 222-226, none."""
    if hip:
        return 32
    return DEQUANT_T_BLOCK_N if trans else DEQUANT_BLOCK_N


def dequant_warps(hip: bool, trans: bool = False) -> int:
    """Warps (waves) per dequant program (see `dequant_block_n`)."""
    if hip:
        return 4
    return DEQUANT_T_WARPS if trans else DEQUANT_WARPS


def dequant_stages(hip: bool, trans: bool = False) -> int:
    """Software-pipelining depth of the dequant loop (see `dequant_block_n`)."""
    if hip:
        return 2
    return DEQUANT_T_STAGES if trans else DEQUANT_STAGES


def cast_fp16(x: torch.Tensor) -> torch.Tensor:
    """fp16(x) saturated at fp16's range, one launch (x contiguous)."""

    x = x.contiguous()
    y = torch.empty_like(x, dtype=torch.float16)
    cast_fp16_kernel[(-(-x.numel() // 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=4)
    return y


def dequant_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """y = x @ W' (+ bias) on the vendor GEMM, in x.dtype. W' in x.dtype: one call, no casts;
    an fp16 W' with bf16 x: fp16(x) (saturated at fp16's range), cast back."""
    if w.dtype == x.dtype:
        return torch.mm(x, w) if bias is None else torch.addmm(bias.to(x.dtype), x, w)
    x16 = x if x.dtype == torch.float16 else cast_fp16(x)
    y = torch.mm(x16, w) if bias is None else torch.addmm(bias.to(torch.float16), x16, w)
    return y if x.dtype == torch.float16 else y.to(x.dtype)


W8_KIND = "fp8"


W8_KINDS = ("fp8", "int8")


_W8_CODE = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}


_W8_TOP = {"fp8": 448.0, "int8": 127.0}


def w8_amax(w: Prepared, chunk: int = 8) -> torch.Tensor:
    """max over K of |W'[k, n]| per output channel, [N] fp32 (torch ops, on the tensors' device,
    `chunk` groups at a time): W'_g = (hi + lo)_g @ ((C_g - z) * s) per partition."""
    qweight, qweight_hi, scales, zeros = w.qweight, w.qweight_hi, w.scales, w.zeros
    rot_hi, rot_lo, bounds, group_size = w.rot_hi, w.rot_lo, w.bounds, w.group_size
    k, n = qweight.shape[0] * 8, qweight.shape[1]
    g = group_size
    ngroups = k // g
    dev = qweight.device
    out = torch.zeros(n, dtype=torch.float32, device=dev)
    edges = (0, *bounds, n)
    sh = (torch.arange(8, device=dev, dtype=torch.int32) * 4).view(1, 8, 1)
    for g0 in range(0, ngroups, chunk):
        g1 = min(g0 + chunk, ngroups)
        qw = qweight[g0 * g // 8 : g1 * g // 8]
        c = ((qw.unsqueeze(1) >> sh) & 15).reshape(-1, n)
        if qweight_hi is not None:
            h = qweight_hi[g0 * g // 32 : g1 * g // 32]
            hs = torch.arange(32, device=dev, dtype=torch.int32).view(1, 32, 1)
            c = c | (((h.unsqueeze(1) >> hs) & 1).reshape(-1, n) << 4)
        d = c.view(g1 - g0, g, n).float() - zeros[g0:g1].float().unsqueeze(1)
        d = d * scales[g0:g1].float().unsqueeze(1)
        for p in range(len(edges) - 1):
            lo, hi = edges[p], edges[p + 1]
            b = rot_hi[p, g0:g1].float() + rot_lo[p, g0:g1].float()
            wp = torch.bmm(b, d[:, :, lo:hi].contiguous())
            out[lo:hi] = torch.maximum(out[lo:hi], wp.abs().amax(dim=(0, 1)))
    return out


def w8_ok(n: int, k: int, kind: str) -> bool:
    """The vendor 8-bit GEMM's shape rules (fp8 rowwise: both of W's dims % 16; int8: % 8)."""
    q = 16 if kind == "fp8" else 8
    return n % q == 0 and k % q == 0


def quant_rows(x: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token 8-bit activations: x [M, K] -> (codes [M, K], scales [M] fp32), one launch."""

    m, k = x.shape
    q = torch.empty(m, k, dtype=_W8_CODE[kind], device=x.device)
    sc = torch.empty(m, dtype=torch.float32, device=x.device)
    quant_rows_kernel[(m,)](x, q, sc, k, x.stride(0), INT8=kind == "int8", BLOCK=1024,
                            num_warps=4)  # fmt: skip
    return q, sc


def w8_linear(
    prep: Prepared, x: torch.Tensor, bias: torch.Tensor | None = None, kind: str = ""
) -> torch.Tensor:
    """y = q8(x) @ q8(W') (+ bias) in x.dtype on the vendor 8-bit GEMM (section note above);
    `prep.w8_amax` set (`repack.prepare`)."""

    amax = prep.w8_amax
    require(amax is not None, "w8_amax", "set (repack.prepare)", None)
    assert amax is not None
    kind = kind or W8_KIND
    require(kind in W8_KINDS, "kind", W8_KINDS, kind)
    m, k = x.shape
    n = prep.qweight.shape[1]
    w = launch.scratch("w8_" + kind, k * n, _W8_CODE[kind], x.device)[: k * n].view(n, k)
    dequant_rotate(prep, out=w, trans=True, out8=1 if kind == "int8" else 2, amax=amax, nk=True)
    xq, sa = quant_rows(x, kind)
    sw = amax * (1.0 / _W8_TOP[kind])
    if kind == "fp8":
        return torch._scaled_mm(
            xq, w.t(), scale_a=sa.view(m, 1), scale_b=sw.view(1, n), out_dtype=x.dtype,
            bias=None if bias is None else bias.to(x.dtype),
        )  # fmt: skip
    acc = torch._int_mm(xq, w.t())
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    int_mm_epilogue_kernel[(-(-m // 32), -(-n // 128))](
        acc, sa, sw, bias if bias is not None else sw, y, m, n, HAS_BIAS=bias is not None,
        BLOCK_M=32, BLOCK_N=128, num_warps=4,
    )  # fmt: skip
    return y
