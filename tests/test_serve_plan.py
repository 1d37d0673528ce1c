"""One serve plan per operation (STYLE.md 16): every render, install and cluster render derives a
profile's layout, env and argv exactly once, and everything below reads that plan."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import standin_serve
from click.testing import CliRunner

from paroctl import net
from paroctl.cli.main import cli
from paroctl.profile import profiles
from paroctl.serve import engine, k8s, plan, render
from paroctl.serve.plan import ServePlan, plan_for
from paroctl.serve.runtime import ServeSpec, systemd
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import switch
from paroctl.switch.record import Deps

REPO = Path(__file__).resolve().parents[1]

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
    systemd.plan_install(plan_for(prof), "service", reload=False)
    # Before the plan (2026-12-06, HEAD 9a556e4) one install (then install_plan) derived the layout 6 times
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
    assert done.exit_code == (1 if args == ["unit", "diff"] else 0), done.output  # not installed
    # Before: `unit render paro-int4` derived the layout 9 times, the serve argv 4 times.
    assert dict(derivations) == ONCE


@pytest.mark.parametrize("topology", k8s.TOPOLOGIES)
def test_one_cluster_render_derives_once(topology: str, derivations: Counter[str]) -> None:
    prof = profiles.load("paro-int4")
    derivations.clear()
    k8s.render(prof, topology, 1 if topology == "single" else 2)  # type: ignore[arg-type]
    assert dict(derivations) == ONCE


def test_switch_dry_run_derives_once(derivations: Counter[str]) -> None:
    done = CliRunner().invoke(cli, ["switch", "--dry-run", "cpu-demo"])
    assert done.exit_code == 0, done.output
    # Before: 3 (the layout, then the spec's argv and env).
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
def test_the_serve_spec_and_the_one_call_render_read_the_plan(name: str) -> None:
    prof = profiles.load(name)
    the_plan = ServePlan.of(prof)
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


# --- one switch, one plan ------------------------------------------------------------------------


class StandinRuntime(LocalRuntime):
    """The local runtime, starting a stand-in vLLM (tests/standin_serve.py) in the place of the
    spec's vLLM command line: it answers what the switch's verification asks (/health, /v1/models,
    /load, a " cold" completion) and logs what it reads (the boot phases, load tracking, the dtype
    it was started with and the reserved cores its env names)."""

    def start(self, spec: ServeSpec) -> None:
        """Start the stand-in with the spec's port, served name, dtype and environment."""
        standin = standin_serve.command(spec.argv, spec.port)
        super().start(dataclasses.replace(spec, argv=standin))


def test_one_switch_derives_the_targets_plan_once(
    derivations: Counter[str],
    profile_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    deadline: Callable[[float], AbstractContextManager[None]],
) -> None:
    """A whole switch on the local runtime (lock, recovery, discovery, CPU decision, env file,
    start, verification, record): the target's layout, env and argv are derived exactly once."""
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PAROCTL_CPU_FLAGS", "avx2")
    text = (REPO / "profiles" / "cpu-demo.yaml").read_text()
    (profile_dir / "cpu-demo.yaml").write_text(text + f"serve:\n  port: {net.free_port()}\n")
    target = profiles.load("cpu-demo")
    deps = Deps(runtime_for=lambda kind, scope: StandinRuntime())
    derivations.clear()
    try:
        with deadline(60):
            record = switch.switch(target, deps, load_profile=profiles.load)
    finally:
        LocalRuntime().stop("cpu-demo", grace_s=1)
    assert record.serve.profile == "cpu-demo" and record.kv_tokens == 1024
    assert record.cpu is not None and record.drain == "load"
    # Before (2026-12-06, HEAD 28610d3, paroctl as at f0815df): one switch derived the target's
    # plan 9 times through the profile-taking wrappers: boot's layout, the env file's render and
    # its path, the model-info seed, the spec's argv and env, the model-info keep, the record's
    # argv and cache dir.
    assert dict(derivations) == ONCE
