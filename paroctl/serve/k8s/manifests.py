"""Kubernetes manifests of a serve: a Deployment (single node) or a LeaderWorkerSet (multi-node),
its Service, and the claims paroctl renders for `storage_class` volumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from paroctl.profile.cluster import Storage
from paroctl.serve.k8s import pod
from paroctl.serve.k8s.serve import Serve

Doc = dict[str, Any]
LWS_API = "leaderworkerset.x-k8s.io/v1"
# Filled in by the LeaderWorkerSet controller in every pod of a group (api/leaderworkerset/v1).
LWS_GROUP_SIZE = "$(LWS_GROUP_SIZE)"
LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
LWS_WORKER_INDEX = "$(LWS_WORKER_INDEX)"


class _Dumper(yaml.SafeDumper):
    """Safe YAML without &anchors: a reader of a manifest should not chase aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass(frozen=True)
class Manifest:
    """One render: its documents in apply order and the file they go to."""

    filename: str
    documents: tuple[Doc, ...]
    header: str

    def text(self) -> str:
        """The YAML stream for `kubectl apply -f -`."""
        body = yaml.dump_all(
            self.documents,
            Dumper=_Dumper,
            sort_keys=False,
            explicit_start=True,
            width=100,
            allow_unicode=True,
        )
        return self.header + body


def build(serve: Serve) -> Manifest:
    """Every document of a serve's render, claims first (the pods mount them)."""
    docs = [*_claims(serve)]
    docs.append(_deployment(serve) if serve.topology == "single" else _leader_worker_set(serve))
    docs.append(_service(serve))
    header = (
        f"# Rendered by paroctl from profiles/{serve.source} (profile {serve.name}, hash "
        f"{serve.hash}), topology {serve.topology}.\n"
        f"# Do not edit: change the profile, then `paroctl k8s render {serve.name} "
        f"--topology {serve.topology}{_nodes_flag(serve)} | kubectl apply -f -`.\n"
    )
    return Manifest(f"k8s-{serve.topology}.yaml", tuple(docs), header)


def object_name(serve: Serve) -> str:
    """The Deployment / LeaderWorkerSet / Service name (the systemd unit's name)."""
    return f"paroctl-{serve.name}"


def single_command(serve: Serve) -> list[str]:
    """The container command of a single-node serve: the Quadlet unit's Exec, escaped."""
    return [pod.escape(word) for word in serve.argv]


def multinode_command(serve: Serve, leader: bool) -> list[str]:
    """vLLM's own multi-node launch (no Ray) from the env the LeaderWorkerSet injects."""
    rank = ["--node-rank", "0"] if leader else ["--node-rank", LWS_WORKER_INDEX, "--headless"]
    argv = single_command(serve)
    if not leader:
        argv = [*(pod.escape(w) for w in serve.worker_entry), *argv[serve.entry_len :]]
    return [
        *argv,
        # Tensor parallel inside a node (the profile's), pipeline parallel across the nodes.
        "--pipeline-parallel-size",
        str(serve.nodes),
        "--nnodes",
        LWS_GROUP_SIZE,
        *rank,
        "--master-addr",
        LWS_LEADER_ADDRESS,
        "--master-port",
        str(serve.cluster.multinode.master_port),
    ]


def _metadata(serve: Serve, name: str | None = None) -> Doc:
    meta: Doc = {"name": name or object_name(serve)}
    if serve.cluster.namespace:
        meta["namespace"] = serve.cluster.namespace
    meta["labels"] = pod.labels(serve)
    return meta


def _deployment(serve: Serve) -> Doc:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(serve),
        "spec": {
            "replicas": 1,
            # Recreate: the GPUs of one replica cannot hold a second one; a surge pod would stay
            # Pending forever (production-stack's maxSurge 100% trap).
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"paroctl.profile": serve.name}},
            "template": {
                "metadata": {"labels": pod.labels(serve)},
                "spec": pod.pod_spec(serve, single_command(serve), serving=True),
            },
        },
    }


def _leader_worker_set(serve: Serve) -> Doc:
    leader = pod.pod_spec(serve, multinode_command(serve, leader=True), serving=True)
    worker = pod.pod_spec(serve, multinode_command(serve, leader=False), serving=False)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(serve),
        "spec": {
            "replicas": 1,
            # The leader's vLLM waits for its workers: LeaderReady would never start them.
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                # No surge: a second group would need a second set of nodes' GPUs.
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {
                "size": serve.nodes,
                # One lost rank wedges the whole group's collectives: restart it as one.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": pod.labels(serve, "leader")},
                    "spec": leader,
                },
                "workerTemplate": {
                    "metadata": {"labels": pod.labels(serve, "worker")},
                    "spec": worker,
                },
            },
        },
    }


def _service(serve: Serve) -> Doc:
    selector = {"paroctl.profile": serve.name}
    if serve.topology == "multinode":
        selector["paroctl.role"] = "leader"  # only the leader serves HTTP; workers are headless
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(serve),
        "spec": {
            "type": serve.cluster.service_type,
            "selector": selector,
            "ports": [
                {"name": "http", "port": serve.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def _claims(serve: Serve) -> list[Doc]:
    out = []
    for what, storage in (("models", serve.cluster.models), ("cache", serve.cluster.cache)):
        if storage is not None and storage.storage_class:
            out.append(_claim(serve, what, storage))
    return out


def _claim(serve: Serve, what: str, storage: Storage) -> Doc:
    # Every pod of a multi-node group mounts the same claim: it must allow many nodes.
    access = "ReadWriteOnce" if serve.topology == "single" else "ReadWriteMany"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(serve, pod.claim_name(serve, what)),
        "spec": {
            "accessModes": [access],
            "storageClassName": storage.storage_class,
            "resources": {"requests": {"storage": storage.size}},
        },
    }


def _nodes_flag(serve: Serve) -> str:
    return f" --nodes {serve.nodes}" if serve.topology == "multinode" else ""
