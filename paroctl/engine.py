"""The container engine (podman or docker): pure argv builders for a profile's serve."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from paroctl import knobs as knobs_mod
from paroctl.profiles import Profile, expand

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
