"""The vocabulary an image carries: paroctl's label names, an image's record, its provenance.

Below both the build (images.py) and the checks that read labels back (doctor.py,
provenance.py): each names the labels from here, never from the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paroctl import state

LABEL = "paroctl"  # every label key is "paroctl.<name>"
LABEL_KIND = f"{LABEL}.kind"
LABEL_REGISTRY = f"{LABEL}.knob-registry"
LABEL_PLUGIN = f"{LABEL}.plugin-version"
LABEL_SHA = f"{LABEL}.source-sha"
LABEL_DIRTY = f"{LABEL}.source-dirty"
LABEL_TORCH = f"{LABEL}.torch-version"
LABEL_TRITON = f"{LABEL}.triton-min"
LABEL_TRITON_SERIES = f"{LABEL}.triton-series"
LABEL_VLLM = f"{LABEL}.vllm-version"
LABEL_KERNELS = f"{LABEL}.kernels-version"
LABEL_BASE = f"{LABEL}.base"


@dataclass(frozen=True)
class ImageInfo:
    """One image in the engine: references, id, size, and its paroctl labels."""

    refs: tuple[str, ...]
    id: str
    created: str
    size_bytes: int
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return asdict(self)


def image_info(raw: Mapping[str, Any]) -> ImageInfo:
    """The ImageInfo of an engine inspect record (only its paroctl.* labels kept)."""
    labels = (raw.get("Config") or {}).get("Labels") or raw.get("Labels") or {}
    return ImageInfo(
        refs=tuple(raw.get("RepoTags") or ()),
        id=str(raw.get("Id", "")),
        created=str(raw.get("Created", "")),
        size_bytes=int(raw.get("Size", 0)),
        labels={k: str(v) for k, v in sorted(labels.items()) if k.startswith(f"{LABEL}.")},
    )


def images_dir() -> Path:
    """The folder holding one Containerfile template per kind (and verify.py, doctor.py)."""
    return state.resource_path("images")


def provenance_json(labels: Mapping[str, str]) -> str:
    """The image's /opt/paroctl/provenance.json, which the plugin's boot marker reads (pure)."""
    record = {"source_sha": labels[LABEL_SHA], "source_dirty": labels[LABEL_DIRTY] == "true"}
    return json.dumps(record, sort_keys=True) + "\n"


def labelled_source(labels: Mapping[str, str]) -> str | None:
    """The source an image's labels claim, as the plugin's marker spells it (`sha[+dirty]`)."""
    sha = labels.get(LABEL_SHA)
    if not sha:
        return None
    return f"{sha}+dirty" if labels.get(LABEL_DIRTY) == "true" else sha
