"""GPU memory in use, from whichever vendor tool the box has (amd-smi, rocm-smi, nvidia-smi)."""

from __future__ import annotations

import json
import shutil

from paroctl import proc
from paroctl.errors import RuntimeFailure

# (tool, argv) in order of preference; each prints used memory per GPU.
_TOOLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nvidia-smi", ("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")),
    ("rocm-smi", ("--showmeminfo", "vram", "--json")),
)


def parse_nvidia_smi(text: str) -> dict[int, int]:
    """`nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits` -> {gpu: MiB}."""
    used: dict[int, int] = {}
    for line in text.splitlines():
        if line.strip():
            index, mib = (part.strip() for part in line.split(",")[:2])
            used[int(index)] = int(float(mib))
    return used


def parse_rocm_smi(text: str) -> dict[int, int]:
    """`rocm-smi --showmeminfo vram --json` -> {gpu: MiB}."""
    used: dict[int, int] = {}
    for card, fields in json.loads(text).items():
        if card.startswith("card") and isinstance(fields, dict):
            raw = fields.get("VRAM Total Used Memory (B)")
            if raw is not None:
                used[int(card.removeprefix("card"))] = int(raw) // (1024 * 1024)
    return used


def memory_used_mib() -> dict[int, int] | None:
    """Used memory per GPU in MiB, or None when no vendor tool is installed (a CPU box)."""
    for tool, args in _TOOLS:
        if shutil.which(tool):
            try:
                out = proc.run([tool, *args], timeout=20).stdout
            except RuntimeFailure:
                return None
            return parse_nvidia_smi(out) if tool == "nvidia-smi" else parse_rocm_smi(out)
    return None
