"""Every shipped profile x topology: goldens byte for byte, the real schemas, the semantic rules,
and the pod running exactly the Quadlet unit's command with the env file's env."""

from __future__ import annotations

import shlex

import pytest

from paroctl.errors import RenderError
from paroctl.profile import profiles
from paroctl.serve import k8s, render
from paroctl.serve.k8s import Manifest, validate

from .conftest import CASES, GOLDEN, NODES, RENDERED, refusal

Cases = dict[tuple[str, str], Manifest]


def test_goldens(rendered: Cases, update_golden: bool) -> None:
    texts = {f"{name}/{m.filename}": m.text() for (name, _), m in rendered.items()}
    if update_golden:
        for old in GOLDEN.rglob("k8s*"):
            old.unlink()
        for rel, text in texts.items():
            (GOLDEN / rel).write_text(text)
    on_disk = {str(p.relative_to(GOLDEN)): p.read_text() for p in GOLDEN.rglob("k8s*")}
    assert sorted(on_disk) == sorted(texts), "k8s golden set differs (run --update-golden)"
    for rel, text in texts.items():
        assert on_disk[rel] == text, f"{rel} differs from its golden file"


def test_every_case_renders_or_is_refused_by_name() -> None:
    # Nothing is silently skipped: each profile x topology either renders or says why not.
    assert len(RENDERED) == 13  # 6 ROCm profiles x 2 topologies + cpu-demo-docker single
    for name, topology in CASES:
        why = refusal(name, topology)
        if why is None:
            continue
        with pytest.raises(RenderError, match=why.replace("(", r"\(").replace(")", r"\)")):
            k8s.render(profiles.load(name), topology, NODES[topology])  # type: ignore[arg-type]


def test_every_document_passes_the_strict_schemas(rendered: Cases) -> None:
    kinds = set()
    for case, manifest in rendered.items():
        assert validate.problems(manifest.documents, "1.33") == [], case
        kinds |= {doc["kind"] for doc in manifest.documents}
    assert kinds == {"Deployment", "LeaderWorkerSet", "Service"}


def _quadlet_exec(name: str) -> list[str]:
    text = render.render(profiles.load(name), "quadlet").content
    line = next(ln for ln in text.splitlines() if ln.startswith("Exec="))
    # systemd quoting undone: "..." words, $$ and %% are one character each.
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line[len("Exec=") :])]


def _env_file(name: str) -> list[tuple[str, str]]:
    text = render.render(profiles.load(name), "env").content
    pairs = [ln.partition("=") for ln in text.splitlines() if ln and not ln.startswith("#")]
    return [(k, v) for k, _, v in pairs]


def _containers(manifest: Manifest) -> dict[str, dict]:
    workload = next(d for d in manifest.documents if d["kind"] != "Service")
    if workload["kind"] == "Deployment":
        return {"pod": workload["spec"]["template"]["spec"]["containers"][0]}
    group = workload["spec"]["leaderWorkerTemplate"]
    return {r: group[f"{r}Template"]["spec"]["containers"][0] for r in ("leader", "worker")}


@pytest.mark.parametrize("case", RENDERED, ids=["-".join(c) for c in RENDERED])
def test_command_and_env_are_the_quadlet_units(rendered: Cases, case: tuple[str, str]) -> None:
    name, topology = case
    argv, env = _quadlet_exec(name), _env_file(name)
    assert argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    for role, container in _containers(rendered[case]).items():
        command = [w.replace("$$", "$") for w in container["command"]]
        values = [
            (e["name"], e["value"].replace("$$", "$")) for e in container["env"] if "value" in e
        ]
        assert values == env, role
        if topology == "single":
            assert command == argv
            continue
        if role == "worker":
            # The same arguments under vLLM's serve command: only it runs a headless worker.
            argv = ["python3", "-m", "vllm.entrypoints.cli.main", "serve", *argv[3:]]
        assert command[: len(argv)] == argv, role
        rank = ["0"] if role == "leader" else ["$(LWS_WORKER_INDEX)", "--headless"]
        assert command[len(argv) :] == [
            "--pipeline-parallel-size", "2", "--nnodes", "$(LWS_GROUP_SIZE)",
            "--node-rank", *rank, "--master-addr", "$(LWS_LEADER_ADDRESS)",
            "--master-port", "29500",
        ]  # fmt: skip


@pytest.mark.usefixtures("fixed_paths")
def test_the_paro_int4_render_holds_the_issue_rules(rendered: Cases) -> None:
    single, multi = rendered["paro-int4", "single"], rendered["paro-int4", "multinode"]
    deployment, service = single.documents
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["amd.com/gpu"] == 2
    assert container["resources"]["requests"] == container["resources"]["limits"]
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2400  # boot_timeout_s
    assert "tcpSocket" not in container["readinessProbe"]
    assert container["readinessProbe"]["exec"]["command"][-2:] == ["Qwen3.8-PARO", "Qwen3.8"]
    assert pod["terminationGracePeriodSeconds"] == 30 + 30
    assert pod["securityContext"] == {"supplementalGroups": [44, 110]}
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    hf = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert hf == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "paroctl-secrets", "key": "HF_TOKEN"}},
    }
    assert deployment["metadata"]["labels"] == {
        "paroctl.profile": "paro-int4",
        "paroctl.profile-hash": profiles.load("paro-int4").hash,
    }
    assert service["spec"]["selector"] == {"paroctl.profile": "paro-int4"}
    lws, leader_service = multi.documents
    group = lws["spec"]["leaderWorkerTemplate"]
    assert (group["size"], group["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    assert "startupProbe" not in group["workerTemplate"]["spec"]["containers"][0]
    assert leader_service["spec"]["selector"] == {
        "paroctl.profile": "paro-int4",
        "paroctl.role": "leader",
    }
    assert group["leaderTemplate"]["metadata"]["labels"]["paroctl.role"] == "leader"
