"""Kubernetes manifests (single node: a Deployment; multi-node: a LeaderWorkerSet) from the same
serve plan (argv, env) as the systemd and Quadlet renders."""

from __future__ import annotations

from paroctl.errors import RenderError
from paroctl.profile.profiles import Profile
from paroctl.serve.k8s import image, manifests, semantic
from paroctl.serve.k8s.manifests import Manifest
from paroctl.serve.k8s.serve import TOPOLOGIES, Serve, Topology, derive, refuse
from paroctl.serve.plan import ServePlan

__all__ = ["TOPOLOGIES", "Manifest", "Serve", "Topology", "derive", "render"]


def render(
    profile: Profile, topology: Topology, nodes: int, facts: image.ImageFacts | None = None
) -> tuple[Manifest, image.Choice]:
    """Render a profile for a cluster; refuse (RenderError) a render that breaks a semantic rule."""
    refuse(profile, topology, nodes)
    choice = image.choose(profile, facts)
    plan = ServePlan.of(profile)
    serve = derive(plan, topology, nodes, choice.ref)
    manifest = manifests.build(serve)
    found = semantic.problems(plan, serve, manifest.documents)
    if found:
        raise RenderError(f"{profile.path}: the {topology} render breaks: " + "; ".join(found))
    return manifest, choice
