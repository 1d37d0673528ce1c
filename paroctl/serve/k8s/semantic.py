"""The checks no schema expresses: GPU arithmetic, rollout, probe and grace budgets, the LWS
variables, and that the pod runs exactly the Quadlet unit's command with the env file's env."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

from paroctl.serve import render
from paroctl.serve.k8s import manifests
from paroctl.serve.k8s.serve import INTERFACE_ENV, Serve
from paroctl.serve.plan import ServePlan

Doc = dict[str, Any]
_LWS_VAR = re.compile(r"(?<!\$)\$\(LWS_[A-Z_]+\)")  # $$(...) is an escaped literal
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti)?$")
_SCALE = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def problems(plan: ServePlan, serve: Serve, docs: tuple[Doc, ...]) -> list[str]:
    """Everything wrong with a render of this plan (empty when it may be applied)."""
    found: list[str] = []
    workloads = [d for d in docs if d.get("kind") in ("Deployment", "LeaderWorkerSet")]
    if len(workloads) != 1:
        return [f"expected one Deployment or LeaderWorkerSet, found {len(workloads)}"]
    workload = workloads[0]
    found += _topology(serve, workload)
    found += _gpus(serve, workload)
    for where, spec in pod_specs(workload):
        found += _pod(plan, serve, where, spec, serving=where != "worker")
    found += _lws_vars(serve, docs)
    return found


def pod_specs(workload: Doc) -> Iterator[tuple[str, Doc]]:
    """(role, pod spec) of a Deployment ("pod") or a LeaderWorkerSet ("leader", "worker")."""
    spec = workload.get("spec", {})
    if workload["kind"] == "Deployment":
        yield "pod", spec.get("template", {}).get("spec", {})
        return
    group = spec.get("leaderWorkerTemplate", {})
    yield "leader", group.get("leaderTemplate", {}).get("spec", {})
    yield "worker", group.get("workerTemplate", {}).get("spec", {})


def quadlet_argv(text: str) -> list[str]:
    """The serve argv a rendered Quadlet file runs (its Exec= line, systemd quoting undone)."""
    line = next(ln for ln in text.splitlines() if ln.startswith("Exec="))
    words = shlex.split(line.removeprefix("Exec="))
    return [w.replace("$$", "$").replace("%%", "%") for w in words]


def env_file_items(text: str) -> list[tuple[str, str]]:
    """The entries of a rendered env file, in order."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return [(k, v) for k, _, v in (ln.partition("=") for ln in lines)]


def unescape(word: str) -> str:
    """What a container sees of a literal command word or env value ($$ is one $)."""
    return word.replace("$$", "$")


