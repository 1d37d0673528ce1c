"""Make `paro_kernels` importable from a plain checkout (CI may not `pip install -e kernels`)."""

import sys
from pathlib import Path

_KERNELS = Path(__file__).resolve().parents[2] / "kernels"
try:
    import paro_kernels  # noqa: F401
except ImportError:
    sys.path.insert(0, str(_KERNELS))
