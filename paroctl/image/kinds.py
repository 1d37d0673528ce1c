"""The image kinds and what each builds from unless told otherwise (base, arch, pins, tag)."""

from __future__ import annotations

from dataclasses import dataclass

from paroctl.image.base import BASE_IMAGE
from paroctl.versions import VERSIONS, Kind

KINDS: tuple[Kind, ...] = ("rocm", "cuda", "cpu")


@dataclass(frozen=True)
class KindDefaults:
    """What a kind builds from unless told otherwise."""

    base: str
    arch: tuple[str, ...]
    vllm_dist: str
    vllm_version: str
    python_version: str  # the base image's python3: the wheelhouse is resolved for it
    tag: str


# The versions come from paroctl.versions (one place for every kind). The rocm/cuda bases are
# public registry images: overridable per box with --base, never built here.
DEFAULTS: dict[Kind, KindDefaults] = {
    "rocm": KindDefaults(
        base="docker.io/rocm/vllm:rocm7.0.0_vllm_0.32.0",
        arch=("gfx1201",),
        vllm_dist=VERSIONS["rocm"].vllm_dist,
        vllm_version=VERSIONS["rocm"].vllm,
        python_version="3.12",
        tag="localhost/paroctl-rocm:gfx1201",
    ),
    "cuda": KindDefaults(
        base="docker.io/vllm/vllm-openai:v0.32.0",
        arch=("9.0",),
        vllm_dist=VERSIONS["cuda"].vllm_dist,
        vllm_version=VERSIONS["cuda"].vllm,
        python_version="3.12",
        tag="localhost/paroctl-cuda:sm90",
    ),
    "cpu": KindDefaults(
        base=BASE_IMAGE,
        arch=("x86_64",),
        vllm_dist=VERSIONS["cpu"].vllm_dist,
        vllm_version=VERSIONS["cpu"].vllm,
        python_version="3.11",
        tag="localhost/paroctl-cpu:latest",
    ),
}
