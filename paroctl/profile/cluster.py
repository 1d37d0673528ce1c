"""The `cluster:` profile section: what only a Kubernetes render needs, validated like the rest.

A profile without the section renders with the defaults below (the box's own directories as
hostPath volumes, no namespace, no node selector). The section never changes the profile hash:
where a serve runs is not what it serves.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from paroctl.profile import checks

# RFC 1123 names (namespaces, claims, storage classes, Secrets) and label keys/values, as the API
# server checks them: a render the server would refuse is refused here, naming the key.
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
# Kubernetes resource quantities: CPU in cores or millicores, memory/storage with a binary suffix.
_CPU = r"^([1-9][0-9]{0,3}|[1-9][0-9]{0,6}m)$"
_BYTES = r"^[1-9][0-9]{0,6}(Mi|Gi|Ti)$"
# A Linux interface name: at most 15 characters, no '/' or whitespace.
_IFNAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$"

DnsLabel = Annotated[str, Field(pattern=_DNS_LABEL)]
DnsName = Annotated[str, Field(pattern=_DNS_NAME)]
LabelValue = Annotated[str, Field(pattern=_LABEL_VALUE)]
Bytes = Annotated[str, Field(pattern=_BYTES)]
Gid = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)]
HostDir = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(checks.mount_path)]


def label_key(value: str) -> str:
    """A label or node-selector key: an optional DNS-name prefix, '/', a 63-character name."""
    prefix, _, name = value.rpartition("/")
    if (prefix and not re.fullmatch(_DNS_NAME, prefix)) or not _LABEL_NAME.fullmatch(name):
        raise ValueError("expected a label key such as kubernetes.io/hostname or gpu-node")
    return value


LabelKey = Annotated[str, Field(max_length=317), AfterValidator(label_key)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Storage(_Strict):
    """A volume source: a node directory, an existing claim, or a claim paroctl renders."""

    host_path: HostDir | None = None
    claim: DnsName | None = None
    storage_class: DnsName | None = None
    size: Bytes | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Storage:
        given = [k for k in ("host_path", "claim", "storage_class") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                f"set exactly one of host_path, claim, storage_class (got {given or 'none'})"
            )
        if self.storage_class and not self.size:
            raise ValueError("storage_class needs size (the claim paroctl renders, e.g. 500Gi)")
        if self.size and not self.storage_class:
            raise ValueError("size only sizes a claim paroctl renders (with storage_class)")
        return self


class Toleration(_Strict):
    """One pod toleration (the taints GPU nodes commonly carry)."""

    key: LabelKey | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _value_matches_operator(self) -> Toleration:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("operator Exists takes no value")
        if self.operator == "Equal" and self.key is None:
            raise ValueError("operator Equal needs a key")
        return self


class Resources(_Strict):
    """CPU and memory of each serve pod (requests == limits: the pod is Guaranteed, not evicted)."""

    cpu: Annotated[str, Field(pattern=_CPU)] = "8"
    memory: Bytes = "64Gi"


class Multinode(_Strict):
    """What only a LeaderWorkerSet render uses."""

    # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: the interface the nodes reach each other on. Unset,
    # NCCL and Gloo pick one themselves (on a node with several NICs, often the wrong one).
    interface: Annotated[str, Field(pattern=_IFNAME)] | None = None
    master_port: Annotated[int, Field(ge=1024, le=65535, strict=True)] = 29500


class Cluster(_Strict):
    """The `cluster:` section of a profile."""

    namespace: DnsLabel | None = None
    models: Storage | None = None  # None: box.models_dir on the node
    cache: Storage | None = None  # None: box.cache_root on the node
    node_selector: dict[LabelKey, LabelValue] = Field({}, max_length=32)
    tolerations: tuple[Toleration, ...] = Field((), max_length=32)
    resources: Resources = Resources()
    # The Secret holding container.secret_names (one key per name); never rendered inline.
    secret: DnsName = "paroctl-secrets"
    # Numeric ids of container.group_add's names on the nodes (supplementalGroups takes numbers).
    # video is base-passwd's fixed 44 on Debian/Ubuntu; render is allocated when the node is
    # installed (`getent group render`): 110 is the Ubuntu ROCm hosts' common value, not a rule.
    group_ids: dict[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")], Gid] = Field(
        {"video": 44, "render": 110}, max_length=32
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    multinode: Multinode = Multinode()
