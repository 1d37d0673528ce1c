"""One serve plan per operation (STYLE.md 16): every render, install and cluster render derives a
profile's layout, env and argv exactly once, and everything below reads that plan."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.profile import profiles
from paroctl.serve import engine, k8s, plan, render
from paroctl.serve.plan import ServePlan, plan_for
from paroctl.serve.runtime import systemd

# cpu-demo: no engine; paro-int4: podman, GPUs, secrets, groups; cpu-demo-docker: docker, CPU.
NAMES = ("cpu-demo", "paro-int4", "cpu-demo-docker")


@pytest.fixture
def derivations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count ServePlan.of and the derivations it runs (layout, env, argv)."""
    seen: Counter[str] = Counter()
    original_of = ServePlan.of.__func__  # type: ignore[attr-defined]

    def counted_of(cls: type[ServePlan], *args: object, **kwargs: object) -> ServePlan:
        seen["ServePlan.of"] += 1
        return original_of(cls, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(ServePlan, "of", classmethod(counted_of))
    for name in ("layout", "forwarded_env", "serve_argv", "container_flags"):
        monkeypatch.setattr(plan, name, _counting(seen, name, getattr(plan, name)))
    yield seen


def _counting(seen: Counter[str], name: str, fn: Callable[..., object]) -> Callable[..., object]:
    def wrapper(*args: object, **kwargs: object) -> object:
        seen[name] += 1
        return fn(*args, **kwargs)

    return wrapper


ONCE = {"ServePlan.of": 1, "layout": 1, "forwarded_env": 1, "serve_argv": 1, "container_flags": 1}


@pytest.mark.parametrize("name", NAMES)
def test_one_install_plan_derives_once(
    name: str, derivations: Counter[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path))
    prof = profiles.load(name)
    derivations.clear()
    systemd.install_plan(prof, "service", reload=False)
    # Before the plan (2026-12-06, HEAD 9a556e4) one install_plan derived the layout 6 times
    # (paro-int4; 5 for cpu-demo) and the serve argv twice.
    assert dict(derivations) == ONCE


# `unit install` checks the secrets file first: paro-int4's is absent here, so it is not installed.
UNIT_COMMANDS = [
    *((["unit", "render"], name) for name in NAMES),
    *((["unit", "install", "--dry-run"], name) for name in NAMES if name != "paro-int4"),
    (["unit", "diff"], "cpu-demo-docker"),
]


@pytest.mark.parametrize(("args", "name"), UNIT_COMMANDS)
def test_one_unit_command_derives_once(
    args: list[str],
    name: str,
    derivations: Counter[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path))
    done = CliRunner().invoke(cli, [*args, name])
    assert done.exit_code == 0, done.output
    # Before: `unit render paro-int4` derived the layout 9 times, the serve argv 4 times.
    assert dict(derivations) == ONCE


@pytest.mark.parametrize("topology", k8s.TOPOLOGIES)
def test_one_cluster_render_derives_once(topology: str, derivations: Counter[str]) -> None:
    prof = profiles.load("paro-int4")
    derivations.clear()
    k8s.render(prof, topology, 1 if topology == "single" else 2)  # type: ignore[arg-type]
    assert dict(derivations) == ONCE


def test_profile_show_derives_once(derivations: Counter[str]) -> None:
    done = CliRunner().invoke(cli, ["profile", "show", "paro-int4"])
    assert done.exit_code == 0, done.output
    assert dict(derivations) == ONCE


def test_the_plan_is_frozen_and_holds_the_served_profile() -> None:
    served = plan_for(profiles.load("cpu-demo"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        served.argv = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        served.env["X"] = "1"  # type: ignore[index]
    assert served.cpu is not None and served.profile.body.serve.dtype == served.cpu.dtype
    assert ServePlan.of(profiles.load("paro-int4")).cpu is None  # not asked: no CPU decision


@pytest.mark.parametrize("name", NAMES)
def test_the_switchs_profile_wrappers_agree_with_the_plan(name: str) -> None:
    prof = profiles.load(name)
    the_plan = ServePlan.of(prof)
    assert engine.layout(prof) == the_plan.layout
    assert engine.serve_argv(prof) == list(the_plan.argv)
    assert engine.forwarded_env(prof) == dict(the_plan.env)
    if prof.uses_engine:
        assert engine.run_argv(prof) == engine.run_command(the_plan)
    assert render.render(prof, "env") == render.artefact(the_plan, "env")
    spec = engine.serve_spec(the_plan)
    assert list(spec.argv) == engine.exec_argv(the_plan)
    assert dict(spec.env) == ({} if prof.uses_engine else dict(the_plan.env))


def test_container_flags_are_built_once_in_two_layouts() -> None:
    flags = ServePlan.of(profiles.load("paro-int4")).container
    # The .service runs them in this order; Quadlet's PodmanArgs= holds the same flags less the
    # devices and no-new-privileges (AddDevice=, NoNewPrivileges=), in the shipped units' order.
    run, quadlet = flags.run_args(), flags.podman_args()
    assert sorted(quadlet) == sorted(f for f in run if f not in flags.isolation)
    assert "--device" in run and "--device" not in quadlet
