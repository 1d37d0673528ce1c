"""One exit-code contract at the CLI edge: 0 ok, 1 gate failed, 2 cannot run (crashes too), 130."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import paroctl
from paroctl.cli.main import cli
from paroctl.errors import GateFailed
from paroctl.profile import profiles


def _raise(exc: BaseException) -> None:
    raise exc


def _crash_with(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    monkeypatch.setattr(profiles, "list_names", lambda *a, **k: _raise(exc))


def test_an_unexpected_exception_is_one_line_and_a_logged_traceback(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    _crash_with(monkeypatch, RuntimeError("boom\n  second line"))
    result = CliRunner().invoke(cli, ["profile", "list"])
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    logs = list((isolated_home / "logs").glob("crash-*.log"))
    assert len(logs) == 1
    assert line == (
        f"Error: paroctl crashed: RuntimeError: boom second line (traceback in {logs[0]}; "
        "PAROCTL_DEBUG=1 prints it). Please report it."
    )
    text = logs[0].read_text()
    assert text.startswith("Traceback (most recent call last)") and "RuntimeError: boom\n" in text
    assert logs[0].stat().st_mode & 0o777 == 0o600


def test_paroctl_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    _crash_with(monkeypatch, KeyError("live"))
    monkeypatch.setenv("PAROCTL_DEBUG", "1")
    result = CliRunner().invoke(cli, ["profile", "list"])
    assert result.exit_code == 2
    assert result.output.startswith("Traceback (most recent call last)")
    assert "Error: paroctl crashed: KeyError" in result.output


def test_a_broken_home_still_logs_the_crash_in_the_temp_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("PAROCTL_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    _crash_with(monkeypatch, OSError("disk"))
    result = CliRunner().invoke(cli, ["profile", "list"])
    assert result.exit_code == 2
    assert f"(traceback in {tmp_path / 'tmp'}/crash-" in result.output


@pytest.mark.parametrize(
    "argv",
    [
        ["unit", "render", "cpu-demo", "--format", "env", "--out"],
        ["k8s", "render", "cpu-demo-docker", "--no-pin", "--out"],
    ],
    ids=["unit-render", "k8s-render"],
)
def test_an_unwritable_out_dir_is_named_not_a_crash(
    argv: list[str], isolated_home: Path, tmp_path: Path
) -> None:
    (tmp_path / "plain").write_text("a file, not a directory")
    out = tmp_path / "plain" / "sub"
    result = CliRunner().invoke(cli, [*argv, str(out)])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith(f"Error: cannot write {out}")
    assert result.stderr.splitlines()[-1].endswith(": Not a directory")
    assert "crashed" not in result.output
    assert not (isolated_home / "logs").exists()


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    _crash_with(monkeypatch, KeyboardInterrupt())
    result = CliRunner().invoke(cli, ["profile", "list"])
    assert (result.exit_code, result.output) == (130, "Interrupted.\n")


def test_known_errors_keep_their_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    _crash_with(monkeypatch, GateFailed("decode failed: over the band"))
    result = CliRunner().invoke(cli, ["profile", "list"])
    assert (result.exit_code, result.output) == (1, "Error: decode failed: over the band\n")
    assert CliRunner().invoke(cli, ["profile", "nope"]).exit_code == 2  # usage error
    assert CliRunner().invoke(cli, ["profile", "--help"]).exit_code == 0


def test_python_dash_m_paroctl_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "paroctl", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout == f"paroctl, version {paroctl.__version__}\n"
