"""What an image's kernel cache must hold: one plan per profile served on that image kind.

`paroctl image build rocm|cuda` writes `kernel-plan.json` into the build context; the image's
build step `python3 -m paro_vllm.kernel_cache build` compiles it (plugin/paro_vllm/kernel_cache.py
says how). A plan is the profile's model layers (images/kernel_shapes.json: the layer shapes of
each served checkpoint at its tensor-parallel size, since no model is at hand at build time), its
resolved PARO_* knobs, and its M buckets: the largest CUDA/HIP-graph capture size vLLM derives
(prod: min(2 x max_num_seqs x (1 + draft tokens), 512); eval is eager: none) and the prefill
chunk (max_num_batched_tokens, vLLM's 8192 when unset). Profiles on the reference backend, and
models the table does not name (the unquantized references), need no kernels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.errors import RenderError
from paroctl.profile.profiles import Profile

SHAPES_FILE = "kernel_shapes.json"
PLAN_FILE = "kernel-plan.json"
TARGETS = {"gfx1201": "gfx1201", "9.0": "sm90", "sm_90": "sm90"}  # image arch -> cache target
DEFAULT_SEQS = 256  # vLLM's max_num_seqs default
DEFAULT_CHUNK = 8192
MAX_CAPTURE = 512  # vLLM's cap on the largest capture size


def shapes_table(path: Path | None = None) -> dict[str, Any]:
    """images/kernel_shapes.json, parsed."""
    path = path or state.resource_path("images") / SHAPES_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RenderError(f"{path}: {exc}") from exc
    return dict(data)


def target(arch: str) -> str:
    """The kernel-cache target of an image arch (gfx1201, 9.0 -> sm90)."""
    if arch not in TARGETS:
        raise RenderError(f"no kernel-cache target for arch {arch!r} (known: {sorted(TARGETS)})")
    return TARGETS[arch]


def max_capture(profile: Profile) -> int:
    """The largest graph capture size vLLM derives for this serve (0 when eager)."""
    serve = profile.body.serve
    if serve.mode == "eval":
        return 0
    draft = serve.speculative.num_speculative_tokens if serve.speculative else 0
    return min(2 * (serve.max_num_seqs or DEFAULT_SEQS) * (1 + draft), MAX_CAPTURE)


def plan_for(profile: Profile, table: dict[str, Any]) -> dict[str, Any] | None:
    """One profile's plan, or None when it serves no Triton kernel."""
    model = table["models"].get(Path(profile.body.model.path).name)
    if model is None or profile.knobs.get("PARO_BACKEND") == "reference":
        return None
    shapes = table["shape_sets"][model["shapes"]]
    tp = profile.body.serve.tensor_parallel_size
    if shapes["tp"] != tp:
        raise RenderError(
            f"profile {profile.name}: images/{SHAPES_FILE} has {model['shapes']} at TP="
            f"{shapes['tp']}, the profile serves TP={tp}: add its layer shapes"
        )
    layers = [
        {"method": model["method"], "sizes": s["sizes"], "k": s["k"], "bits": model["bits"],
         "group_size": model["group_size"]}
        for s in shapes["layers"]
    ]  # fmt: skip
    knobs = {k: v for k, v in profile.knobs.items() if k.startswith("PARO_")}
    chunk = profile.body.serve.max_num_batched_tokens or DEFAULT_CHUNK
    return {"name": profile.name, "layers": layers, "knobs": knobs,
            "max_capture": max_capture(profile), "chunk": chunk}  # fmt: skip


def image_plan(kind: str, arch: tuple[str, ...], profiles: list[Profile]) -> dict[str, Any]:
    """Every plan of the profiles served on `kind` images, for each of the image's targets."""
    table = shapes_table()
    plans = [p for p in (plan_for(pr, table) for pr in profiles if _kind(pr) == kind) if p]
    return {"targets": [target(a) for a in arch], "plans": plans}


def _kind(profile: Profile) -> str | None:
    return profile.body.image.kind if profile.body.image else None
