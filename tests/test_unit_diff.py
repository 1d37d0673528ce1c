"""`paroctl unit diff`: exit 0 when the installed files match the render, 1 when they differ or
are missing (as diff(1) does, so cron and CI catch drift), and never a crash on what it finds."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture
def units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path / "units"))
    return tmp_path / "units"


def test_missing_files_are_drift(units: Path) -> None:
    code, out = _run("unit", "diff", "cpu-demo")
    assert code == 1
    assert f"{units}/paroctl-cpu-demo.service: not installed\n" in out


def test_matching_files_exit_0_and_an_edit_exits_1(units: Path) -> None:
    assert _run("unit", "install", "cpu-demo", "--no-reload")[0] == 0
    assert _run("unit", "diff", "cpu-demo") == (0, "cpu-demo: installed files match the profile\n")
    unit = units / "paroctl-cpu-demo.service"
    unit.write_text(unit.read_text().replace("KillMode=mixed", "KillMode=process"))
    code, out = _run("unit", "diff", "cpu-demo")
    assert code == 1
    assert "-KillMode=process\n+KillMode=mixed\n" in out


def test_a_binary_installed_unit_is_drift_not_a_crash(units: Path) -> None:
    assert _run("unit", "install", "cpu-demo", "--no-reload")[0] == 0
    unit = units / "paroctl-cpu-demo.service"
    unit.write_bytes(b"\xff\xfe\x00binary")
    code, out = _run("unit", "diff", "cpu-demo")
    # Before: exit 2, "paroctl crashed: UnicodeDecodeError".
    assert (code, out) == (1, f"{unit}: installed file is not UTF-8 text (byte 0); differs\n")


def test_an_unreadable_installed_unit_cannot_be_compared(units: Path) -> None:
    units.mkdir()
    (units / "paroctl-cpu-demo.service").mkdir()  # a directory where the unit should be
    result = CliRunner().invoke(cli, ["unit", "diff", "cpu-demo"])
    assert result.exit_code == 2
    assert "cannot read the installed " in result.output
    assert "paroctl-cpu-demo.service: Is a directory" in result.output
