"""paro-kernels imports with torch alone: no vLLM, no Triton."""

from __future__ import annotations

import os
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


_FUSION = """
import os, sys, warnings
warnings.filterwarnings("error", message="TRITON_DEFAULT_FP_FUSION")  # Triton 3.9's warning
from paro_kernels.triton import aot
print(os.environ.get("TRITON_DEFAULT_FP_FUSION"))
aot.compile_gemv2("sm90", 1, 1024, 1024, 128)  # a compile: no warning (an error here)
"""


def test_triton_package_pins_fp_fusion_unless_the_environment_sets_it() -> None:
    # The kernels were measured and AOT-checked with fused multiply-adds, Triton 3.9's default
    # and no longer 3.10's: importing paro_kernels.triton pins it on (a compile then raises no
    # default-fusion warning), and an operator's explicit setting stands.
    kernels = Path(__file__).resolve().parents[2] / "kernels"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_FP_FUSION"}
    env["PYTHONPATH"] = str(kernels)
    out = subprocess.run([sys.executable, "-c", _FUSION], env=env, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "1"
    code = "import os, paro_kernels.triton; print(os.environ['TRITON_DEFAULT_FP_FUSION'])"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "TRITON_DEFAULT_FP_FUSION": "0"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "0"
