"""The Triton backend of the ParoQuant linear: the `paro::w4a16_linear` / `paro::w4a8_linear`
custom ops on a GPU.

prepare() repacks once at load (AWQ -> K-packed int4 nibbles, int5's fifth bits as a K-packed
bit plane, zero codes as uint8, each rotation run's channel scales + Givens layers folded into
per-group G x G blocks); apply() is one custom op per call, so torch.compile sees one node and
CUDA/HIP graphs capture its launches. The activation mode is the call's `ActConfig` (the same
PARO_ACT_FORMAT / PARO_ACT_SCALE / PARO_ZP_EPILOGUE / PARO_DECODE_MAX_M rules as the reference
backend): bf16 runs the W4A16 kernels (int4 only), fp8 / int8 the W4A8 / W5A8 kernels.
"""

from __future__ import annotations

import torch

from .activations import ActConfig


def supported(
    bits: int, sizes: list[int], runs: int, act_format: str = "bf16", k: int = 0
) -> str | None:
    """Why this layer cannot use the Triton kernels, or None when it can."""
    if bits not in (4, 5):
        return f"bits={bits} (the Triton GEMMs take int4 and int5)"
    if bits == 5 and act_format == "bf16":
        return "bits=5 with PARO_ACT_FORMAT=bf16 (int5 runs on the W5A8 kernels: fp8 or int8)"
    if bits == 5 and (sum(sizes) % 32 or k % 32):
        return f"bits=5 needs N and K multiples of 32, got N={sum(sizes)} K={k}"
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
    bits: int = 4,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
) -> object:
    """Repack once for the kernels; rotations = (n0, n1, pairs, theta, cs) per run."""
    from paro_kernels.triton import launch, repack

    act = dtype if dtype in launch.ACT_DTYPES else torch.bfloat16
    return repack.prepare(
        qweight, qzeros, scales, rotations, group_size, act, qweight.device, bits, qweight_hi,
        qzeros_hi,
    )  # fmt: skip


def apply(
    prep: object, x: torch.Tensor, bias: torch.Tensor | None, act: ActConfig | None = None
) -> torch.Tensor:
    """y = act_quant((x * cs) R^T) dequant(Q)^T (+ bias) for x [M, K] -> [M, N] in x.dtype."""
    from paro_kernels.triton import ops

    if act is None or act.format == "bf16":
        return ops.linear(prep, x, bias)  # type: ignore[arg-type]
    return ops.linear_a8(prep, x, bias, act.format, act.scale, act.zp_epilogue)  # type: ignore[arg-type]
