"""Triton kernels of the ParoQuant linear (CUDA and ROCm) and their torch.library custom ops.

Importing this package imports triton; `paro_kernels` itself never does.
"""

from .host import (
    Config,
    Prepared,
    linear,
    linear_a8,
    pick_config,
    prepare,
    w4a8_linear,
    w4a16_linear,
)

__all__ = [
    "Config",
    "Prepared",
    "linear",
    "linear_a8",
    "pick_config",
    "prepare",
    "w4a8_linear",
    "w4a16_linear",
]
