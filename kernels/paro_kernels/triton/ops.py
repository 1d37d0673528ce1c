"""torch.library custom ops over the Triton launches, with fake (meta) implementations.

Registered as `paro::w4a16_linear` and `paro::w4a8_linear` (int4/int5 weights, fp8/int8
activations; the mode travels as plain arguments, so one compiled graph holds one mode) so
torch.compile traces each op as one opaque node and CUDA/HIP graphs capture its launches; the
fake implementations give the output's shape and dtype only.
"""

from __future__ import annotations

import torch

from . import repack, route


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
    return route.w4a16_linear(
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


def linear(
    prep: repack.Prepared, x: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The custom op on a `Prepared` layer."""
    return w4a16_linear(
        x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales, prep.zeros,
        list(prep.bounds), prep.group_size, bias, prep.gv_idx, prep.gv_coef,
    )  # fmt: skip


@torch.library.custom_op("paro::w4a8_linear", mutates_args=())
def w4a8_linear(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: list[int],
    group_size: int,
    act_format: str,
    act_scale: str,
    zp_epilogue: bool,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    w8_amax: torch.Tensor | None = None,
) -> torch.Tensor:
    """The W4A8 / W5A8 ParoQuant linear (contract: `paro_kernels.triton.host`)."""
    return route.w4a8_linear(
        x, rot_hi, rot_lo, qweight, qweight_hi, scales, zeros, tuple(bounds), group_size,
        act_format, act_scale, zp_epilogue, bias, gv_idx, gv_coef, w8_amax,
    )  # fmt: skip


@w4a8_linear.register_fake
def _w4a8_linear_fake(
    x: torch.Tensor,
    rot_hi: torch.Tensor,
    rot_lo: torch.Tensor,
    qweight: torch.Tensor,
    qweight_hi: torch.Tensor | None,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bounds: list[int],
    group_size: int,
    act_format: str,
    act_scale: str,
    zp_epilogue: bool,
    bias: torch.Tensor | None = None,
    gv_idx: torch.Tensor | None = None,
    gv_coef: torch.Tensor | None = None,
    w8_amax: torch.Tensor | None = None,
) -> torch.Tensor:
    """Output [M, N] in x.dtype."""
    torch._check(x.dim() == 2 and qweight.dim() == 2)
    return x.new_empty(x.shape[0], qweight.shape[1])


def linear_a8(
    prep: repack.Prepared,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    act_format: str = "fp8",
    act_scale: str = "group",
    zp_epilogue: bool = False,
) -> torch.Tensor:
    """The W4A8 custom op on a `Prepared` layer (int4 or int5)."""
    return w4a8_linear(
        x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.qweight_hi, prep.scales, prep.zeros,
        list(prep.bounds), prep.group_size, act_format, act_scale, zp_epilogue, bias,
        prep.gv_idx, prep.gv_coef, prep.w8_amax,
    )  # fmt: skip
