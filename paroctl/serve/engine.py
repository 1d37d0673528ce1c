"""The container engine (podman or docker): pure argv builders for a serve plan's container, and
the one adapter (`Api`) through which every Docker SDK call goes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl import env
from paroctl.errors import RuntimeFailure
from paroctl.profile.profiles import Profile
from paroctl.serve.plan import CACHE_MOUNT as CACHE_MOUNT
from paroctl.serve.plan import MODELS_MOUNT as MODELS_MOUNT
from paroctl.serve.plan import ServePlan
from paroctl.serve.runtime.base import ServeSpec

ENGINE_PATHS = {"podman": "/usr/bin/podman", "docker": "/usr/bin/docker"}


def engine_binary(profile: Profile) -> str:
    """Absolute path of the container engine binary."""
    runtime = profile.body.runtime
    return runtime.engine_path or ENGINE_PATHS[runtime.engine]


def run_command(plan: ServePlan) -> list[str]:
    """`podman|docker run` of a plan in the foreground, for systemd (or a runtime) to supervise."""
    profile = plan.profile
    assert profile.body.image is not None, "run_command needs a container profile"
    where = plan.layout
    argv = [
        engine_binary(profile),
        "run",
        "--rm",
        "--name",
        profile.unit_name,
        "--label",
        f"paroctl.profile={profile.name}",
        "--label",
        f"paroctl.profile-hash={profile.hash}",
        "--env-file",
        where.env_file,
        *plan.container.run_args(),  # least privilege: --cap-drop ALL, the cap_add, --user
        "--publish",
        publish_spec(profile),
        "--volume",
        f"{where.models_dir}:{MODELS_MOUNT}:ro",
        "--volume",
        f"{where.cache_dir}:{CACHE_MOUNT}",
        profile.body.image.ref,
    ]
    return argv + list(plan.argv)


def exec_argv(plan: ServePlan) -> list[str]:
    """What starts the serve: the engine's run argv, or (no engine) the serve argv itself."""
    return run_command(plan) if plan.profile.uses_engine else list(plan.argv)


def serve_spec(plan: ServePlan) -> ServeSpec:
    """The ServeSpec a runtime starts for a plan (an engine serve reads its env from the file)."""
    profile = plan.profile
    child_env = {} if profile.uses_engine else dict(plan.env)
    serve = profile.body.serve
    return ServeSpec(
        profile.name, tuple(exec_argv(plan)), child_env, serve.port, serve.host, profile.hash
    )


def publish_spec(profile: Profile) -> str:
    """`--publish` value: the serve's port on serve.host (every interface for 0.0.0.0)."""
    serve = profile.body.serve
    if serve.host == "0.0.0.0":
        return f"{serve.port}:{serve.port}"
    return f"{serve.host}:{serve.port}:{serve.port}"


def stop_command(plan: ServePlan) -> list[str]:
    """Stop the plan's container with the profile's grace period."""
    profile = plan.profile
    grace = str(profile.body.container.stop_grace_s)
    return [engine_binary(profile), "stop", "--time", grace, profile.unit_name]


def rm_command(plan: ServePlan) -> list[str]:
    """Remove a leftover container of the same name (a crash leaves one behind)."""
    return [engine_binary(plan.profile), "rm", "--force", plan.profile.unit_name]


# --- the engine API: every Docker SDK call (docker, or podman's API socket via DOCKER_HOST) ------

DEFAULT_API = "unix:///var/run/docker.sock"
# Where podman.socket (shipped with podman, `systemctl enable --now podman.socket`) listens.
PODMAN_API = "unix:///run/podman/podman.sock"
API_TIMEOUT_S = 3600.0  # a build's stream may be silent for minutes (a big pip install step)


@dataclass(frozen=True)
class RunResult:
    """A finished one-shot container: its exit status and both streams."""

    returncode: int
    stdout: str
    stderr: str


def _sdk() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise RuntimeFailure(
            "the Docker SDK is missing, a paroctl dependency: reinstall paroctl "
            "(`pip install -e .`) or `pip install docker`"
        ) from exc
    return docker


class Api:
    """The one adapter over the Docker SDK: build, inspect, list, pull, run."""

    def __init__(self, base_url: str | None = None, timeout_s: float = API_TIMEOUT_S) -> None:
        docker = _sdk()
        self.base_url = base_url or env.get("DOCKER_HOST") or DEFAULT_API
        try:
            self._api = docker.APIClient(base_url=self.base_url, timeout=int(timeout_s))
            self._api.ping()
        except docker.errors.DockerException as exc:
            raise RuntimeFailure(
                f"no container engine API at {self.base_url} ({exc}); start dockerd, or point "
                "DOCKER_HOST at podman's socket (`podman system service`)"
            ) from exc
        self._errors = docker.errors

    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        """The engine's inspect record of an image; None when it has none of that reference."""
        try:
            return dict(self._api.inspect_image(ref))
        except self._errors.ImageNotFound:
            return None
        except self._errors.APIError as exc:
            raise RuntimeFailure(f"{self.base_url}: inspecting {ref} failed ({exc})") from exc

    def images(self, label: str) -> list[dict[str, Any]]:
        """The inspect records of every image carrying the label key."""
        found = self._api.images(filters={"label": label})
        return [raw for item in found if (raw := self.inspect_image(item["Id"])) is not None]

    def pull(self, ref: str) -> None:
        """Pull an image; RuntimeFailure when the engine cannot."""
        try:
            self._api.pull(ref)
        except self._errors.APIError as exc:
            raise RuntimeFailure(
                f"image {ref} is not in the engine and could not be pulled ({exc}); "
                "load it (`docker load`) or pass --base"
            ) from exc

    def build(self, context: Path, tag: str, labels: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """Build context/Containerfile, yielding its decoded stream; an API error ends it."""
        try:
            yield from self._api.build(
                path=str(context),
                dockerfile="Containerfile",
                tag=tag,
                labels=dict(labels),
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
        except self._errors.APIError as exc:
            yield {"error": str(exc)}

    def run(
        self, image: str, argv: Sequence[str], entrypoint: Sequence[str], timeout_s: float = 600
    ) -> RunResult:
        """Run argv in a throwaway container of image without network; wait for it to exit."""
        try:
            box = self._api.create_container(
                image, command=list(argv), entrypoint=list(entrypoint), network_disabled=True
            )
            try:
                self._api.start(box)
                code = int(self._api.wait(box, timeout=timeout_s)["StatusCode"])
                out = self._api.logs(box, stdout=True, stderr=False)
                err = self._api.logs(box, stdout=False, stderr=True)
            finally:
                self._api.remove_container(box, force=True)
        except (self._errors.DockerException, OSError) as exc:
            raise RuntimeFailure(f"{self.base_url}: running {image} failed ({exc})") from exc
        return RunResult(code, out.decode(errors="replace"), err.decode(errors="replace"))


def api_for(profile: Profile, timeout_s: float = API_TIMEOUT_S) -> Api:
    """The API of a profile's own engine: DOCKER_HOST when set, else the engine's usual socket."""
    default = PODMAN_API if profile.body.runtime.engine == "podman" else DEFAULT_API
    return Api(env.get("DOCKER_HOST") or default, timeout_s)
