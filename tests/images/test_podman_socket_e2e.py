"""The cpu image built and inspected through podman's Docker-compatible API socket (podman 4.3.1
`podman system service`): the same `engine.Api` and `images.build` as against dockerd.

CI cost: the build starts from the docker-built cpu image (test_cpu_image_e2e builds it first;
`docker save | podman load`, skipped when podman holds that id) with `--venv-from`, so podman
skips the ~2.4 GB pip install. On the 2-core VM, 2026-12-01: a full podman build took 1028 s
(load 10-20); the copy 160 s and the --venv-from build 92 s (load 5-6).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import pytest

from paroctl import dockerhost
from paroctl.image import base, doctor, images
from paroctl.serve import engine

pytestmark = pytest.mark.e2e

TAG = "localhost/paroctl-cpu:podman-test"
DOCKER_TAG = "localhost/paroctl-cpu:test"  # test_cpu_image_e2e's image


@pytest.fixture(scope="module")
def podman_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Api]:
    """A podman API service of our own on a scratch socket, the Debian base copied from docker."""
    dockerhost.ensure_docker()
    base.ensure_base_image()
    socket = tmp_path_factory.mktemp("podman") / "api.sock"
    start = time.monotonic()
    url, pid = dockerhost.start_podman_service(socket)
    try:
        api = engine.Api(url)
        if not dockerhost.image_exists(DOCKER_TAG):  # run alone, without the docker module
            images.build(images.request("cpu", tag=DOCKER_TAG))
        conf = socket.with_name("containers.conf")
        for ref in (base.BASE_IMAGE, DOCKER_TAG):
            dockerhost.copy_image_to_podman(ref, conf)
        print(f"\npodman service + base image: {time.monotonic() - start:.1f} s")
        yield api
    finally:
        os.kill(pid, signal.SIGTERM)


def test_build_and_inspect_through_podmans_socket(podman_api: engine.Api) -> None:
    req = images.request("cpu", tag=TAG, venv_from=DOCKER_TAG)
    start = time.monotonic()
    info = images.build(req, progress=lambda line: None, api=podman_api)
    print(f"\ncpu image through podman: build {time.monotonic() - start:.1f} s")
    assert f"{TAG}" in info.refs
    base_id = (podman_api.inspect_image(req.base) or {})["Id"]
    planned = images.plan(req, base_id).labels
    got = images.inspect_image(TAG, podman_api).labels
    assert re.fullmatch(r"[0-9a-f]{40}", got.pop("paroctl.source-sha"))
    got.pop("paroctl.source-dirty")
    del planned["paroctl.source-sha"], planned["paroctl.source-dirty"]
    assert got == planned
    assert TAG in {ref for item in images.list_images(podman_api) for ref in item.refs}
    # The doctor's last build step ran under podman too, and was recorded for this image id.
    result = doctor.doctor_once(TAG, podman_api)
    assert result.cached and result.ok and result.image_id == info.id
