"""Serves live.json does not name, fast: the runtimes' record of the profile hash a serve was
started from, discovery, `status`/`stop`/`adopt` on them, `switch --resume` refusals, and the
sanity check's early cut-off. A tiny real HTTP serve under the real LocalRuntime stands in for
vLLM; the vLLM versions are tests/e2e/test_switch_journal.py and tests/systemd/."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl import net, state
from paroctl.cli.main import cli
from paroctl.errors import StateError
from paroctl.profile import profiles
from paroctl.serve.runtime import ServeSpec
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import adopt, journal, verify
from paroctl.switch import switch as switch_mod

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
STUB_SERVE = (REPO / "tests" / "test_journal.py").read_text().split('STUB_SERVE = """')[1]
STUB_SERVE = STUB_SERVE.split('"""')[0]


def runtime_for(kind: str, scope: str) -> LocalRuntime:
    assert kind == "local"
    return LocalRuntime()


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[profiles.Profile]:
    """A profiles dir with cpu-demo-alt on a free port (the only profile there); the profile."""
    prof_dir = tmp_path / "profiles"
    prof_dir.mkdir()
    port = net.free_port()
    base = (REPO / "profiles" / "_cpu.yaml").read_text().replace("port: 8123", f"port: {port}")
    (prof_dir / "_cpu.yaml").write_text(base)
    alt = (REPO / "profiles" / "cpu-demo-alt.yaml").read_text()
    (prof_dir / "cpu-demo-alt.yaml").write_text(alt)
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", str(prof_dir))
    profile = profiles.load("cpu-demo-alt")
    assert profile.body.serve.port == port
    yield profile
    LocalRuntime().stop("cpu-demo-alt", grace_s=1)


def start_stub(profile: profiles.Profile, started_hash: str) -> int:
    """A stand-in serve of profile on its port, as `paroctl` would start it (with its hash)."""
    port = profile.body.serve.port
    runtime = LocalRuntime()
    argv = (PY, "-c", STUB_SERVE, str(port), profile.body.model.served_names[0])
    runtime.start(ServeSpec(profile.name, argv, port=port, hash=started_hash))
    deadline = time.monotonic() + 10
    while not net.port_open("127.0.0.1", port):
        assert time.monotonic() < deadline, runtime.log_path(profile.name).read_text()
        time.sleep(0.02)
    pid = runtime.main_pid(profile.name)
    assert pid is not None
    return pid


# --- the sanity check (pure) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expect", "text", "passes"),
    [
        ("cold", " Cold", True),  # plain: case-insensitive substring
        ("cold", " warm.", False),
        (r"re:\bcold\b", " cold", True),  # the one-token answer the CPU profiles budget for
        (r"re:\bcold\b", " coldness", False),
        (r"re:^\s*(yes|no)\b", " yes,", True),
    ],
)
def test_sanity_check(expect: str, text: str, passes: bool) -> None:
    assert verify.sanity_passes(expect, text) is passes


# --- the runtimes' record of what a serve was started from --------------------------------------


def test_local_runtime_records_the_hash_a_serve_was_started_from(box: profiles.Profile) -> None:
    runtime = LocalRuntime()
    assert runtime.running_hash(box.name) is None
    start_stub(box, box.hash)
    assert runtime.running_hash(box.name) == box.hash
    runtime.stop(box.name, grace_s=1)
    assert runtime.running_hash(box.name) is None  # a record of a dead serve proves nothing


# --- discovery and the commands on it -----------------------------------------------------------


def test_discover_finds_a_running_serve_and_whether_it_is_the_profile_as_it_is(
    box: profiles.Profile,
) -> None:
    assert adopt.discover(runtime_for) == []
    pid = start_stub(box, box.hash)
    (found,) = adopt.discover(runtime_for)
    assert (found.profile.name, found.pid, found.healthy, found.served_names) == (
        box.name,
        pid,
        True,
        ("smollm2-alt",),
    )
    assert found.current
    assert found.as_live().serve.port == box.body.serve.port
    LocalRuntime().stop(box.name, grace_s=1)
    start_stub(box, "0ld0ld0ld0ld")
    (older,) = adopt.discover(runtime_for)
    assert not older.current
    assert "started from an older version of the profile (hash 0ld0ld0ld0ld)" in older.describe()


