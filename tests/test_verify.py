"""Every rendered .service through the real `systemd-analyze verify`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import engine, render
from paroctl.serve.plan import ServePlan


def test_systemd_analyze_is_installed() -> None:
    assert shutil.which("systemd-analyze"), "tests/run.sh installs systemd; verify needs it"


def _provide_binary(path: str) -> None:
    """verify checks that ExecStart's binary exists on this host: give a local profile's venv
    python a real interpreter at its path (the CPU demo's venv may not be built in this run)."""
    target = Path(path)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(sys.executable)


@pytest.mark.parametrize("name", profiles.list_names())
def test_systemd_analyze_verify(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    prof = profiles.load(name)
    if prof.uses_engine:
        engine_bin = engine.engine_binary(prof)
        assert os.access(engine_bin, os.X_OK), f"{engine_bin} missing: install podman to verify"
    else:
        _provide_binary(ServePlan.of(prof).argv[0])
    unit = render.render(prof, "service")
    path = tmp_path / unit.filename
    path.write_text(unit.content)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_verify_catches_a_bad_key(tmp_path: Path) -> None:
    """The check has teeth: a misspelt directive fails it."""
    prof = profiles.load("paro-int5")
    bad = render.render(prof, "service").content.replace("KillMode=mixed", "KillMode=sideways")
    path = tmp_path / "paroctl-bad.service"
    path.write_text(bad)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "sideways" in done.stderr
