"""Deliberately broken manifests fail: a misspelt field (core kind and LeaderWorkerSet), a kind
without a schema, a missing GPU limit, a tcpSocket readiness, and each semantic rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from paroctl.profile import profiles
from paroctl.serve import k8s
from paroctl.serve.k8s import semantic, validate
from paroctl.serve.plan import ServePlan

Doc = dict[str, Any]


@pytest.fixture
def int4(fixed_paths: None) -> dict[str, tuple[Doc, ...]]:
    prof = profiles.load("paro-int4")
    return {t: k8s.render(prof, t, 1 if t == "single" else 2)[0].documents for t in k8s.TOPOLOGIES}


def _semantic(topology: str, docs: tuple[Doc, ...]) -> list[str]:
    the_plan = ServePlan.of(profiles.load("paro-int4"))
    serve = k8s.derive(the_plan, topology, 1 if topology == "single" else 2, "img")  # type: ignore[arg-type]
    return semantic.problems(the_plan, serve, docs)


def _pod(doc: Doc, role: str = "leader") -> Doc:
    if doc["kind"] == "Deployment":
        return doc["spec"]["template"]["spec"]
    return doc["spec"]["leaderWorkerTemplate"][f"{role}Template"]["spec"]


def _broken(docs: tuple[Doc, ...], edit: Callable[[Doc], None]) -> tuple[Doc, ...]:
    copied = copy.deepcopy(docs)
    edit(copied[0])
    return copied


def test_the_unbroken_renders_pass(int4: dict[str, tuple[Doc, ...]]) -> None:
    for topology, docs in int4.items():
        assert validate.problems(docs) == []
        assert _semantic(topology, docs) == []


def test_a_misspelt_field_fails_the_core_schema(int4: dict[str, tuple[Doc, ...]]) -> None:
    def misspell(doc: Doc) -> None:
        container = _pod(doc)["containers"][0]
        container["imagePulPolicy"] = container.pop("imagePullPolicy")

    found = validate.problems(_broken(int4["single"], misspell))
    assert found == [
        "Deployment/paroctl-paro-int4: spec.template.spec.containers.0: Additional properties "
        "are not allowed ('imagePulPolicy' was unexpected)"
    ]
    # Inside a LeaderWorkerSet the pod templates meet the same core schema.
    found = validate.problems(_broken(int4["multinode"], misspell))
    assert found == [
        "LeaderWorkerSet/paroctl-paro-int4 leaderTemplate: template.spec.containers.0: "
        "Additional properties are not allowed ('imagePulPolicy' was unexpected)"
    ]


def test_a_misspelt_lws_field_fails_the_subset_schema(int4: dict[str, tuple[Doc, ...]]) -> None:
    def misspell(doc: Doc) -> None:
        doc["spec"]["leaderWorkerTemplate"]["restartPolicyy"] = "None"

    assert validate.problems(_broken(int4["multinode"], misspell)) == [
        "LeaderWorkerSet/paroctl-paro-int4: spec.leaderWorkerTemplate: Additional properties "
        "are not allowed ('restartPolicyy' was unexpected)"
    ]

    def bad_enum(doc: Doc) -> None:
        doc["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"

    found = validate.problems(_broken(int4["multinode"], bad_enum))
    assert (
        len(found) == 1
        and "spec.leaderWorkerTemplate.restartPolicy: 'Always' is not one of" in found[0]
    )


def test_a_wrong_type_fails_the_core_schema(int4: dict[str, tuple[Doc, ...]]) -> None:
    def stringly(doc: Doc) -> None:
        _pod(doc)["terminationGracePeriodSeconds"] = "60"

    found = validate.problems(_broken(int4["single"], stringly))
    assert found == [
        "Deployment/paroctl-paro-int4: spec.template.spec.terminationGracePeriodSeconds: "
        "'60' is not of type 'integer', 'null'"
    ]


def test_a_kind_without_a_schema_fails_not_warns() -> None:
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
    }
    assert validate.problems([doc]) == [
        "ServiceMonitor/x: Couldn't find schema for kind ServiceMonitor with api version "
        "monitoring.coreos.com/v1 for kubernetes version 1.33"
    ]


def test_a_missing_gpu_limit_fails(int4: dict[str, tuple[Doc, ...]]) -> None:
    def drop(doc: Doc) -> None:
        del _pod(doc)["containers"][0]["resources"]["limits"]["amd.com/gpu"]

    for topology in ("single", "multinode"):
        found = _semantic(topology, _broken(int4[topology], drop))
        assert "amd.com/gpu: limit and request must be set and equal" in found, topology


def test_a_gpu_count_other_than_tp_x_nodes_fails(int4: dict[str, tuple[Doc, ...]]) -> None:
    def one_gpu(doc: Doc) -> None:
        res = _pod(doc, "worker")["containers"][0]["resources"]
        res["limits"]["amd.com/gpu"] = res["requests"]["amd.com/gpu"] = 1

    assert _semantic("multinode", _broken(int4["multinode"], one_gpu)) == [
        "amd.com/gpu: 3 GPUs in the group, expected TP x nodes 4"
    ]


def test_a_tcp_socket_readiness_fails(int4: dict[str, tuple[Doc, ...]]) -> None:
    def tcp(doc: Doc) -> None:
        _pod(doc)["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": "http"}}

    assert validate.problems(_broken(int4["single"], tcp)) == []  # valid to the schema...
    assert _semantic("single", _broken(int4["single"], tcp)) == [  # ...but not to the rules
        "pod: readinessProbe must check /health and the served names"
    ]


@pytest.mark.parametrize(
    ("topology", "edit", "message"),
    [
        (
            "single",
            lambda d: d["spec"].update(strategy={"type": "RollingUpdate"}),
            "single: expected a Deployment of 1 replica with strategy Recreate",
        ),
        (
            "single",
            lambda d: _pod(d)["containers"][0]["startupProbe"].update(failureThreshold=30),
            "pod: startupProbe must poll /health for >= 2400 s",
        ),
        (
            "single",
            lambda d: _pod(d)["containers"][0]["securityContext"].pop("capabilities"),
            "pod: capabilities must drop ALL and add back only container.cap_add",
        ),
        (
            "multinode",
            lambda d: _pod(d)["containers"][0]["securityContext"].update(privileged=True),
            "leader: the container must not be privileged or escalate privilege",
        ),
        (
            "single",
            lambda d: _pod(d).update(terminationGracePeriodSeconds=30),
            "pod: terminationGracePeriodSeconds 30 < stop grace + 30",
        ),
        (
            "single",
            lambda d: _pod(d)["containers"][0]["command"].append("$(LWS_WORKER_INDEX)"),
            "single: $(LWS_WORKER_INDEX) only exist in a LeaderWorkerSet's pods",
        ),
        (
            "single",
            lambda d: _pod(d)["containers"][0]["env"].insert(0, {"name": "X", "value": "1"}),
            "pod: env differs from the env file (paro-int4.env)",
        ),
        (
            "single",
            lambda d: _pod(d)["containers"][0]["command"].remove("--enable-prefix-caching"),
            "pod: command differs from the Quadlet unit's Exec (paroctl-paro-int4.container)",
        ),
        (
            "multinode",
            lambda d: d["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"].update(
                maxSurge="100%"
            ),
            "multinode: maxSurge '100%'; a surge group waits for GPUs forever",
        ),
    ],
)
def test_each_semantic_rule_fails_when_broken(
    int4: dict[str, tuple[Doc, ...]], topology: str, edit: Callable[[Doc], None], message: str
) -> None:
    assert message in _semantic(topology, _broken(int4[topology], edit))


def test_an_inline_secret_fails(int4: dict[str, tuple[Doc, ...]]) -> None:
    def inline(doc: Doc) -> None:
        env = _pod(doc)["containers"][0]["env"]
        (at,) = [i for i, entry in enumerate(env) if entry["name"] == "HF_TOKEN"]
        env[at] = {"name": "HF_TOKEN", "value": "hf_secret"}

    found = _semantic("single", _broken(int4["single"], inline))
    assert "pod: secret HF_TOKEN set inline (only a secretKeyRef may carry it)" in found
