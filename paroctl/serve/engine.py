"""The container engine (podman or docker): pure argv builders for a profile's serve, and the
one adapter (`Api`) through which every Docker SDK call goes."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from paroctl import state
from paroctl.errors import RuntimeFailure
from paroctl.profile import knobs as knobs_mod
from paroctl.profile.profiles import Profile, expand
from paroctl.serve import privilege

# Where the host directories appear inside the container.
MODELS_MOUNT = "/models"
CACHE_MOUNT = "/cache"
ENGINE_PATHS = {"podman": "/usr/bin/podman", "docker": "/usr/bin/docker"}


@dataclass(frozen=True)
class Layout:
    """Every derived path of a profile on the host, and the serve's view of them."""

    models_dir: str
    model_dir: str
    serve_model_dir: str
    serve_models_dir: str
    cache_dir: str
    serve_cache_dir: str
    env_file: str
    cache_key: str


def layout(profile: Profile) -> Layout:
    """Derive the host and serve-side paths of a profile."""
    body = profile.body
    models_dir = expand(body.box.models_dir)
    model_dir = _under(models_dir, expand(body.model.path))
    image = body.image.ref if body.image else expand(body.serve.entrypoint[0])
    key = knobs_mod.cache_key(
        image, model_dir, body.model.quantization, profile.knobs, knobs_mod.load_registry()
    )
    compile_root = PurePosixPath(expand(body.box.cache_root)) / "compile"
    cache_dir = str(compile_root / f"{profile.name}-{key}")
    env_file = str(PurePosixPath(expand(body.box.etc_dir)) / "env" / f"{profile.name}.env")
    if profile.uses_engine:
        serve_models = MODELS_MOUNT
        serve_model = (
            _under(MODELS_MOUNT, body.model.path)
            if not body.model.path.startswith("/")
            else body.model.path
        )
        serve_cache = CACHE_MOUNT
    else:
        serve_models, serve_model, serve_cache = models_dir, model_dir, cache_dir
    return Layout(
        models_dir=models_dir,
        model_dir=model_dir,
        serve_model_dir=serve_model,
        serve_models_dir=serve_models,
        cache_dir=cache_dir,
        serve_cache_dir=serve_cache,
        env_file=env_file,
        cache_key=key,
    )


