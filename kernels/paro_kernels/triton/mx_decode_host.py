"""Host side of the MXFP4 decode GEMV (`mx_decode_kernels`): configs, the launch, the route.

Shape contract of `mx_gemv` (asserted by `mx_host.check_gemm`, the GEMM's):

    a        [P, M, K]       bf16 / fp16, M <= 4; rows stride_am, unit along K
    w        MxWeight        the GEMM's repacked weight (qw [N, Kp/2] u8, sc [Kp/32, N] u8)
    bounds   P - 1 ints      first output column of planes 1..
    bias     [N] or None
    -> y     [M, N]          out dtype

W4A8 MXFP4 layers take this path too at decode: the same weight bytes with the activations left
unquantized (more accurate than the format's fp8 activations), as the int4 W4A8 layers take the
int4 GEMV there (`fast_host.a8_route`).
"""

from __future__ import annotations

import os

import torch

from .._contract import require
from . import fast_host, host
from .mx_host import MxWeight, _align, _block_n, check_gemm

# Filled in from the H200 sweep (BENCH.md, sixth pass).
GEMV = True
GEMV_MAX_M = 4
GEMV_BLOCK_N = 128
GEMV_WARPS = 4
GEMV_PROGRAMS_PER_SM = 8
GEMV_MIN_PAIRS = 2  # block pairs per split at least
GEMV_HIP = False  # gfx1201 keeps the MXFP4 GEMM until the GEMV is measured there


def sweep_configs() -> list[dict[str, int]]:
    """The config grid of the H200 sweep (bench_mx_decode) and of the GPU test of every config."""
    return [dict(block_n=bn, num_warps=w, programs_per_sm=pps)
            for bn in (64, 128, 256) for w in (4, 8) for pps in (4, 8, 16)
            if bn >= 16 * w]  # fmt: skip


def gemv_ok(m: int, hip: bool) -> bool:
    """Whether the decode GEMV serves an M-row call on this platform."""
    return GEMV and m <= GEMV_MAX_M and (GEMV_HIP or not hip)


def gemv_config(m: int, n: int, k: int, bounds: tuple[int, ...], sms: int, block_n: int = 0,
                num_warps: int = 0, programs_per_sm: int = 0) -> fast_host.GemvConfig:  # fmt: skip
    """Tile and split: BLOCK_N rows a program (dividing every plane boundary), split-K over block
    pairs until about `programs_per_sm` programs per SM."""
    require(1 <= m <= 4, "x rows", "1..4 for the MXFP4 GEMV", m)
    bn = _block_n(block_n or GEMV_BLOCK_N, _align(bounds))
    tiles = -(-n // bn)
    pairs = -(-k // 64)
    pps = programs_per_sm or GEMV_PROGRAMS_PER_SM
    split = max(1, min(pairs // GEMV_MIN_PAIRS, -(-pps * sms // tiles)))
    per = -(-pairs // split)
    block_m = 1 if m == 1 else (2 if m == 2 else 4)
    return fast_host.GemvConfig(block_m, bn, -(-pairs // per), num_warps or GEMV_WARPS)


def mx_gemv(
    a: torch.Tensor,
    w: MxWeight,
    bounds: tuple[int, ...],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    config: fast_host.GemvConfig | None = None,
    asm: bool | None = None,
) -> torch.Tensor:
    """y [M, N] = A_p W^T (+ bias) per plane p for M <= 4 rows; contract in the module doc.
    `asm` (default: NVIDIA, compiled) picks the PTX unpack over the plain-op one."""
    from .mx_decode_kernels import mx_gemv_kernel

    check_gemm(a, None, w, bounds, bias)
    require(a.dtype in (torch.bfloat16, torch.float16), "a dtype", "bf16 or fp16 (A16)", a.dtype)
    _, m, k = a.shape
    n = w.n
    hip = host._is_hip()
    cfg = config or gemv_config(m, n, k, bounds, host.sm_count(a.device))
    require(m <= cfg.block_m, "x rows", f"<= {cfg.block_m} for this config", m)
    out, ws, cnt, tiles = fast_host._gemv_buffers(m, n, cfg, out_dtype, a.device)
    b = (*bounds, n, n)[:2]
    if asm is None:
        asm = not hip and os.environ.get("TRITON_INTERPRET", "0") != "1"
    mx_gemv_kernel[(tiles, cfg.split_k)](
        a, w.qw.view(torch.int32), w.sc, bias if bias is not None else w.sc, ws, cnt, out,
        m, n, k, a.stride(1), b[0], b[1],
        HAS_BIAS=bias is not None, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        SPLIT_K=cfg.split_k, ASM=asm, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


def compile_mx_gemv(target: str, m: int, n: int, k: int, bounds: tuple[int, ...] = (),
                    block_n: int = 0, num_warps: int = 0) -> object:  # fmt: skip
    """Build the GEMV at the config its launcher picks on `target`; an `aot.Report` whose `mma`
    says the loop stayed free of a matrix instruction, as designed."""
    from . import aot
    from .mx_decode_kernels import mx_gemv_kernel
    from .mx_host import _aot_build, _aot_report

    hip = target == "gfx1201"
    cfg = gemv_config(m, n, k, bounds, 64 if hip else 132, block_n, num_warps)
    sig = {
        "a_ptr": "*bf16", "qw_ptr": "*i32", "sc_ptr": "*u8", "bias_ptr": "*bf16",
        "ws_ptr": "*fp32", "cnt_ptr": "*i32", "out_ptr": "*bf16",
        "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "b1": "i32", "b2": "i32",
    }  # fmt: skip
    const = {"HAS_BIAS": False, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
             "SPLIT_K": cfg.split_k, "ASM": not hip}  # fmt: skip
    c = _aot_build(mx_gemv_kernel, sig, const, target, cfg.num_warps, cfg.num_stages)
    rep = _aot_report("mx_gemv", target, str(cfg), c, r"(v_wmma|wgmma|mma\.sync)")
    return aot.Report(**{**rep.__dict__, "mma": not rep.mma})  # type: ignore[attr-defined]
