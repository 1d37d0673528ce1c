"""The pieces of a pod that run on their own: the readiness check (a real python process against
a real HTTP server) and the image pinning (a real podman image, and inspect records)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.profile import knobs, profiles
from paroctl.serve.k8s import image, pod


class _Serve(BaseHTTPRequestHandler):
    # A stand-in for vLLM's two endpoints: booting vLLM (30 s on CPU) for one probe costs too much.
    health = 200
    models: tuple[str, ...] = ()
    seen_auth: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization"))
        if self.path == "/health":
            self.send_response(self.health)
            self.end_headers()
            return
        body = json.dumps({"object": "list", "data": [{"id": m} for m in self.models]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Serve)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _ready(server: ThreadingHTTPServer, *names: str, env: dict[str, str] | None = None) -> int:
    port = str(server.server_address[1])
    argv = [sys.executable, "-c", pod.READY_SCRIPT, port, *names]
    return subprocess.run(argv, capture_output=True, timeout=30, env=env).returncode


def test_readiness_needs_health_and_every_served_name(server: ThreadingHTTPServer) -> None:
    _Serve.health, _Serve.models = 200, ("Qwen3.8-PARO", "Qwen3.8")
    assert _ready(server, "Qwen3.8-PARO", "Qwen3.8") == 0
    # The old serve still answering under another name is not ready.
    assert _ready(server, "Qwen3.8-NVFP4", "Qwen3.8") == 1
    _Serve.health = 503  # /v1/models answers after the engine core died: /health decides
    assert _ready(server, "Qwen3.8-PARO") != 0


def test_readiness_sends_the_api_key_when_the_pod_has_one(server: ThreadingHTTPServer) -> None:
    _Serve.health, _Serve.models, _Serve.seen_auth = 200, ("m",), []
    assert _ready(server, "m", env={"VLLM_API_KEY": "k1"}) == 0
    assert _Serve.seen_auth == ["Bearer k1", "Bearer k1"]


def _profile(directory: Path, ref: str) -> profiles.Profile:
    (directory / "t.yaml").write_text(
        "description: t\nextends: _cpu\nruntime: {kind: local, engine: podman}\n"
        f"image: {{ref: '{ref}', kind: cpu}}\nserve:\n  entrypoint: [python3]\n"
        "model: {path: M, served_names: [m]}\n"
    )
    return profiles.load("t", directory)


def test_pin_only_an_image_paroctl_built_for_this_registry(profile_dir: Path) -> None:
    prof = _profile(profile_dir, "reg.example/team/paroctl-cpu:v1")
    digest = "sha256:" + "ab" * 32
    built = {"paroctl.kind": "cpu", "paroctl.knob-registry": prof.registry_digest}
    pushed = ("other.example/x@sha256:" + "cd" * 32, f"reg.example/team/paroctl-cpu@{digest}")
    assert (
        image.choose(prof, image.ImageFacts(built, pushed)).ref
        == f"reg.example/team/paroctl-cpu@{digest}"
    )
    assert image.choose(prof, image.ImageFacts(built, ())).why.startswith(
        "image reg.example/team/paroctl-cpu:v1 has no registry digest yet"
    )
    stale = {**built, "paroctl.knob-registry": "0" * 64}
    assert (
        image.choose(prof, image.ImageFacts(stale, pushed)).ref == "reg.example/team/paroctl-cpu:v1"
    )
    assert image.choose(prof, image.ImageFacts({}, pushed)).ref == "reg.example/team/paroctl-cpu:v1"
    assert image.choose(prof, None).ref == "reg.example/team/paroctl-cpu:v1"


def test_inspect_records_of_both_engines_are_read() -> None:
    docker = {"Config": {"Labels": {"paroctl.kind": "cpu", "maintainer": "x"}}, "RepoDigests": []}
    assert image.facts_from_inspect(docker) == image.ImageFacts({"paroctl.kind": "cpu"}, ())
    podman = {"Labels": {"paroctl.kind": "rocm"}, "RepoDigests": ["localhost/a@sha256:1"]}
    assert image.facts_from_inspect(podman) == image.ImageFacts(
        {"paroctl.kind": "rocm"}, ("localhost/a@sha256:1",)
    )


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman (an engine image)")
def test_render_pins_a_real_podman_image_by_digest(profile_dir: Path, tmp_path: Path) -> None:
    repo = f"localhost/paroctl-k8s-test-{uuid.uuid4().hex[:8]}"
    registry = knobs.load_registry().digest
    (tmp_path / "Containerfile").write_text(
        f"FROM scratch\nLABEL paroctl.kind=cpu paroctl.knob-registry={registry}\n"
    )
    # FROM scratch with labels only: a real image in well under a second, no registry pull.
    subprocess.run(
        ["podman", "build", "-q", "-t", f"{repo}:t", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        _profile(profile_dir, f"{repo}:t")
        inspect = subprocess.run(
            ["podman", "image", "inspect", f"{repo}:t"], check=True, capture_output=True, text=True
        )
        digest = json.loads(inspect.stdout)[0]["Digest"]
        result = CliRunner().invoke(cli, ["k8s", "render", "t"])
        assert result.exit_code == 0, result.stderr
        deployment = next(yaml.safe_load_all(result.stdout))
        assert (
            deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"{repo}@{digest}"
        )
        assert result.stderr == f"# image {repo}:t pinned by its digest\n"
    finally:
        subprocess.run(["podman", "rmi", "-f", f"{repo}:t"], capture_output=True, timeout=120)