def test_status_reports_an_untracked_serve_and_stop_stops_it(box: profiles.Profile) -> None:
    pid = start_stub(box, box.hash)
    port = box.body.serve.port
    status = CliRunner().invoke(cli, ["status"])
    assert status.exit_code == 0, status.output
    assert status.output.splitlines() == [
        f"serving: cpu-demo-alt (local, pid {pid}) at http://127.0.0.1:{port}, health ok, "
        "serves smollm2-alt; started from the profile as it is now; not recorded as live",
        "         `paroctl adopt cpu-demo-alt` verifies and records it; `paroctl stop` stops it",
    ]
    stop = CliRunner().invoke(cli, ["stop"])
    assert stop.exit_code == 0, stop.output
    assert "cpu-demo-alt stopped (it ran without being recorded as live)" in stop.output
    assert not net.port_open("127.0.0.1", port) and not LocalRuntime().is_active(box.name)
    assert (
        CliRunner().invoke(cli, ["status"]).output == "live: nothing (run `paroctl switch NAME`)\n"
    )


def test_adopt_refuses_a_serve_started_from_another_version(box: profiles.Profile) -> None:
    start_stub(box, "0ld0ld0ld0ld")
    result = CliRunner().invoke(cli, ["adopt", "cpu-demo-alt"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "the running cpu-demo-alt was started from an older version of the profile" in message
    assert "`paroctl switch cpu-demo-alt` restarts it as the profile says" in message
    assert state.read_live() is None


def test_adopt_refuses_a_serve_that_does_not_verify(box: profiles.Profile) -> None:
    # The stand-in answers /health and /v1/models but writes no vLLM log and cannot complete:
    # adoption runs the boot's own checks and must not record it.
    start_stub(box, box.hash)
    result = CliRunner().invoke(cli, ["adopt", "cpu-demo-alt", "--timeout", "5"])
    assert result.exit_code == 2, result.output
    assert "runs but does not verify as its profile" in " ".join(result.output.split())
    assert state.read_live() is None
    assert LocalRuntime().is_active(box.name)  # adoption starts and stops nothing


def test_adopt_of_nothing_running_says_how_to_start_it(box: profiles.Profile) -> None:
    result = CliRunner().invoke(cli, ["adopt", "cpu-demo-alt"])
    assert result.exit_code == 2, result.output
    assert "cpu-demo-alt is not running under its runtime (local)" in result.output


def test_resume_without_an_interrupted_switch_is_a_clear_error(box: profiles.Profile) -> None:
    result = CliRunner().invoke(cli, ["switch", "--resume"])
    assert result.exit_code == 2, result.output
    assert "no interrupted switch to resume" in result.output
    both = CliRunner().invoke(cli, ["switch", "cpu-demo-alt", "--resume"])
    assert both.exit_code == 2 and "give a profile NAME, or --resume" in both.output
    neither = CliRunner().invoke(cli, ["switch"])
    assert neither.exit_code == 2 and "give a profile NAME, or --resume" in neither.output


def test_resume_leaves_a_running_switch_alone(box: profiles.Profile) -> None:
    jr = journal.Journal.begin(None, "cpu-demo-alt")  # owned by this (live) process
    try:
        with pytest.raises(StateError, match="the switch is still running"):
            switch_mod.resume(switch_mod.default_deps(), load_profile=profiles.load)
    finally:
        jr.clear()


def test_switch_dry_run_plans_to_take_or_replace_an_untracked_serve(
    box: profiles.Profile,
) -> None:
    start_stub(box, box.hash)
    plan = CliRunner().invoke(cli, ["switch", "cpu-demo-alt", "--dry-run"])
    assert plan.exit_code == 0, plan.output
    lines = plan.output.splitlines()
    assert lines[1].startswith("running but not recorded as live: cpu-demo-alt (local, pid ")
    assert lines[2] == (
        "verify cpu-demo-alt where it runs and record it as live; if it does not verify, stop "
        "it and boot it as below"
    )
    assert lines[3] == f"live: cpu-demo-alt (local, http://127.0.0.1:{box.body.serve.port})"
    assert LocalRuntime().is_active(box.name) and state.read_live() is None  # changed nothing
