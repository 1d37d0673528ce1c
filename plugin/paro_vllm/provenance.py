"""Which source the image this plugin runs in was built from, for the boot marker.

`paroctl image build` writes /opt/paroctl/provenance.json into every image (the same sha as its
`paroctl.source-sha` label); the marker's `source=` field lets paroctl refuse a serve whose plugin
is not the one its image's label claims. Standard library only: it runs in every vLLM process.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

PATH = Path("/opt/paroctl/provenance.json")
NONE = "none"  # outside a paroctl image (a host venv): nothing recorded


def marker_field() -> str:
    """The boot markers' last field: `source=<sha>` (`source=none` outside a paroctl image)."""
    return f"source={source_sha()}"


@functools.lru_cache(maxsize=4)
def source_sha(path: Path = PATH) -> str:
    """The recorded source sha, `+dirty` when the checkout had changes; `none` when absent."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return NONE
    except (OSError, ValueError):
        return "unreadable"
    sha = str(data.get("source_sha") or "unknown") if isinstance(data, dict) else "unknown"
    return f"{sha}+dirty" if isinstance(data, dict) and data.get("source_dirty") else sha
