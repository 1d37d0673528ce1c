"""`paroctl k8s render` through click: YAML on stdout for `kubectl apply -f -`, --out writes one
file atomically, bad input exits 2 with a message naming what was wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from paroctl.cli.main import cli

from .conftest import GOLDEN


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["k8s", "render", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.usefixtures("fixed_paths")
def test_render_prints_the_manifests_to_stdout() -> None:
    code, out, err = _run("paro-int4", "--no-pin")
    assert code == 0, err
    assert out == (GOLDEN / "paro-int4" / "k8s-single.yaml").read_text()
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["Deployment", "Service"]
    # What the manifest names, and why, goes to stderr: stdout stays pure YAML.
    assert err == "# --no-pin: the manifest names localhost/paroctl-rocm:gfx1201\n"


@pytest.mark.usefixtures("fixed_paths")
def test_render_out_writes_one_file(tmp_path: Path) -> None:
    code, out, _ = _run(
        "nvfp4", "--topology", "multinode", "--nodes", "2", "--no-pin", "--out", str(tmp_path / "m")
    )
    assert code == 0
    written = tmp_path / "m" / "nvfp4-k8s-multinode.yaml"
    assert out == f"{written}\n"
    assert written.read_text() == (GOLDEN / "nvfp4" / "k8s-multinode.yaml").read_text()
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["nvfp4-k8s-multinode.yaml"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "nope.yaml: no such profile (known: bf16-ref, "),
        (["paro-int4", "--nodes", "2"], "Error: --nodes 2: a single-node render has 1 node (use --topology multinode)\n"),
        (["paro-int4", "--topology", "multinode", "--nodes", "0"], "Error: --nodes 0: a multinode render needs 2..64 nodes\n"),
        (["paro-int4", "--topology", "multinode", "--nodes", "65"], "Error: --nodes 65: a multinode render needs 2..64 nodes\n"),
        (["paro-int4", "--nodes", "two"], "Invalid value for '--nodes': 'two' is not a valid integer."),
        (["paro-int4", "--topology", "ring"], "Invalid value for '--topology': 'ring' is not one of 'single', 'multinode'."),
        (["cpu-demo-docker", "--topology", "multinode"], "cpu-demo-docker.yaml: box.accelerator: cpu; a multinode render splits a model over the GPUs of several nodes"),
        (["cpu-demo"], "cpu-demo.yaml: runtime.engine: none (the serve runs from the host's own venv); a Kubernetes render needs a container image"),
        (["paro-int4", "--k8s-version", "latest"], "Error: --k8s-version 'latest': expected MAJOR.MINOR such as 1.33\n"),
        (["paro-int4", "--no-pin", "--k8s-version", "1.99"], "Error: the render fails the Kubernetes 1.99 schemas: kubernetes-validate 1.37.0 has no schemas for Kubernetes 1.99 (it has 1.25 to 1.37)\n"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_it(args: list[str], message: str) -> None:
    code, out, err = _run(*args)
    assert code == 2
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_bad_cluster_keys_exit_2(profile_dir: Path) -> None:
    (profile_dir / "t.yaml").write_text(
        "description: t\nextends: _r9700\nmodel:\n  path: M\n  served_names: [m]\n"
        "cluster:\n  namespace: Prod\n  storage: nfs\n"
    )
    code, out, err = _run("t")
    assert (code, out) == (2, "")
    where = profile_dir / "t.yaml"
    assert err == (
        f"Error: {where}: cluster.namespace: String should match pattern "
        f"'^[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?$'; got 'Prod'\n"
        f"{where}: cluster.storage: unknown key\n"
    )
