"""The CLI through click's CliRunner, with exact output; --help stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.profile import profiles


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_help_imports_no_heavy_modules() -> None:
    code = (
        "import sys; from paroctl.cli.main import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('docker', 'requests', 'torch', 'vllm', 'jinja2', 'yaml') "
        "if m in sys.modules]\nprint('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["profile", "--help"],
        ["unit", "--help"],
        ["unit", "render", "--help"],
        ["unit", "install", "--help"],
        ["profile", "validate", "--help"],
        ["demo", "--help"],
    ],
)
def test_help_everywhere(args: list[str]) -> None:
    code, out = run(*args)
    assert code == 0 and "Usage: " in out


def test_validate_all() -> None:
    code, out = run("profile", "validate", "--all")
    assert code == 0
    assert out.splitlines() == [f"ok  {p.name}  {p.hash}" for p in profiles.load_all()]


def test_validate_bad_profile_exit_2_no_traceback(profile_dir: Path) -> None:
    (profile_dir / "bad.yaml").write_text(
        "description: x\nextends: _cpu\nmodell: {}\nknobs:\n  PARO_ACT_FORMAT: ''\n"
    )
    result = CliRunner().invoke(cli, ["profile", "validate", "bad"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.output == (
        f"Error: {profile_dir}/bad.yaml: knobs.PARO_ACT_FORMAT: empty value (VAR= is set-but-empty,"
        f" not unset); remove the key for the default\n"
        f"{profile_dir}/bad.yaml: model: required key is missing\n"
        f"{profile_dir}/bad.yaml: modell: unknown key\n"
    )


def test_validate_needs_names_or_all() -> None:
    code, out = run("profile", "validate")
    assert code == 2 and "give profile names or --all" in out


def test_list() -> None:
    code, out = run("profile", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["bf16-ref", "r9700", "systemd/podman", "Qwen3.8-bf16-ref"]
    assert ["cpu-demo", "cpu", "local", "smollm2-demo"] in [line.split() for line in lines]


def test_render_int5_shows_every_knob_and_a_derived_cache_dir() -> None:
    from paroctl.profile import knobs

    code, out = run("unit", "render", "paro-int5", "--format", "env")
    assert code == 0
    for name in knobs.load_registry().knobs:
        assert f"\n{name}=" in out
    assert "PARO_ACT_FORMAT=int8\n" in out
    _, out = run("unit", "render", "paro-int5", "--format", "service")
    assert "--volume /var/cache/paroctl/compile/paro-int5-" in out


def test_render_quadlet_for_a_local_profile_is_a_clear_error() -> None:
    code, out = run("unit", "render", "cpu-demo", "--format", "quadlet")
    assert code == 2
    assert out.startswith("Error: ") and "runtime.engine: none" in out


def test_render_out_writes_files(tmp_path: Path) -> None:
    code, _ = run("unit", "render", "paro-int4", "--out", str(tmp_path))
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "paro-int4.env",
        "paroctl-paro-int4.container",
        "paroctl-paro-int4.service",
    ]


def test_install_dry_run_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path / "units"))
    code, out = run("unit", "install", "cpu-demo", "--dry-run")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"write {tmp_path}/units/paroctl-cpu-demo.service (mode 644, ")
    assert lines[1].startswith("write ") and "/etc/env/cpu-demo.env (mode 644, " in lines[1]
    assert lines[2] == "run   systemctl daemon-reload"
    assert not (tmp_path / "units").exists()


def test_install_then_diff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path / "units"))
    code, out = run("unit", "diff", "cpu-demo")
    assert "paroctl-cpu-demo.service: not installed" in out
    code, out = run("unit", "install", "cpu-demo", "--no-reload")
    assert code == 0 and out.endswith("installed paroctl-cpu-demo\n")
    unit = tmp_path / "units" / "paroctl-cpu-demo.service"
    assert (isolated_home / "etc" / "env" / "cpu-demo.env").read_text().count("PARO_") >= 20
    code, out = run("unit", "diff", "cpu-demo")
    assert out == "cpu-demo: installed files match the profile\n"
    unit.write_text(unit.read_text().replace("KillMode=mixed", "KillMode=process"))
    code, out = run("unit", "diff", "cpu-demo")
    assert "-KillMode=process\n+KillMode=mixed\n" in out


def test_install_reload_failure_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No systemctl here: daemon-reload fails, and says so without a traceback."""
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path / "units"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no systemctl at all
    code, out = run("unit", "install", "cpu-demo")
    assert code == 2
    assert "Error: command not found: systemctl" in out
    assert (tmp_path / "units" / "paroctl-cpu-demo.service").exists()  # files kept


def test_show_resolves_inheritance() -> None:
    import yaml

    _, out = run("profile", "show", "paro-int5")
    doc = yaml.safe_load(out)
    assert doc["serve"]["max_model_len"] == 262144  # from the base
    assert doc["knobs"]["PARO_ACT_SCALE"] == "group"
    assert doc["derived"]["cache_dir"].startswith("/var/cache/paroctl/compile/paro-int5-")
