"""One serve plan per operation: what a profile's serve is, derived once and handed on.

`ServePlan.of(profile)` derives the layout (host paths and the serve's view of them), the
environment forwarded to the serve, the vLLM command line, the container flags and, asked for,
this machine's CPU decision. Render, engine, runtimes, k8s and the model-info cache read the
plan; none of them derives these again (STYLE.md 16).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType

from paroctl.profile import knobs as knobs_mod
from paroctl.profile.profiles import Profile, expand
from paroctl.profile.schema import Container
from paroctl.records import CpuDecision
from paroctl.serve import cpu as cpu_mod
from paroctl.serve import privilege

# Where the host directories appear inside the container.
MODELS_MOUNT = "/models"
CACHE_MOUNT = "/cache"
LOAD_TRACKING_FLAG = "--enable-server-load-tracking"


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


@dataclass(frozen=True)
class ContainerFlags:
    """The `podman|docker run` flags of a profile's container section, built once.

    Two layouts of the same flags: the .service's run argv, and Quadlet's PodmanArgs= (where
    AddDevice= and NoNewPrivileges= carry the devices and no-new-privileges). Their orders are
    the shipped units' (the golden files hold them byte for byte).
    """

    secrets: tuple[str, ...]  # --env NAME: forwarded by name, the value never hits argv
    isolation: tuple[str, ...]  # --privileged, or the devices and --security-opt no-new-privileges
    groups: tuple[str, ...]  # --group-add
    privilege: tuple[str, ...]  # --cap-drop ALL, the profile's --cap-add, --user
    ipc: tuple[str, ...]  # --ipc, --shm-size
    privileged: bool

    def run_args(self) -> list[str]:
        """The flags in the .service's `run` argv."""
        return [*self.secrets, *self.isolation, *self.groups, *self.privilege, *self.ipc]

    def podman_args(self) -> list[str]:
        """The flags of Quadlet's PodmanArgs= (devices and no-new-privileges are Quadlet keys)."""
        privileged = ("--privileged",) if self.privileged else ()
        return [*self.secrets, *self.groups, *self.ipc, *privileged, *self.privilege]


def container_flags(container: Container) -> ContainerFlags:
    """The one builder of a container section's run flags."""
    if container.privileged:
        isolation: tuple[str, ...] = ("--privileged",)
    else:
        devices = tuple(part for device in container.devices for part in ("--device", device))
        isolation = (*devices, "--security-opt", "no-new-privileges")
    return ContainerFlags(
        secrets=tuple(part for name in container.secret_names for part in ("--env", name)),
        isolation=isolation,
        groups=tuple(part for group in container.group_add for part in ("--group-add", group)),
        privilege=tuple(privilege.engine_args(container)),
        ipc=("--ipc", container.ipc, "--shm-size", container.shm_size),
        privileged=container.privileged,
    )


@dataclass(frozen=True)
class ServePlan:
    """A profile's serve as one operation sees it: derived once, read everywhere below."""

    profile: Profile  # as served: with the CPU decision applied when one was made
    layout: Layout
    env: Mapping[str, str]  # the complete environment handed to the serve
    argv: tuple[str, ...]  # the vLLM command line as the serve (container or host) sees it
    container: ContainerFlags
    cpu: CpuDecision | None = None  # this machine's CPU decision, when resolve_cpu asked for it

    @classmethod
    def of(cls, profile: Profile, *, resolve_cpu: bool = False) -> ServePlan:
        """Derive the plan of a profile; resolve_cpu: as this machine serves it (a CPU profile
        gets this CPU's dtype, cores and KV space; idempotent on a resolved profile)."""
        decision = cpu_mod.plan_for(profile) if resolve_cpu else None
        profile = cpu_mod.apply(profile, decision)
        where = layout(profile)
        return cls(
            profile=profile,
            layout=where,
            env=MappingProxyType(forwarded_env(profile, where)),
            argv=tuple(serve_argv(profile, where)),
            container=container_flags(profile.body.container),
            cpu=decision,
        )


def plan_for(profile: Profile) -> ServePlan:
    """The plan of a profile as this machine serves it (the CPU decision applied)."""
    return ServePlan.of(profile, resolve_cpu=True)


# --- the derivations, each run once per plan ------------------------------------------------------


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


def forwarded_env(profile: Profile, where: Layout) -> dict[str, str]:
    """The complete environment handed to the serve: GPU selection, caches, env, every knob."""
    body = profile.body
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


def serve_argv(profile: Profile, where: Layout) -> list[str]:
    """The vLLM OpenAI server command line, as the serve (container or host) sees it."""
    body, serve = profile.body, profile.body.serve
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
        # reaches it is decided by --publish (engine.publish_spec), not by this flag.
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


def _under(base: str, path: str) -> str:
    return path if path.startswith("/") else str(PurePosixPath(base) / path)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
