"""The switch journal and its recovery, fast: file format, atomicity, owner liveness (real
processes), and status/stop/switch --dry-run acting on a stranded serve (a tiny real HTTP serve
under the real LocalRuntime; the vLLM version of this is tests/e2e/test_switch_journal.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from paroctl import journal, net
from paroctl.errors import StateError
from paroctl.runtime import ServeSpec
from paroctl.runtime.local import LocalRuntime, read_proc

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


def entry(step: str, serve: journal.Serve | None, owner: journal.Owner) -> journal.Entry:
    return journal.Entry(
        boot_id="b00710000001",
        from_profile="cpu-demo",
        from_hash="aaaa",
        to_profile="cpu-demo-alt",
        owner=owner,
        step=step,
        serve=serve,
        started_at="2026-12-01T12:00:00.000+00:00",
        updated_at="2026-12-01T12:00:01.000+00:00",
    )


@pytest.fixture
def stub() -> Iterator[journal.Serve]:
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
    yield journal.Serve(
        name, "bbbb", "local", "system", "127.0.0.1", port, ("smollm2-alt",), 5, pid
    )
    runtime.stop(name, grace_s=1)


# --- the file ------------------------------------------------------------------------------------


def test_begin_step_clear_round_trip(isolated_home: Path) -> None:
    jr = journal.Journal.begin(None, "cpu-demo")
    assert jr.entry.step == "old-gone" and jr.entry.serve is None
    assert journal.read() == jr.entry
    assert jr.entry.owner == journal.me()
    serve = journal.Serve(
        "cpu-demo", "h", "local", "system", "127.0.0.1", 8123, ("smollm2-demo",), 30
    )
    jr.step("starting", serve=serve)
    jr.step("starting", serve=replace(serve, pid=4242))
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
    jr = journal.Journal.begin(live, "cpu-demo-alt")
    assert (jr.entry.step, jr.entry.from_profile, jr.entry.from_hash) == (
        "stopping-old",
        "cpu-demo",
        "aaaa",
    )
    assert jr.entry.serve == journal.Serve(
        "cpu-demo", "aaaa", "local", "system", "0.0.0.0", 8123, ("smollm2-demo",), 30.0
    )
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
    with pytest.raises(OSError, match="disk full"):
        journal.write(replace(first, step="verifying"))
    assert journal.read() == replace(first, step="starting")  # the old entry, whole
    assert [p.name for p in journal.path().parent.iterdir()] == ["journal.json"]


def test_unreadable_or_foreign_journal_is_a_clear_error() -> None:
    journal.path().parent.mkdir(parents=True)
    journal.path().write_text("{not json")
    with pytest.raises(StateError, match=r"journal.json: unreadable .*stop it, then remove"):
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
