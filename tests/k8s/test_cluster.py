"""The `cluster:` profile section: validated like the rest of a profile (every bad key named),
outside the profile hash, and each of its settings reaching the manifests (which still pass the
strict schemas and the semantic rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl.errors import ProfileError, RenderError
from paroctl.profile import profiles
from paroctl.serve import k8s, plan
from paroctl.serve.k8s import validate

INT4 = "description: t\nextends: _r9700\nmodel:\n  path: M\n  served_names: [m]\n"
CLUSTER = """cluster:
  namespace: llm
  models: {storage_class: nfs-ro, size: 500Gi}
  cache: {claim: compile-cache}
  node_selector: {amd.com/gpu.family: gfx1201}
  tolerations:
    - {key: amd.com/gpu, operator: Exists, effect: NoSchedule}
  resources: {cpu: 16500m, memory: 96Gi}
  secret: hf
  group_ids: {video: 44, render: 992}
  service_type: LoadBalancer
  multinode: {interface: eth1, master_port: 29600}
"""


def _load(profile_dir: Path, text: str, name: str = "t") -> profiles.Profile:
    (profile_dir / f"{name}.yaml").write_text(text)
    return profiles.load(name, profile_dir)


def test_the_cluster_section_is_not_in_the_profile_hash(profile_dir: Path) -> None:
    plain = _load(profile_dir, INT4, "a")
    with_cluster = _load(profile_dir, INT4 + CLUSTER, "a")
    assert with_cluster.body.cluster is not None and plain.body.cluster is None
    assert with_cluster.hash == plain.hash


def test_bad_cluster_keys_are_named(profile_dir: Path) -> None:
    bad = """cluster:
  namespace: LLM_Prod
  models: {host_path: /srv/models, claim: m}
  cache: {storage_class: fast}
  node_selector: {"-bad": x}
  tolerations: [{operator: Exists, value: x}]
  resources: {cpu: lots, memory: 64GB}
  group_ids: {render: -1}
  multinode: {interface: "eth0 eth1", master_port: 80}
  replicas: 2
