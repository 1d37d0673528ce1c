"""CI runs the linters and the type checker as configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's tools, beside its python


@pytest.mark.parametrize(
    "argv",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        # paroctl, plugin/paro_vllm and kernels/paro_kernels ([tool.mypy] files); every py.typed.
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tool_is_clean(argv: list[str]) -> None:
    done = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_every_package_is_marked_typed() -> None:
    for package in ("paroctl", "plugin/paro_vllm", "kernels/paro_kernels"):
        assert (REPO / package / "py.typed").is_file(), package
