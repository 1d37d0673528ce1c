"""Shared pieces of the Kubernetes render tests: every shipped profile x topology, and how a case
is expected to end (rendered, or refused with a message naming why)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import k8s
from paroctl.serve.k8s import Manifest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
NODES = {"single": 1, "multinode": 2}


def refusal(name: str, topology: str) -> str | None:
    """Why a shipped profile has no render in this topology (None: it renders)."""
    prof = profiles.load(name)
    if not prof.uses_engine:
        return "a Kubernetes render needs a container image"
    if topology == "multinode" and prof.body.box.accelerator == "cpu":
        return "box.accelerator: cpu; a multinode render"
    return None


CASES = [(name, topology) for name in profiles.list_names() for topology in k8s.TOPOLOGIES]
RENDERED = [case for case in CASES if refusal(*case) is None]


@functools.cache
def _render(name: str, topology: str) -> Manifest:
    return k8s.render(profiles.load(name), topology, NODES[topology])[0]  # type: ignore[arg-type]


@pytest.fixture
def rendered(fixed_paths: None) -> dict[tuple[str, str], Manifest]:
    """Every renderable shipped profile x topology, rendered once per session at fixed paths."""
    return {case: _render(*case) for case in RENDERED}
