"""The Triton backend of the ParoQuant linear: the `paro::w4a16_linear` custom op on a GPU.

prepare() repacks once at load (AWQ -> K-packed int4, zero codes as uint8, each rotation run's
channel scales + Givens layers folded into per-group G x G blocks); apply() is one custom op, so
torch.compile sees one node and CUDA/HIP graphs capture its two launches. int4 only: int5 stays
on the reference backend until its kernel exists.
"""

from __future__ import annotations

import torch


def supported(bits: int, sizes: list[int], runs: int) -> str | None:
    """Why this layer cannot use the Triton kernels, or None when it can."""
    if bits != 4:
        return f"bits={bits} (the Triton GEMM is int4 only)"
    if runs > 3:
        return f"{runs} distinct rotations (the GEMM takes at most 3)"
    bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
    if any(b % 16 for b in bounds):
        return f"partition boundaries {bounds} are not multiples of 16"
    return None


def prepare(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    rotations: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]],
    group_size: int,
    dtype: torch.dtype,
) -> object:
    """Repack once for the kernels; rotations = (n0, n1, pairs, theta, cs) per run."""
    from paro_kernels.triton import host

    act = dtype if dtype in host.ACT_DTYPES else torch.bfloat16
    return host.prepare(qweight, qzeros, scales, rotations, group_size, act, qweight.device)


def apply(prep: object, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = ((x * cs) R^T) dequant(Q)^T (+ bias) for x [M, K] -> [M, N] in x.dtype."""
    from paro_kernels.triton import ops

    return ops.linear(prep, x, bias)  # type: ignore[arg-type]
