"""paro-kernels imports with torch alone: no vLLM, no Triton."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_BLOCK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("triton", "vllm"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, _Block())
import paro_kernels.checkpoint, paro_kernels.cli, paro_kernels.formats
import paro_kernels.reference, paro_kernels.torch_ops
assert not any(m.split(".")[0] in ("triton", "vllm") for m in sys.modules)
"""


def test_imports_without_triton_or_vllm() -> None:
    kernels = Path(__file__).resolve().parents[2] / "kernels"
    code = f"import sys; sys.path.insert(0, {str(kernels)!r})\n" + _BLOCK
    subprocess.run([sys.executable, "-c", code], check=True)
