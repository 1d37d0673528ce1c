"""Triton kernels of the ParoQuant linear (CUDA and ROCm) and their torch.library custom ops.

Importing this package imports triton; `paro_kernels` itself never does.

It also pins Triton's FP fusion on (`TRITON_DEFAULT_FP_FUSION=1` unless the environment sets it):
every kernel here was measured and AOT-checked with fused multiply-adds (the FMA GEMV's inner
loop is FMAs), which is Triton 3.9's default and no longer 3.10's. A process-wide default,
read at compile time, so the JIT, the image's kernel-cache build and the AOT checks all compile
what was measured; on Triton 3.9 it changes nothing, and before 3.9 Triton does not read it.
"""

import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from .gemm import pick_config
from .launch import Config
from .repack import Prepared, prepare
from .route import linear, linear_a8, w4a8_linear, w4a16_linear

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
