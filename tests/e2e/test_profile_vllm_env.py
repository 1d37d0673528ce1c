"""VLLM_* names in a profile's env are checked against the envs.py of the vLLM that will serve it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from paroctl.errors import ProfileError
from paroctl.profile import profiles

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_typo_in_a_vllm_variable_fails_against_the_real_vllm(
    demo_parts: object, tmp_path: Path
) -> None:
    shutil.copy(REPO / "profiles" / "_cpu.yaml", tmp_path / "_cpu.yaml")
    body = "description: t\nextends: _cpu\nmodel: {path: m, served_names: [m]}\n"
    (tmp_path / "typo.yaml").write_text(body + "env:\n  VLLM_CPU_KVCACHE_SPAC: '2'\n")
    with pytest.raises(ProfileError) as info:
        profiles.load("typo", tmp_path)
    assert info.value.problems == [
        f"{tmp_path}/typo.yaml: env.VLLM_CPU_KVCACHE_SPAC: vLLM does not declare this variable "
        "(vllm.envs); did you mean VLLM_CPU_KVCACHE_SPACE?"
    ]
    (tmp_path / "good.yaml").write_text(body + "env:\n  VLLM_CPU_OMP_THREADS_BIND: auto\n")
    assert profiles.load("good", tmp_path).env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    for name in profiles.list_names():  # the shipped CPU profiles pass the real check
        profiles.load(name)
