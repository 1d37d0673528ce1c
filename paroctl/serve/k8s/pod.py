"""The pod template of a serve: container, probes, volumes, security (plain dicts for YAML)."""

from __future__ import annotations

from typing import Any

from paroctl.profile.cluster import Storage
from paroctl.serve import engine
from paroctl.serve.k8s.serve import Serve, probe_failures

Doc = dict[str, Any]
PERIOD_S = 10
# The readiness check vLLM's own probes cannot express: /health answers AND /v1/models lists every
# served name. /v1/models keeps answering after the engine core died (llm-d's AMD guide), and
# /health alone does not prove which model answers; a TCP socket opens before the model loads.
READY_SCRIPT = "; ".join(
    (
        "import json,os,sys,urllib.request as u",
        "b='http://127.0.0.1:'+sys.argv[1]",
        "k=os.environ.get('VLLM_API_KEY')",
        "h={'Authorization':'Bearer '+k} if k else {}",
        "u.urlopen(u.Request(b+'/health',headers=h),timeout=5)",
        "r=json.load(u.urlopen(u.Request(b+'/v1/models',headers=h),timeout=5))",
        "sys.exit(0 if set(sys.argv[2:])<={m['id'] for m in r['data']} else 1)",
    )
)


def escape(word: str) -> str:
    """A literal for a command or env value: Kubernetes expands $(VAR) there; $$ is one $."""
    return word.replace("$", "$$")


def labels(serve: Serve, role: str | None = None) -> dict[str, str]:
    """The labels every object and pod of a profile carries."""
    out = {"paroctl.profile": serve.name, "paroctl.profile-hash": serve.hash}
    return {**out, "paroctl.role": role} if role else out


def pod_spec(serve: Serve, command: list[str], serving: bool) -> Doc:
    """The pod spec; `serving` adds the HTTP port and the probes (the leader, a single pod)."""
    cluster = serve.cluster
    spec: Doc = {
        # Service env vars (FOO_PORT=tcp://...) would land in vLLM's env beside the env file's.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": serve.stop_grace_s + 30,
        "containers": [_container(serve, command, serving)],
        "volumes": _volumes(serve),
    }
    if serve.group_ids:
        spec["securityContext"] = {"supplementalGroups": list(serve.group_ids)}
    if cluster.node_selector:
        spec["nodeSelector"] = dict(cluster.node_selector)
    if cluster.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in cluster.tolerations]
    return spec


def _container(serve: Serve, command: list[str], serving: bool) -> Doc:
    amounts: dict[str, Any] = {
        "cpu": serve.cluster.resources.cpu,
        "memory": serve.cluster.resources.memory,
    }
    if serve.gpu_resource:
        amounts[serve.gpu_resource] = serve.gpus_per_pod
    container: Doc = {
        "name": "vllm",
        "image": serve.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": env_list(serve),
    }
    if serving:
        container["ports"] = [{"name": "http", "containerPort": serve.port, "protocol": "TCP"}]
        container.update(probes(serve))
    container["resources"] = {"requests": dict(amounts), "limits": dict(amounts)}
    security: Doc = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        # As the podman argv: every capability dropped, only the profile's container.cap_add back.
        "capabilities": {
            "drop": ["ALL"],
            **({"add": list(serve.cap_add)} if serve.cap_add else {}),
        },
    }
    if serve.user:
        uid, _, gid = serve.user.partition(":")
        security["runAsUser"] = int(uid)
        security["runAsNonRoot"] = int(uid) != 0
        if gid:
            security["runAsGroup"] = int(gid)
    container["securityContext"] = security
    container["volumeMounts"] = [
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "models", "mountPath": engine.MODELS_MOUNT, "readOnly": True},
        {"name": "cache", "mountPath": engine.CACHE_MOUNT, **_cache_sub_path(serve)},
    ]
    return container


def env_list(serve: Serve) -> list[Doc]:
    """The env file's entries in its order, then each secret by reference (never a value)."""
    out: list[Doc] = [{"name": k, "value": escape(v)} for k, v in serve.env]
    for name in serve.secret_names:
        ref = {"name": serve.cluster.secret, "key": name}
        out.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return out


def probes(serve: Serve) -> Doc:
    """startup (/health within the boot timeout), readiness (served names), liveness (/health)."""
    health = {"path": "/health", "port": "http"}
    ready = [serve.python, "-c", READY_SCRIPT, str(serve.port), *serve.served_names]
    return {
        "startupProbe": {
            "httpGet": health,
            "periodSeconds": PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": probe_failures(serve.boot_timeout_s, PERIOD_S),
        },
        "readinessProbe": {
            "exec": {"command": ready},
            "periodSeconds": PERIOD_S,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": health,
            "periodSeconds": PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
    }


def claim_name(serve: Serve, what: str) -> str:
    """The claim paroctl renders for a storage_class volume."""
    return f"paroctl-{serve.name}-{what}"


def _volumes(serve: Serve) -> list[Doc]:
    cluster = serve.cluster
    shm = {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": serve.shm}}
    models = cluster.models
    if models is None or models.host_path:
        path = models.host_path if models and models.host_path else serve.models_dir
        models_volume = _host("models", path, "Directory")
    else:
        models_volume = _claim(serve, "models", models, read_only=True)
    cache = cluster.cache
    if cache is None:
        cache_volume = _host("cache", serve.cache_dir, "DirectoryOrCreate")
    elif cache.host_path:
        cache_volume = _host(
            "cache", f"{cache.host_path}/{serve.cache_subdir}", "DirectoryOrCreate"
        )
    else:
        cache_volume = _claim(serve, "cache", cache, read_only=False)
    return [shm, models_volume, cache_volume]


def _host(name: str, path: str, kind: str) -> Doc:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def _claim(serve: Serve, name: str, storage: Storage, read_only: bool) -> Doc:
    claim = storage.claim or claim_name(serve, name)
    return {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}


def _cache_sub_path(serve: Serve) -> Doc:
    # On a claim the cache is keyed by subPath; on a node directory the path itself is keyed.
    storage = serve.cluster.cache
    return {"subPath": serve.cache_subdir} if storage and not storage.host_path else {}