"""
    with pytest.raises(ProfileError) as caught:
        _load(profile_dir, INT4 + bad)
    where = f"{profile_dir / 't.yaml'}: cluster."
    problems = [p.removeprefix(where) for p in caught.value.problems]
    assert all(p.startswith(where) for p in caught.value.problems)
    assert [p.split(":")[0] for p in problems] == [
        "cache",
        "group_ids.render",
        "models",
        "multinode.interface",
        "multinode.master_port",
        "namespace",
        "node_selector.-bad.[key]",
        "replicas",
        "resources.cpu",
        "resources.memory",
        "tolerations.0",
    ]
    assert problems[0] == (
        "cache: storage_class needs size (the claim paroctl renders, e.g. 500Gi); "
        "got {'storage_class': 'fast'}"
    )
    assert problems[2].startswith(
        "models: set exactly one of host_path, claim, storage_class (got ['host_path', 'claim'])"
    )
    assert problems[7] == "replicas: unknown key"
    assert (
        problems[10]
        == "tolerations.0: operator Exists takes no value; got {'operator': 'Exists', 'value': 'x'}"
    )


@pytest.mark.usefixtures("fixed_paths")
def test_every_cluster_setting_reaches_the_manifests(profile_dir: Path) -> None:
    prof = _load(profile_dir, INT4 + CLUSTER)
    for topology, nodes in (("single", 1), ("multinode", 3)):
        manifest, _ = k8s.render(prof, topology, nodes)  # type: ignore[arg-type]
        docs = manifest.documents
        assert validate.problems(docs) == [], topology
        claim, workload, service = docs
        assert claim["kind"] == "PersistentVolumeClaim"
        assert claim["metadata"]["name"] == "paroctl-t-models"
        assert claim["spec"]["storageClassName"] == "nfs-ro"
        access = "ReadWriteOnce" if topology == "single" else "ReadWriteMany"
        assert claim["spec"]["accessModes"] == [access]
        assert {d["metadata"]["namespace"] for d in docs} == {"llm"}
        assert service["spec"]["type"] == "LoadBalancer"
        pods = (
            [workload["spec"]["template"]["spec"]]
            if topology == "single"
            else [
                workload["spec"]["leaderWorkerTemplate"][f"{r}Template"]["spec"]
                for r in ("leader", "worker")
            ]
        )
        for pod in pods:
            assert pod["nodeSelector"] == {"amd.com/gpu.family": "gfx1201"}
            assert pod["tolerations"] == [
                {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ]
            assert pod["securityContext"] == {"supplementalGroups": [44, 992]}
            container = pod["containers"][0]
            assert container["resources"]["limits"] == {
                "cpu": "16500m",
                "memory": "96Gi",
                "amd.com/gpu": 2,
            }
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["models"]["persistentVolumeClaim"] == {
                "claimName": "paroctl-t-models",
                "readOnly": True,
            }
            assert volumes["cache"]["persistentVolumeClaim"] == {
                "claimName": "compile-cache",
                "readOnly": False,
            }
            cache_mount = next(m for m in container["volumeMounts"] if m["name"] == "cache")
            # Keyed like the systemd cache dir: compile/<profile>-<cache key>.
            key = prof.body.box.cache_root + "/" + cache_mount["subPath"]
            assert key == plan.ServePlan.of(prof).layout.cache_dir
            env = {e["name"]: e for e in container["env"]}
            assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf"
            if topology == "multinode":
                assert (
                    env["NCCL_SOCKET_IFNAME"]["value"]
                    == env["GLOO_SOCKET_IFNAME"]["value"]
                    == "eth1"
                )
                assert container["command"][-2:] == ["--master-port", "29600"]
            else:
                assert "NCCL_SOCKET_IFNAME" not in env


@pytest.mark.usefixtures("fixed_paths")
def test_a_host_path_cache_is_keyed_under_its_root(profile_dir: Path) -> None:
    prof = _load(
        profile_dir,
        INT4 + "cluster:\n  cache: {host_path: /mnt/fast}\n  models: {host_path: /mnt/models}\n",
    )
    pod = k8s.render(prof, "single", 1)[0].documents[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    key = plan.ServePlan.of(prof).layout.cache_key
    assert volumes["cache"]["hostPath"] == {
        "path": f"/mnt/fast/compile/t-{key}",
        "type": "DirectoryOrCreate",
    }
    assert volumes["models"]["hostPath"] == {"path": "/mnt/models", "type": "Directory"}


@pytest.mark.usefixtures("fixed_paths")
def test_a_dollar_in_argv_or_env_stays_literal(profile_dir: Path) -> None:
    text = (
        INT4
        + "serve:\n  extra_args: ['--chat-template=/t/$(HOME).jinja']\nenv:\n  HF_HOME: /x/$(USER)\n"
    )
    pod = k8s.render(_load(profile_dir, text), "single", 1)[0].documents[0]["spec"]["template"][
        "spec"
    ]
    container = pod["containers"][0]
    # Kubernetes expands $(VAR) in command and env values; $$ is its escape for one '$'.
    assert container["command"][-1] == "--chat-template=/t/$$(HOME).jinja"
    assert {"name": "HF_HOME", "value": "/x/$$(USER)"} in container["env"]


@pytest.mark.parametrize(
    ("extra", "topology", "message"),
    [
        ("box:\n  gpus: [1]\nserve:\n  tensor_parallel_size: 1\n", "single",
         "box.gpus: [1]; in a pod the device plugin numbers the GPUs it hands over from 0"),
        ("serve:\n  tensor_parallel_size: 1\n", "single",
         "box.gpus lists 2 GPUs but serve.tensor_parallel_size is 1"),
        ("container:\n  group_add: [video, gpuusers]\n", "single",
         "container.group_add: 'gpuusers' has no numeric id for Kubernetes (supplementalGroups takes numbers): set cluster.group_ids.gpuusers"),
        ("container:\n  privileged: true\n", "single",
         "container.privileged: true; a Kubernetes render runs without privilege"),
        ("serve:\n  entrypoint: [/opt/venv/bin/vllm-wrapper]\n", "multinode",
         "serve.entrypoint: ['/opt/venv/bin/vllm-wrapper']; a multinode worker runs headless, which only vLLM's serve command does"),
        ("serve:\n  extra_args: ['--nnodes=4']\n", "multinode",
         "serve.extra_args: --nnodes is set by the multinode render"),
        ("env:\n  NCCL_SOCKET_IFNAME: eth0\ncluster:\n  multinode: {interface: eth1}\n", "multinode",
         "env.NCCL_SOCKET_IFNAME and cluster.multinode.interface both name the interface"),
    ],
)  # fmt: skip
def test_profiles_a_cluster_cannot_run_are_refused_by_name(
    profile_dir: Path, extra: str, topology: str, message: str
) -> None:
    prof = _load(profile_dir, INT4 + extra)
    with pytest.raises(RenderError) as caught:
        k8s.render(prof, topology, 1 if topology == "single" else 2)  # type: ignore[arg-type]
    assert message in caught.value.message
