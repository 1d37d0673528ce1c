"""torch.library custom ops over the MXFP4 Triton launches, with fake (meta) implementations.

`paro::mx_fp8_quant` (per-token e4m3) and `paro::mx_gemm` (the MXFP4 GEMM on prepared A) are
separate ops so a compiled graph can reuse one quantized activation for several GEMMs;
`paro::mx_linear` is the whole linear (prologue + GEMM) as one opaque node for torch.compile and
CUDA/HIP graph capture. The fake implementations give shapes and dtypes only.
"""

from __future__ import annotations

import torch

from . import mx_gemm as mx_gemm_host
from . import mx_repack, mx_route


@torch.library.custom_op("paro::mx_fp8_quant", mutates_args=())
def mx_fp8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token e4m3 of x [R, K]: (q [R, K] float8_e4m3fn, scale [R] fp32)."""
    return mx_gemm_host.fp8_quant(x)


@mx_fp8_quant.register_fake
def _mx_fp8_quant_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q like x in float8_e4m3fn, one fp32 scale per row."""
    torch._check(  # type: ignore[no-untyped-call]
        x.dim() == 2
    )
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(
        x.shape[0], dtype=torch.float32
    )


@torch.library.custom_op("paro::mx_gemm", mutates_args=())
def mx_gemm(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    qw: torch.Tensor,
    sc: torch.Tensor,
    cmax: torch.Tensor,
    k: int,
    span: int,
    cmax_min: int,
    bounds: list[int],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The MXFP4 GEMM (contract: `paro_kernels.triton.mx_gemm`) on the MxWeight's fields."""
    w = mx_repack.MxWeight(qw, sc, cmax, k, span, cmax_min)
    return mx_gemm_host.mx_gemm(a, a_scale, w, tuple(bounds), out_dtype, bias)


@mx_gemm.register_fake
def _mx_gemm_fake(
    a: torch.Tensor,
    a_scale: torch.Tensor | None,
    qw: torch.Tensor,
    sc: torch.Tensor,
    cmax: torch.Tensor,
    k: int,
    span: int,
    cmax_min: int,
    bounds: list[int],
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Output [M, N] in out_dtype."""
    torch._check(  # type: ignore[no-untyped-call]
        a.dim() == 3 and qw.dim() == 2
    )
    return a.new_empty(a.shape[1], qw.shape[0], dtype=out_dtype)


@torch.library.custom_op("paro::mx_linear", mutates_args=())
def mx_linear(
    x: torch.Tensor,
    qw: torch.Tensor,
    sc: torch.Tensor,
    cmax: torch.Tensor,
    k: int,
    span: int,
    cmax_min: int,
    bounds: list[int],
    rot_hi: torch.Tensor | None,
    rot_lo: torch.Tensor | None,
    group_size: int,
    act: str,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole MXFP4 linear: (rotate +) activation quant + GEMM, y [M, N] in x.dtype."""
    prep = mx_repack.Prepared(
        mx_repack.MxWeight(qw, sc, cmax, k, span, cmax_min), tuple(bounds), rot_hi, rot_lo,
        group_size, gv_idx, gv_coef,
    )  # fmt: skip
    return mx_route.mx_linear(prep, x, bias, act)  # type: ignore[arg-type]


@mx_linear.register_fake
def _mx_linear_fake(
    x: torch.Tensor,
    qw: torch.Tensor,
    sc: torch.Tensor,
    cmax: torch.Tensor,
    k: int,
    span: int,
    cmax_min: int,
    bounds: list[int],
    rot_hi: torch.Tensor | None,
    rot_lo: torch.Tensor | None,
    group_size: int,
    act: str,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
) -> torch.Tensor:
    """Output [M, N] in x.dtype."""
    torch._check(  # type: ignore[no-untyped-call]
        x.dim() == 2 and qw.dim() == 2
    )
    return x.new_empty(x.shape[0], qw.shape[0])


def linear(
    prep: mx_repack.Prepared, x: torch.Tensor, bias: torch.Tensor | None = None, act: str = "fp8"
) -> torch.Tensor:
    """`paro::mx_linear` on a `Prepared` layer."""
    w = prep.weight
    y: torch.Tensor = mx_linear(
        x, w.qw, w.sc, w.cmax, w.k, w.span, w.cmax_min, list(prep.bounds), prep.rot_hi,
        prep.rot_lo, prep.group_size, act, bias, prep.gv_idx, prep.gv_coef,
    )  # fmt: skip
    return y