def forwarded_env(profile: Profile) -> dict[str, str]:
    """The complete environment handed to the serve: GPU selection, caches, env, every knob."""
    body = profile.body
    where = layout(profile)
    out: dict[str, str] = {}
    gpus = ",".join(str(g) for g in body.box.gpus)
    if body.box.accelerator == "rocm":
        out["ROCR_VISIBLE_DEVICES"] = gpus
        # HIP indexes into the list ROCR already filtered: always 0..n-1.
        out["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(body.box.gpus)))
    elif body.box.accelerator == "cuda":
        out["CUDA_VISIBLE_DEVICES"] = gpus
    out["VLLM_CACHE_ROOT"] = f"{where.serve_cache_dir}/vllm"
    out["TRITON_CACHE_DIR"] = f"{where.serve_cache_dir}/triton"
    out.update(profile.env)
    out.update(profile.knobs)
    return out


LOAD_TRACKING_FLAG = "--enable-server-load-tracking"


def serve_argv(profile: Profile) -> list[str]:
    """The vLLM OpenAI server command line, as the serve (container or host) sees it."""
    body, serve = profile.body, profile.body.serve
    where = layout(profile)
    entry = (
        [expand(part) for part in serve.entrypoint]
        if not profile.uses_engine
        else list(serve.entrypoint)
    )
    argv = [
        *entry,
        "--model",
        where.serve_model_dir,
        "--served-model-name",
        *body.model.served_names,
        "--host",
        # In a container the serve listens on the container's own interfaces; which host address
        # reaches it is decided by --publish (publish_spec), not by this flag.
        "0.0.0.0" if profile.uses_engine else serve.host,
        "--port",
        str(serve.port),
        "--max-model-len",
        str(serve.max_model_len),
    ]
    if serve.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(serve.tensor_parallel_size)]
    if body.model.quantization:
        argv += ["--quantization", body.model.quantization]
    if serve.dtype:
        argv += ["--dtype", serve.dtype]
    if serve.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(serve.gpu_memory_utilization)]
    if serve.kv_cache_memory:
        argv += ["--kv-cache-memory", serve.kv_cache_memory]
    if serve.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", serve.kv_cache_dtype]
    if serve.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(serve.max_num_batched_tokens)]
    if serve.max_num_seqs:
        argv += ["--max-num-seqs", str(serve.max_num_seqs)]
    argv.append(
        "--enable-prefix-caching" if serve.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if serve.max_logprobs:
        argv += ["--max-logprobs", str(serve.max_logprobs)]
    if serve.mode == "eval":
        argv.append("--enforce-eager")
    # /load then counts the requests in flight (vLLM >= 0.8.5), queued ones included: the
    # switch's drain reads a few bytes in 3-6 ms instead of /metrics' ~50 KB (20-30 ms; its first
    # answer took 0.37 s in one measurement: switch._read_metrics) (switch._drain).
    argv.append(LOAD_TRACKING_FLAG)
    if serve.speculative:
        spec = serve.speculative
        drafter = (
            spec.model if spec.model.startswith("/") else _under(where.serve_models_dir, spec.model)
        )
        argv += [
            "--speculative-config",
            _json(
                {
                    "method": spec.method,
                    "model": drafter,
                    "num_speculative_tokens": spec.num_speculative_tokens,
                }
            ),
        ]
    if serve.generation_override:
        argv += ["--override-generation-config", _json(serve.generation_override)]
    return argv + list(serve.extra_args)


def engine_binary(profile: Profile) -> str:
    """Absolute path of the container engine binary."""
    runtime = profile.body.runtime
    return runtime.engine_path or ENGINE_PATHS[runtime.engine]


def run_argv(profile: Profile) -> list[str]:
    """`podman|docker run` in the foreground for systemd to supervise."""
    body, container = profile.body, profile.body.container
    assert body.image is not None, "run_argv needs a container profile"
    where = layout(profile)
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
    ]
    for name in container.secret_names:
        # Forwarded by name from the unit's 0600 EnvironmentFile: the value never hits argv.
        argv += ["--env", name]
    if container.privileged:
        argv.append("--privileged")
    else:
        for device in container.devices:
            argv += ["--device", device]
        argv += ["--security-opt", "no-new-privileges"]
    for group in container.group_add:
        argv += ["--group-add", group]
    argv += privilege.engine_args(container)  # --cap-drop ALL, the profile's cap_add, --user
    argv += ["--ipc", container.ipc, "--shm-size", container.shm_size]
    argv += [
        "--publish",
        publish_spec(profile),
        "--volume",
        f"{where.models_dir}:{MODELS_MOUNT}:ro",
        "--volume",
        f"{where.cache_dir}:{CACHE_MOUNT}",
        body.image.ref,
    ]
    return argv + serve_argv(profile)


def publish_spec(profile: Profile) -> str:
    """`--publish` value: the serve's port on serve.host (every interface for 0.0.0.0)."""
    serve = profile.body.serve
    if serve.host == "0.0.0.0":
        return f"{serve.port}:{serve.port}"
    return f"{serve.host}:{serve.port}:{serve.port}"


def stop_argv(profile: Profile) -> list[str]:
    """Stop the container with the profile's grace period."""
    return [
        engine_binary(profile),
        "stop",
        "--time",
        str(profile.body.container.stop_grace_s),
        profile.unit_name,
    ]


def rm_argv(profile: Profile) -> list[str]:
    """Remove a leftover container of the same name (a crash leaves one behind)."""
    return [engine_binary(profile), "rm", "--force", profile.unit_name]


def _under(base: str, path: str) -> str:
    return path if path.startswith("/") else str(PurePosixPath(base) / path)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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
        raise RuntimeFailure("the Docker SDK is missing: pip install 'paroctl[engine]'") from exc
    return docker


class Api:
    """The one adapter over the Docker SDK: build, inspect, list, pull, run."""

    def __init__(self, base_url: str | None = None, timeout_s: float = API_TIMEOUT_S) -> None:
        docker = _sdk()
        self.base_url = base_url or state.env("DOCKER_HOST") or DEFAULT_API
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
    return Api(state.env("DOCKER_HOST") or default, timeout_s)