def bytes_of(quantity: str) -> int:
    """A binary Kubernetes quantity (64Gi) in bytes."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise ValueError(f"not a binary quantity: {quantity!r}")
    return int(match.group(1)) * _SCALE[match.group(2)]


def _topology(serve: Serve, workload: Doc) -> list[str]:
    spec = workload.get("spec", {})
    if serve.topology == "single":
        strategy = spec.get("strategy", {}).get("type")
        if workload["kind"] != "Deployment" or strategy != "Recreate" or spec.get("replicas") != 1:
            return ["single: expected a Deployment of 1 replica with strategy Recreate"]
        return []
    group = spec.get("leaderWorkerTemplate", {})
    out = []
    if group.get("size") != serve.nodes:
        out.append(f"multinode: LeaderWorkerSet size {group.get('size')}, expected {serve.nodes}")
    if group.get("restartPolicy") != "RecreateGroupOnPodRestart":
        out.append("multinode: restartPolicy must be RecreateGroupOnPodRestart")
    surge = spec.get("rolloutStrategy", {}).get("rollingUpdateConfiguration", {}).get("maxSurge")
    if surge != 0:
        out.append(f"multinode: maxSurge {surge!r}; a surge group waits for GPUs forever")
    return out


def _gpus(serve: Serve, workload: Doc) -> list[str]:
    if serve.gpu_resource is None:
        return []
    pods = [spec for _, spec in pod_specs(workload)]
    per_pod = []
    out = []
    for spec in pods:
        for container in spec.get("containers", []):
            res = container.get("resources", {})
            want = res.get("limits", {}).get(serve.gpu_resource)
            if want is None or res.get("requests", {}).get(serve.gpu_resource) != want:
                out.append(f"{serve.gpu_resource}: limit and request must be set and equal")
            per_pod.append(want or 0)
    pods_in_group = 1 if serve.topology == "single" else serve.nodes
    leader = per_pod[0] if per_pod else 0
    worker = per_pod[-1] if per_pod else 0
    total = leader + worker * (pods_in_group - 1)
    wanted = serve.gpus_per_pod * pods_in_group
    if total != wanted:
        out.append(f"{serve.gpu_resource}: {total} GPUs in the group, expected TP x nodes {wanted}")
    return out


def _pod(plan: ServePlan, serve: Serve, where: str, spec: Doc, serving: bool) -> list[str]:
    out = []
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < serve.stop_grace_s + 30:
        out.append(f"{where}: terminationGracePeriodSeconds {grace} < stop grace + 30")
    container = spec.get("containers", [{}])[0]
    out += _command(plan, serve, where, container.get("command", []))
    out += _env(plan, serve, where, container.get("env", []))
    out += _memory(serve, where, spec, container)
    security = container.get("securityContext", {})
    if security.get("allowPrivilegeEscalation") is not False or security.get("privileged"):
        out.append(f"{where}: the container must not be privileged or escalate privilege")
    caps = security.get("capabilities", {})
    if caps.get("drop") != ["ALL"] or sorted(caps.get("add", [])) != sorted(serve.cap_add):
        out.append(f"{where}: capabilities must drop ALL and add back only container.cap_add")
    if serving:
        out += _probes(serve, where, container)
    elif any(k in container for k in ("startupProbe", "readinessProbe", "livenessProbe")):
        out.append(f"{where}: a headless worker serves no HTTP; probes belong on the leader")
    return out


def _command(plan: ServePlan, serve: Serve, where: str, command: list[str]) -> list[str]:
    quadlet = quadlet_argv(render.artefact(plan, "quadlet").content)
    if where == "worker":  # the same arguments after vLLM's serve command (serve.worker_entry)
        quadlet = [*serve.worker_entry, *quadlet[serve.entry_len :]]
    seen = [unescape(w) for w in command]
    if seen[: len(quadlet)] != quadlet:
        unit = render.unit_filename(plan.profile, "quadlet")
        return [f"{where}: command differs from the Quadlet unit's Exec ({unit})"]
    extra = seen[len(quadlet) :]
    if serve.topology == "single" and extra:
        return [f"{where}: command adds {extra} to the Quadlet unit's Exec"]
    return []


def _env(plan: ServePlan, serve: Serve, where: str, env: list[Doc]) -> list[str]:
    out = []
    wanted = env_file_items(render.artefact(plan, "env").content)
    values = [(e["name"], unescape(e["value"])) for e in env if "value" in e]
    if serve.topology == "multinode" and serve.cluster.multinode.interface:
        wanted += [(n, serve.cluster.multinode.interface) for n in INTERFACE_ENV]
    if values != wanted:
        out.append(f"{where}: env differs from the env file ({plan.profile.name}.env)")
    refs = [e for e in env if "value" not in e]
    for entry in refs:
        key = entry.get("valueFrom", {}).get("secretKeyRef", {})
        if entry["name"] not in serve.secret_names or key.get("name") != serve.cluster.secret:
            out.append(f"{where}: env {entry['name']} is not a secret reference paroctl renders")
    names = {e["name"] for e in env}
    for secret in serve.secret_names:
        if secret not in {e["name"] for e in refs}:
            why = "set inline" if secret in names else "missing"
            out.append(f"{where}: secret {secret} {why} (only a secretKeyRef may carry it)")
    return out


def _memory(serve: Serve, where: str, spec: Doc, container: Doc) -> list[str]:
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    shm = [v for v in spec.get("volumes", []) if v.get("name") == "shm"]
    size = shm[0].get("emptyDir", {}).get("sizeLimit") if shm else None
    if not shm or shm[0].get("emptyDir", {}).get("medium") != "Memory" or size is None:
        return [f"{where}: /dev/shm must be a Memory emptyDir with a sizeLimit"]
    if limit is None or bytes_of(limit) <= bytes_of(size):
        return [f"{where}: memory limit {limit} must exceed /dev/shm's {size} (shm counts in it)"]
    return []


def _probes(serve: Serve, where: str, container: Doc) -> list[str]:
    out = []
    startup = container.get("startupProbe", {})
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    if startup.get("httpGet", {}).get("path") != "/health" or budget < serve.boot_timeout_s:
        out.append(f"{where}: startupProbe must poll /health for >= {serve.boot_timeout_s} s")
    ready = container.get("readinessProbe", {})
    command = ready.get("exec", {}).get("command", [])
    if "exec" not in ready or command[-len(serve.served_names) :] != list(serve.served_names):
        out.append(f"{where}: readinessProbe must check /health and the served names")
    if container.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/health":
        out.append(f"{where}: livenessProbe must poll /health")
    return out


def _lws_vars(serve: Serve, docs: tuple[Doc, ...]) -> list[str]:
    used = sorted({m for doc in docs for m in _LWS_VAR.findall(repr(doc))})
    if serve.topology == "single" and used:
        return [f"single: {', '.join(used)} only exist in a LeaderWorkerSet's pods"]
    if serve.topology == "multinode":
        wanted = {
            manifests.LWS_GROUP_SIZE,
            manifests.LWS_LEADER_ADDRESS,
            manifests.LWS_WORKER_INDEX,
        }
        if set(used) != wanted:
            return [f"multinode: uses {used}, expected {sorted(wanted)}"]
    return []
