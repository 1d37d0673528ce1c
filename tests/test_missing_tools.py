"""After the README's install every command works, and a check that cannot run says what is
missing and exits 2, never passing silently. The missing part is made really missing: the CLI runs
in a fresh interpreter whose import system refuses the module (as on a box without it), not a mock
of the check."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# `python -c` with these modules absent for the whole run (a finder ahead of every other, so no
# installed copy is found), then the real CLI with the test's arguments.
BLOCKED_CLI = """
import sys
BLOCKED = set(sys.argv[1].split(","))
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
sys.argv = ["paroctl", *sys.argv[2:]]
from paroctl.cli.main import cli
cli()
"""


def _paroctl(
    blocked: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", BLOCKED_CLI, blocked, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def test_the_readme_install_brings_every_command_its_parts() -> None:
    # `pip install -e .` installs [project].dependencies only: report, image build and the
    # Kubernetes schema check need these, so they are dependencies, not extras.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0] for dep in project["dependencies"]}
    assert {"docker", "matplotlib", "kubernetes-validate", "jsonschema"} <= names
    # The old extras still resolve (a script may name them).
    assert {"engine", "report", "k8s"} <= set(project["optional-dependencies"])


@pytest.mark.usefixtures("fixed_paths")
def test_k8s_render_without_its_schemas_exits_2_and_prints_no_manifest() -> None:
    done = _paroctl("kubernetes_validate", "k8s", "render", "paro-int4", "--no-pin")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing for `kubectl apply -f -` to apply unchecked
    last = done.stderr.splitlines()[-1]
    assert last.startswith("Error: the Kubernetes schema check cannot run: ")
    assert "No module named 'kubernetes_validate'" in last and "--no-schema-check" in last
    assert "pip install kubernetes-validate==1.37.0 jsonschema" in last
    assert "Traceback" not in done.stderr


@pytest.mark.usefixtures("fixed_paths")
def test_k8s_render_no_schema_check_says_so_and_renders() -> None:
    done = _paroctl(
        "kubernetes_validate", "k8s", "render", "paro-int4", "--no-pin", "--no-schema-check"
    )
    assert done.returncode == 0, done.stderr
    assert "# not schema-checked (--no-schema-check)" in done.stderr.splitlines()
    assert [d["kind"] for d in yaml.safe_load_all(done.stdout)] == ["Deployment", "Service"]


def test_report_without_matplotlib_exits_2_and_says_how_to_get_it(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = _paroctl("matplotlib", "report", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "Error: paroctl report draws its plots with matplotlib, which is not importable here; it "
        "is a paroctl dependency: reinstall paroctl (`pip install -e .` in the checkout) or "
        "`pip install matplotlib`\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "args", [("image", "build", "cpu"), ("image", "list"), ("image", "doctor", "x:y")]
)
def test_image_commands_without_the_docker_sdk_exit_2_and_say_how_to_get_it(
    args: tuple[str, ...],
) -> None:
    done = _paroctl("docker", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "Error: paroctl image talks to the container engine through the Docker SDK (the `docker` "
        "module), which is not importable here; it is a paroctl dependency: reinstall paroctl "
        "(`pip install -e .` in the checkout) or `pip install docker`\n"
    )
