"""The int4 / int5 layer's weights as the kernels read them: one frozen bundle, `Prepared`,
built once at load (`repack.prepare`) or at the router from the custom op's flat tensors, and
passed whole to every path below the router (`route`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Prepared:
    """A layer repacked once at load for the Triton kernels (the contract's tensors, `route`)."""

    rot_hi: torch.Tensor
    rot_lo: torch.Tensor
    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    bounds: tuple[int, ...]
    group_size: int
    gv_idx: torch.Tensor | None = None
    gv_coef: torch.Tensor | None = None
    bits: int = 4
    qweight_hi: torch.Tensor | None = None  # bits=5: [K/32, N] int32 fifth-bit planes
    w8_amax: torch.Tensor | None = None  # [N] fp32 max |W'| per output channel (W4A8 prefill)
