"""The Triton backend of the MXFP4 linears (MXFP4-PARO and NVFP4 -> MXFP4) on a GPU.

prepare() repacks once at load (e2m1 pairs into whole-MX-block nibble planes, e8m0 scales
transposed, the column exponent range measured; for MXFP4-PARO each rotation run's channel
scales + Givens layers folded into per-group blocks); apply() is one `paro::mx_linear` custom op,
so torch.compile sees one node and CUDA/HIP graphs capture its launches.

Activation modes: PARO_ACT_FORMAT=fp8 is per-token e4m3 at every M (the seed's production
MXFP4 mode); bf16 is W4A16. int8 has no MXFP4 kernel: `supported` says so and the loader keeps
the reference backend for that layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

ACT_FORMATS = {"fp8": "fp8", "bf16": "a16"}


def supported(act_format: str, sizes: list[int], runs: int) -> str | None:
    """Why this layer cannot use the MXFP4 Triton kernels, or None when it can.

    runs = distinct rotation runs (0 for NVFP4 -> MXFP4, whose partitions share one plane).
    """
    if act_format not in ACT_FORMATS:
        return f"PARO_ACT_FORMAT={act_format} (the MXFP4 kernels take fp8 or bf16)"
    if runs > 3:
        return f"{runs} distinct rotations (the GEMM takes at most 3)"
    if runs > 1:
        bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
        if any(b % 16 for b in bounds):
            return f"partition boundaries {bounds} are not multiples of 16"
    return None


def prepare(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    rotations: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]] | None = None,
    group_size: int = 0,
    dtype: torch.dtype = torch.bfloat16,
) -> object:
    """Repack once for the kernels; rotations = (n0, n1, pairs, theta, cs) per run, or None.

    dtype: the model's activation dtype (params_dtype), which the rotation prologue takes.
    """
    from paro_kernels.triton import mx_gemm, mx_repack

    act = dtype if dtype in mx_repack.A16_DTYPES else torch.bfloat16
    prep = mx_repack.prepare(weight, weight_scale, rotations, group_size, weight.device, act)
    if weight.is_cuda:  # the prefill routes' scratch at its size now, not inside a graph capture
        mx_gemm.reserve_scratch(prep, act)
    return prep


def apply(
    prep: object, x: torch.Tensor, bias: torch.Tensor | None, act_format: str
) -> torch.Tensor:
    """y = act_quant(rot(x)) W^T (+ bias) for x [M, K] -> [M, N] in x.dtype."""
    from paro_kernels.triton import mx_ops

    return mx_ops.linear(prep, x, bias, ACT_FORMATS[act_format])  # type: ignore[arg-type]


def apply_layer(
    layer: torch.nn.Module,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    act_format: str,
    reference: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Both MXFP4 methods' apply: x [..., K] as 2-D through the kernels when the layer was
    prepared for them at load (`layer.paro_mx`), else `reference(x2)` (bias included); the
    leading shape restored around the layer's `paro_n` outputs."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    prep = getattr(layer, "paro_mx", None)
    y = apply(prep, x2.contiguous(), bias, act_format) if prep is not None else reference(x2)
    return y.reshape(*shape[:-1], layer.paro_n)
