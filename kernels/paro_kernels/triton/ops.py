"""torch.library custom ops over the Triton launches, with fake (meta) implementations.

Registered as `paro::w4a16_linear` so torch.compile traces the op as one opaque node and CUDA/HIP
graphs capture its launches; the fake implementation gives the output's shape and dtype only.
"""

from __future__ import annotations

import torch

from . import host


@torch.library.custom_op("paro::w4a16_linear", mutates_args=())
def w4a16_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: list[int],
    group_size: int,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
) -> torch.Tensor:
    """The W4A16 ParoQuant linear (contract: `paro_kernels.triton.host`)."""
    return host.w4a16_linear(
        x, rot_hi, rot_lo, qweight, scales, zeros, tuple(bounds), group_size, bias, gv_idx,
        gv_coef,
    )  # fmt: skip


@w4a16_linear.register_fake
def _w4a16_linear_fake(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: list[int],
    group_size: int,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
) -> torch.Tensor:
    """Output [M, N] in x.dtype."""
    torch._check(x.dim() == 2 and qweight.dim() == 2)
    return x.new_empty(x.shape[0], qweight.shape[1])


def linear(prep: host.Prepared, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The custom op on a `Prepared` layer."""
    return w4a16_linear(
        x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales, prep.zeros,
        list(prep.bounds), prep.group_size, bias, prep.gv_idx, prep.gv_coef,
    )  # fmt: skip
