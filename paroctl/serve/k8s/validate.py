"""Offline schema checks of rendered manifests: kubernetes-validate's strict core schemas (they
ship inside its wheel: no network) and paroctl's LeaderWorkerSet subset through jsonschema.

Both libraries are the `k8s` extra (and dev dependencies); the renderer itself needs neither.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from paroctl.errors import ParoctlError

Doc = dict[str, Any]
SCHEMAS = Path(__file__).resolve().parent / "schemas"
LWS_KIND = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
DEFAULT_VERSION = "1.33"


class MissingValidator(ParoctlError):
    """kubernetes-validate / jsonschema are not installed."""


def problems(docs: Iterable[Doc], k8s_version: str = DEFAULT_VERSION) -> list[str]:
    """Every schema problem of these documents; a kind without a schema is a problem too."""
    unsupported = version_problem(k8s_version)
    if unsupported:
        return [unsupported]
    out: list[str] = []
    for doc in docs:
        where = f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"
        if (doc.get("apiVersion"), doc.get("kind")) == LWS_KIND:
            out += [f"{where}: {p}" for p in lws_problems(doc)]
            for role, template in _lws_templates(doc):
                # The pod templates are core PodTemplateSpecs: the real schema checks them.
                wrapped = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": role},
                    "template": template,
                }
                out += [f"{where} {role}Template: {p}" for p in core_problems(wrapped, k8s_version)]
        else:
            out += [f"{where}: {p}" for p in core_problems(doc, k8s_version)]
    return out


def version_problem(k8s_version: str) -> str | None:
    """Why kubernetes-validate cannot check this Kubernetes version (None when it can)."""
    kv = _kubernetes_validate()
    have = sorted({kv.major_minor(v) for v in kv.all_versions()}, key=lambda v: int(v[2:]))
    if kv.major_minor(k8s_version) in have:
        return None
    return (
        f"kubernetes-validate {kv.__version__} has no schemas for Kubernetes {k8s_version} "
        f"(it has {have[0]} to {have[-1]})"
    )


def core_problems(doc: Doc, k8s_version: str) -> list[str]:
    """A core-kind document against kubernetes-validate's strict schema for that version."""
    kv = _kubernetes_validate()
    try:
        kv.validate(doc, k8s_version, strict=True)
    except kv.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path) or '(top level)'}: {exc.message}"]
    except (kv.SchemaNotFoundError, kv.VersionNotSupportedError) as exc:
        return [str(exc.message)]
    return []


def lws_problems(doc: Doc) -> list[str]:
    """A LeaderWorkerSet against the subset schema (additionalProperties false throughout)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(lws_schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    return [f"{'.'.join(str(p) for p in e.path) or '(top level)'}: {e.message}" for e in errors]


@functools.cache
def lws_schema() -> dict[str, Any]:
    """paroctl's LeaderWorkerSet subset schema."""
    schema: dict[str, Any] = json.loads((SCHEMAS / "leaderworkerset-v1.json").read_text())
    return schema


def _lws_templates(doc: Doc) -> list[tuple[str, Doc]]:
    group = (doc.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return [(r, group[f"{r}Template"]) for r in ("leader", "worker") if f"{r}Template" in group]


def _kubernetes_validate() -> Any:
    try:
        from kubernetes_validate import utils
    except ImportError as exc:
        raise MissingValidator(
            "schema validation needs kubernetes-validate, a paroctl dependency: reinstall paroctl "
            "(`pip install -e .`) or `pip install kubernetes-validate==1.37.0 jsonschema`"
        ) from exc
    return utils
