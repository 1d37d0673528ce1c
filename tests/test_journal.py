"""The switch journal and its recovery, fast: file format, atomicity, owner liveness (real
processes), and status/stop/switch --dry-run acting on a stranded serve (a tiny real HTTP serve
under the real LocalRuntime; the vLLM version of this is tests/e2e/test_switch_journal.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from paroctl import net, state
from paroctl.cli import serve as serve_cli
from paroctl.cli.main import cli
from paroctl.errors import StateError
from paroctl.events import Event
from paroctl.procfs import read_proc
from paroctl.records import LiveRecord, ServeRef
from paroctl.serve.runtime import ServeSpec
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import journal, recovery

PY = sys.executable
# Answers /health and /v1/models like a vLLM serve would; nothing else.
STUB_SERVE = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path in ("/health", "/v1/models")
        body = json.dumps({"data": [{"id": sys.argv[2]}]}).encode() if ok else b""
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def dead_owner() -> journal.Owner:
    """The identity of a paroctl-like process that has exited (its pid is free or reused)."""
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    info = read_proc(child.pid)
    assert info is not None
    owner = journal.Owner(
        child.pid, info.start_ticks, journal.me().host_boot, (PY, "-c", "import time")
    )
    child.kill()
    child.wait()
    return owner


@dataclass(frozen=True)
class Stub:
    """The stub serve a killed switch left: what the journal names, and its main pid."""

    ref: ServeRef
    pid: int | None


def entry(step: str, serve: Stub | None, owner: journal.Owner) -> journal.Entry:
    return journal.Entry(
        boot_id="b00710000001",
        from_profile="cpu-demo",
        from_hash="aaaa",
        to_profile="cpu-demo-alt",
        owner=owner,
        step=step,
        serve=None if serve is None else serve.ref,
        pid=None if serve is None else serve.pid,
        started_at="2026-12-01T12:00:00.000+00:00",
        updated_at="2026-12-01T12:00:01.000+00:00",
    )


@pytest.fixture
def stub() -> Iterator[Stub]:
    """A real serve under LocalRuntime in PAROCTL_HOME/runs, as a killed switch would leave it."""
    port = net.free_port()
    runtime = LocalRuntime()
    name = "cpu-demo-alt"
    runtime.start(ServeSpec(name, (PY, "-c", STUB_SERVE, str(port), "smollm2-alt"), port=port))
    deadline = time.monotonic() + 10
    while not net.port_open("127.0.0.1", port):
        assert time.monotonic() < deadline, runtime.log_path(name).read_text()
        time.sleep(0.02)
    pid = runtime.main_pid(name)
    ref = ServeRef(profile=name, hash="bbbb", runtime="local", scope="system",
                   host="127.0.0.1", port=port, served_names=("smollm2-alt",), grace_s=5)  # fmt: skip
    yield Stub(ref, pid)
    runtime.stop(name, grace_s=1)


# --- the file ------------------------------------------------------------------------------------


def test_begin_step_clear_round_trip(isolated_home: Path) -> None:
    jr = journal.Journal.begin(None, "cpu-demo")
    assert jr.entry.step == "old-gone" and jr.entry.serve is None
    assert journal.read() == jr.entry
    assert jr.entry.owner == journal.me()
    serve = ServeRef(profile="cpu-demo", hash="h", runtime="local", scope="system",
                     host="127.0.0.1", port=8123, served_names=("smollm2-demo",), grace_s=30)  # fmt: skip
    jr.step("starting", serve=serve)
    jr.step("starting", pid=4242)
    jr.step("verifying")
    on_disk = json.loads(journal.path().read_text())
    assert on_disk["step"] == "verifying" and on_disk["serve"]["pid"] == 4242
    assert on_disk["to_profile"] == "cpu-demo" and on_disk["owner"]["pid"] == os.getpid()
    assert journal.read() == jr.entry
    # Nothing but the journal itself in the directory: no temp file survives a write.
    assert sorted(p.name for p in isolated_home.iterdir()) == ["journal.json"]
    jr.clear()
    assert journal.read() is None
    jr.clear()  # idempotent


def test_begin_from_live_records_the_old_serve_being_stopped() -> None:
    live = {"profile": "cpu-demo", "hash": "aaaa", "runtime": "local", "scope": "system",
            "host": "0.0.0.0", "port": 8123, "served_names": ["smollm2-demo"], "grace_s": 30}  # fmt: skip
    jr = journal.Journal.begin(LiveRecord.from_dict(live), "cpu-demo-alt")
    assert (jr.entry.step, jr.entry.from_profile, jr.entry.from_hash) == (
        "stopping-old",
        "cpu-demo",
        "aaaa",
    )
    assert jr.entry.serve == ServeRef(profile="cpu-demo", hash="aaaa", runtime="local",
                                      scope="system", host="0.0.0.0", port=8123,
                                      served_names=("smollm2-demo",), grace_s=30.0)  # fmt: skip
    old_boot = jr.boot_id
    jr.step("rolling-back", serve=None, boot_id=journal.new_boot_id(), rolling_back=True)
    assert journal.read() == jr.entry and jr.boot_id != old_boot and jr.entry.rolling_back


def test_write_is_atomic_and_fsynced(monkeypatch: pytest.MonkeyPatch) -> None:
    first = journal.Journal.begin(None, "cpu-demo").entry
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    journal.write(replace(first, step="starting"))
    assert len(synced) == 2  # the file, then its directory entry

    def torn(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", torn)
    with pytest.raises(StateError, match=r"^cannot write .*/journal.json: disk full$"):
        journal.write(replace(first, step="verifying"))
    assert journal.read() == replace(first, step="starting")  # the old entry, whole
    assert [p.name for p in journal.path().parent.iterdir()] == ["journal.json"]


def test_unreadable_or_foreign_journal_is_a_clear_error() -> None:
    journal.path().parent.mkdir(parents=True)
    journal.path().write_text("{not json")
    with pytest.raises(
        StateError, match=r"journal.json: damaged: not JSON .*`paroctl repair` moves it aside"
    ):
        journal.read()
    journal.path().write_text(json.dumps({"version": 99}))
    with pytest.raises(StateError, match=r"not a journal entry .version 99, expected 1"):
        journal.read()
    bad_step = entry("old-gone", None, journal.me()).as_dict() | {"step": "dancing"}
    journal.path().write_text(json.dumps(bad_step))
    with pytest.raises(StateError, match="unknown step 'dancing'"):
        journal.read()
    with pytest.raises(ValueError, match="unknown journal step"):
        journal.Journal(entry("old-gone", None, journal.me())).step("dancing")


def _serve_entry() -> dict[str, object]:
    ref = ServeRef(profile="cpu-demo-alt", hash="bbbb", runtime="local", scope="system",
                   host="127.0.0.1", port=8123, served_names=("smollm2-alt",), grace_s=5)  # fmt: skip
    return json.loads(json.dumps(entry("starting", Stub(ref, 4242), journal.me()).as_dict()))


@pytest.mark.parametrize(
    "change,problem",
    [
        (lambda d: [d], "expected a JSON object, got list"),
        (lambda d: "starting", "expected a JSON object, got str"),
        (lambda d: d | {"to_profile": "../x"}, "to_profile: '../x' is not a profile name"),
        (lambda d: d | {"from_profile": "A/B"}, "from_profile: 'A/B' is not a profile name"),
        (lambda d: d | {"boot_id": 7}, "boot_id: unexpected value '7'"),
        (lambda d: d | {"rolling_back": "no"}, "rolling_back: unexpected value 'no'"),
        (lambda d: d | {"owner": {**d["owner"], "cmdline": "paroctl"}}, "owner.cmdline: unexp"),
        (lambda d: d | {"owner": {**d["owner"], "pid": True}}, "owner.pid: unexpected value"),
        (lambda d: d | {"serve": {**d["serve"], "profile": "../x"}}, "serve.profile: '../x'"),
        (lambda d: d | {"serve": {**d["serve"], "runtime": "k8s"}}, "serve.runtime: 'k8s' is"),
        (lambda d: d | {"serve": {**d["serve"], "pid": -3}}, "serve.pid: unexpected value '-3'"),
        (lambda d: d | {"serve": {**d["serve"], "grace_s": "30"}}, "serve.grace_s: unexpected"),
        (lambda d: {k: v for k, v in d.items() if k != "owner"}, "owner: missing"),
    ],
)
def test_an_entry_the_switch_did_not_write_is_named_precisely(change, problem) -> None:  # type: ignore[no-untyped-def]
    sound = _serve_entry()
    assert journal.entry_problem(sound) is None
    assert journal.entry_problem(change(json.loads(json.dumps(sound)))).startswith(problem)


# --- the owner: alive, dead, or its pid reused -----------------------------------------------------


def test_owner_alive_is_this_very_process() -> None:
    assert journal.owner_alive(journal.me())


def test_dead_owner_is_detected() -> None:
    assert not journal.owner_alive(dead_owner())


def test_reused_pid_is_not_the_owner() -> None:
    me = journal.me()
    # The kernel gave the dead paroctl's pid to another process: start time or cmdline differ.
    assert not journal.owner_alive(replace(me, start_ticks=me.start_ticks - 1))
    assert not journal.owner_alive(replace(me, cmdline=("/usr/bin/paroctl", "switch", "x")))
    assert not journal.owner_alive(replace(me, host_boot="another-boot"))


def test_zombie_owner_is_dead() -> None:
    child = subprocess.Popen([PY, "-c", "pass"])
    deadline = time.monotonic() + 10
    while (info := read_proc(child.pid)) is not None and info.state != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert info is not None  # not reaped yet: a zombie holding its pid
    owner = journal.Owner(child.pid, info.start_ticks, journal.me().host_boot, ())
    assert not journal.owner_alive(owner)
    child.wait()


# --- recovery against a real (tiny) serve ---------------------------------------------------------


def runtime_for(kind: str, scope: str) -> LocalRuntime:
    assert kind == "local"
    return LocalRuntime()


def test_inspect_reports_what_the_stranded_serve_does(stub: Stub) -> None:
    journal.write(entry("verifying", stub, dead_owner()))
    seen = recovery.inspect(runtime_for)
    assert seen is not None
    assert (seen.owner_alive, seen.active, seen.pid, seen.healthy, seen.served_names) == (
        False,
        True,
        stub.pid,
        True,
        ("smollm2-alt",),
    )
    assert not seen.finished


def test_status_names_the_stranded_serve_exactly(stub: Stub) -> None:
    owner = dead_owner()
    journal.write(entry("verifying", stub, owner))
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"switch:  INTERRUPTED (paroctl pid {owner.pid} is gone): cpu-demo -> cpu-demo-alt, "
        f"step verifying; journal {journal.path()}",
        f"serving: cpu-demo-alt (local, pid {stub.pid}) at http://127.0.0.1:{stub.ref.port}, "
        "health ok, serves smollm2-alt; not recorded as live",
        "         `paroctl switch --resume` finishes the switch; `paroctl stop` stops it; "
        "`paroctl switch NAME` stops it first",
        "live: nothing (run `paroctl switch NAME`)",
    ]


def test_status_of_a_switch_in_progress_and_of_a_gap(stub: Stub) -> None:
    journal.write(entry("starting", stub, journal.me()))
    out = CliRunner().invoke(cli, ["status"]).output
    assert out.splitlines()[0] == (
        f"switch:  in progress (paroctl pid {os.getpid()}): cpu-demo -> cpu-demo-alt, step starting"
    )
    journal.write(entry("old-gone", None, dead_owner()))
    out = CliRunner().invoke(cli, ["status"]).output
    assert out.splitlines()[1] == (
        "serving: nothing (the old serve was stopped, the new one not started)"
    )


def test_stop_stops_the_stranded_serve_through_its_runtime(stub: Stub) -> None:
    journal.write(entry("starting", stub, dead_owner()))
    dry = CliRunner().invoke(cli, ["stop", "--dry-run"])
    assert dry.output == (
        f"interrupted switch cpu-demo -> cpu-demo-alt (paroctl pid {journal.read().owner.pid}), "  # type: ignore[union-attr]
        f"step starting: stop cpu-demo-alt (local) through its runtime, wait until "
        f"127.0.0.1:{stub.ref.port} is closed; clear {journal.path()}\n"
    )
    assert journal.read() is not None and LocalRuntime().is_active(stub.ref.profile)
    result = CliRunner().invoke(cli, ["stop"])
    assert result.exit_code == 0, result.output
    assert result.output.endswith("cpu-demo-alt stopped (left running by an interrupted switch)\n")
    assert journal.read() is None
    assert not net.port_open("127.0.0.1", stub.ref.port)
    assert not LocalRuntime().is_active(stub.ref.profile)
    assert stub.pid is not None
    gone = read_proc(stub.pid)
    assert gone is None or gone.state == "Z"  # a zombie only because this test is its parent
    assert CliRunner().invoke(cli, ["stop"]).output.endswith("nothing is live\n")


def test_killed_while_stopping_old_clears_the_live_pointer_it_stops(stub: Stub) -> None:
    live = {"profile": stub.ref.profile, "hash": stub.ref.hash, "runtime": "local", "scope": "system",
            "host": stub.ref.host, "port": stub.ref.port, "served_names": list(stub.ref.served_names)}  # fmt: skip
    state.write_live(LiveRecord.from_dict(live))
    journal.write(entry("stopping-old", stub, dead_owner()))
    warnings: list[Event] = []
    settled = recovery.recover(runtime_for, warnings.append)
    assert settled is not None and settled.from_profile == "cpu-demo"
    assert "left cpu-demo-alt (local) untracked; stopping it" in warnings[0].message
    assert state.read_live() is None and journal.read() is None
    assert not LocalRuntime().is_active(stub.ref.profile)


@pytest.mark.parametrize("step", ["verifying", "recorded"])  # "recorded": an older paroctl's
def test_killed_after_recording_keeps_the_verified_serve(stub: Stub, step: str) -> None:
    done = entry(step, stub, dead_owner())
    state.write_live(LiveRecord.from_dict({"profile": stub.ref.profile, "boot_id": done.boot_id,
                                           "host": stub.ref.host, "port": stub.ref.port}))  # fmt: skip
    journal.write(done)
    out = CliRunner().invoke(cli, ["switch", "cpu-demo-alt", "--dry-run"]).output
    assert ": it had finished; clear " in out.splitlines()[1]
    assert out.splitlines()[2].startswith("live: cpu-demo-alt")
    recovery.recover(runtime_for, lambda event: None)
    assert journal.read() is None
    assert state.read_live() is not None and LocalRuntime().is_active(stub.ref.profile)


def test_switch_dry_run_plans_the_recovery_first(stub: Stub) -> None:
    journal.write(entry("verifying", stub, dead_owner()))
    out = CliRunner().invoke(cli, ["switch", "cpu-demo", "--dry-run"]).output.splitlines()
    assert out[1].startswith("interrupted switch cpu-demo -> cpu-demo-alt (paroctl pid ")
    assert out[1].endswith(
        f"step verifying: stop cpu-demo-alt (local) through its runtime, wait until "
        f"127.0.0.1:{stub.ref.port} is closed; clear {journal.path()}"
    )
    assert out[2] == "live: nothing"


def test_a_live_owner_without_the_lock_is_left_alone() -> None:
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        info = read_proc(child.pid)
        assert info is not None
        owner = journal.Owner(
            child.pid,
            info.start_ticks,
            journal.me().host_boot,
            (PY, "-c", "import time; time.sleep(30)"),
        )
        journal.write(entry("starting", None, owner))
        with pytest.raises(StateError, match=f"belongs to a running paroctl .pid {child.pid}"):
            recovery.recover(runtime_for, lambda event: None)
        assert journal.read() is not None
    finally:
        child.kill()
        child.wait()


# --- signals: SIGTERM and SIGHUP are Ctrl-C during a switch ---------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_interrupt_once(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt, match=f"{sig.name} received"):  # noqa: SIM117
        with serve_cli.interrupt_on_signals():
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises before this ends
    with serve_cli.interrupt_on_signals():
        with pytest.raises(serve_cli.Interrupted):
            os.kill(os.getpid(), sig)
            time.sleep(5)
        os.kill(os.getpid(), sig)  # a second one, during the rollback: ignored
        time.sleep(0.05)
    assert signal.getsignal(sig) == before


def test_an_interrupted_command_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command(name="status")
    def interrupted() -> None:
        raise serve_cli.Interrupted("SIGTERM received")

    monkeypatch.setattr(serve_cli, "status_cmd", interrupted)
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 130
    assert result.output == "Interrupted (SIGTERM received).\n"


def test_repair_moves_a_damaged_journal_aside_and_status_works_again() -> None:
    journal.path().parent.mkdir(parents=True)
    journal.path().write_text("{not json")
    assert CliRunner().invoke(cli, ["status"]).exit_code == 2
    repaired = CliRunner().invoke(cli, ["repair"])
    assert repaired.exit_code == 0, repaired.output
    assert journal.read() is None
    assert list(journal.path().parent.glob("journal.json.corrupt-*"))  # kept, never deleted
    assert (
        CliRunner().invoke(cli, ["status"]).output == "live: nothing (run `paroctl switch NAME`)\n"
    )
