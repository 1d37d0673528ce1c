"""Damaged state (live.json, results.db, the lock) gives one clear message and a way out (#13.6)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl import state
from paroctl.cli.main import cli
from paroctl.errors import StateError
from paroctl.records import LiveRecord
from paroctl.store import results
from paroctl.switch.record import record_from_live

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


DAMAGED_LIVE = [
    ("truncated", b'{"profile": "cpu-demo", "host": "127.0.0.1", "po'),
    ("binary", b"\xff\xfe\x00garbage\x80"),
    ("fields missing", b'{"profile": "x"}'),
    ("wrong type", b'{"profile": "x", "host": "127.0.0.1", "port": "8123"}'),
    ("not an object", b"[1, 2]"),
]


@pytest.mark.parametrize("raw", [raw for _, raw in DAMAGED_LIVE], ids=[n for n, _ in DAMAGED_LIVE])
def test_a_damaged_live_pointer_is_one_message_and_repair_moves_it_aside(
    isolated_home: Path, raw: bytes
) -> None:
    isolated_home.mkdir(parents=True)
    (isolated_home / "live.json").write_bytes(raw)
    for command in (["status"], ["stop"]):
        code, out = run(*command)
        assert code == 2, out
        [line] = out.splitlines()
        assert line.startswith(f"Error: {isolated_home / 'live.json'}: damaged: ")
        assert line.endswith(
            "`paroctl repair` moves it aside (kept, with a timestamp), then `paroctl status` "
            "shows what serves"
        )
    code, out = run("repair", "--dry-run")
    assert code == 0 and out.startswith(f"would move {isolated_home / 'live.json'} aside (")
    assert (isolated_home / "live.json").read_bytes() == raw
    code, out = run("repair")
    assert code == 0, out
    [kept] = isolated_home.glob("live.json.corrupt-*")
    assert kept.read_bytes() == raw  # moved, never deleted
    assert out.startswith(f"moved {isolated_home / 'live.json'} aside to {kept.name} (")
    assert run("status")[1].startswith("live: nothing")
    assert run("repair")[1] == f"{isolated_home}: state files are sound; nothing to repair\n"


def test_a_sound_live_pointer_written_by_the_switch_reads_back(isolated_home: Path) -> None:
    record = {"profile": "cpu-demo", "hash": "ab", "host": "127.0.0.1", "port": 8123,
              "runtime": "local", "scope": "system", "served_names": ["smollm2-demo"],
              "grace_s": 30, "kv_tokens": None}  # fmt: skip
    state.write_live(LiveRecord.from_dict(record))
    live = state.read_live()
    assert live is not None
    assert {key: live.as_dict()[key] for key in record} == record


# live.json as the switch wrote it before the records were typed (BootRecord.as_dict() at
# 9a556e4, json.dumps(indent=2, sort_keys=True)): every key, and the exact bytes.
TODAY_LIVE = """{
  "boot_id": "0f3c9a1b2d4e",
  "boot_s": 41.207,
  "cache_dir": "/home/op/.local/share/paroctl/cache/cpu-demo-1a2b",
  "cause": "",
  "cpu": {
    "cores": 2,
    "dtype": "bfloat16",
    "dtype_why": "avx512_bf16",
    "kv_gib": 1.0,
    "reserved": 1
  },
  "drain": "load",
  "first_boot": false,
  "grace_s": 30,
  "hash": "5e0d2c7a9b11",
  "health_s": 38.911,
  "host": "0.0.0.0",
  "image": "/home/op/.cache/paroctl/venvs/vllm-cpu/bin/vllm",
  "knobs": {
    "PARO_BACKEND": "torch"
  },
  "kv_tokens": 93184,
  "log": "/home/op/.local/share/paroctl/runs/cpu-demo.log",
  "ok": true,
  "origin": "switch",
  "phases": {
    "kv cache sized": 35.2,
    "loading weights": 3.1,
    "ready": 38.9,
    "starting": 0.0
  },
  "port": 8123,
  "profile": "cpu-demo",
  "runtime": "local",
  "scope": "system",
  "served_names": [
    "smollm2-demo"
  ],
  "since": "2026-12-06T10:00:41+00:00",
  "started_at": "2026-12-06T10:00:00+00:00"
}
"""


def test_todays_live_json_loads_typed_and_writes_back_byte_identical(isolated_home: Path) -> None:
    state.atomic_write(state.live_path(), TODAY_LIVE)
    live = state.read_live()
    assert live is not None
    serve = live.serve
    assert (serve.profile, serve.hash, serve.runtime, serve.scope) == (
        "cpu-demo", "5e0d2c7a9b11", "local", "system",
    )  # fmt: skip
    assert (serve.host, serve.port, serve.served_names, serve.grace_s) == (
        "0.0.0.0", 8123, ("smollm2-demo",), 30,
    )  # fmt: skip
    assert serve.url == "http://127.0.0.1:8123"  # a wildcard bind is reached on loopback
    assert (live.boot_id, live.kv_tokens, live.first_boot, live.drain, live.origin) == (
        "0f3c9a1b2d4e", 93184, False, "load", "switch",
    )  # fmt: skip
    assert live.cpu is not None and live.cpu.dtype == "bfloat16"
    assert live.since == "2026-12-06T10:00:41+00:00" and live.phases["ready"] == 38.9
    state.write_live(live)
    assert state.live_path().read_text() == TODAY_LIVE  # old and new paroctl read each other's
    assert record_from_live(live).as_dict() == json.loads(TODAY_LIVE)


def test_an_older_live_json_without_the_later_fields_still_loads(isolated_home: Path) -> None:
    older = json.loads(TODAY_LIVE)
    for key in ("drain", "origin", "cpu", "since"):
        del older[key]
    state.atomic_write(state.live_path(), json.dumps(older, indent=2, sort_keys=True) + "\n")
    live = state.read_live()
    assert live is not None and live.serve.profile == "cpu-demo"
    assert (live.drain, live.origin, live.cpu, live.since) == ("metrics", "switch", None, None)
    assert record_from_live(live).drain == "metrics"
    code, out = run("stop", "--dry-run")
    assert code == 0 and out == "stop cpu-demo (grace 30 s) and wait until 0.0.0.0:8123 is closed\n"


def _store_with_runs(path: Path, count: int) -> None:
    with results.open_store(path) as store:
        prov = results.Provenance("cpu-demo", "h", {}, None, None, None, "0.1", None)
        for index in range(count):
            store.start_run(f"run-{index:04d}", "decode", prov, {"pad": "x" * 400})
            store.finish_run(f"run-{index:04d}", "pass", {"points": {}}, "ms/step", 1.0, "ok")


def test_a_store_that_is_not_a_database_is_named_and_repaired(isolated_home: Path) -> None:
    isolated_home.mkdir(parents=True)
    db = isolated_home / "results.db"
    db.write_bytes(b"this is not sqlite" * 100)
    code, out = run("results", "list")
    assert code == 2
    assert out.startswith(f"Error: {db}: damaged: sqlite: file is not a database; `paroctl repair`")
    code, out = run("repair")
    assert code == 0 and f"moved {db} aside to results.db.corrupt-" in out
    assert run("results", "list")[0] == 0  # a fresh store
    assert len(list(isolated_home.glob("results.db.corrupt-*"))) == 1


def test_page_level_corruption_is_a_clean_error_and_repair_finds_it(isolated_home: Path) -> None:
    db = isolated_home / "results.db"
    _store_with_runs(db, 200)
    with sqlite3.connect(db) as conn:  # fold the WAL into the file, so the pages are all there
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    with open(db, "r+b") as handle:  # scribble over the middle pages (not the header)
        handle.seek(size // 3)
        handle.write(os.urandom(size // 3))
    for command in (["results", "show", "run-0100"], ["results", "list", "--limit", "500"]):
        code, out = run(*command)
        assert code == 2, out
        assert out.startswith(f"Error: {db}: damaged: sqlite: "), out
        assert "crashed" not in out
    assert results.store_problem(db) is not None
    assert "moved" in run("repair")[1]


def test_home_that_is_a_file_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home-file"
    home.write_text("")
    monkeypatch.setenv("PAROCTL_HOME", str(home))
    code, out = run("results", "list")
    assert code == 2 and out.startswith(f"Error: {home}: cannot hold the results store (")
    code, out = run("repair")
    assert (code, out) == (
        2,
        f"Error: PAROCTL_HOME {home} is not a directory; point PAROCTL_HOME elsewhere\n",
    )


_OPEN = """
import sys, traceback
from pathlib import Path
from paroctl.store.results import open_store
print("ready", flush=True)
for line in sys.stdin:  # one store path a round, sent to every process at once
    try:
        open_store(Path(line.strip())).close()
        print("ok", flush=True)
    except Exception:
        print(traceback.format_exc().replace("\\n", " | "), flush=True)
"""
ROUNDS, PROCESSES = 20, 6


def test_concurrent_first_opens_migrate_once(tmp_path: Path) -> None:
    """Real processes open fresh stores at the same instant; none fails, v1 is applied once."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:  # each is past its imports
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for round_ in range(ROUNDS):
            db = tmp_path / f"r{round_}.db"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{db}\n")
                proc.stdin.flush()
            answers = [proc.stdout.readline().strip() for proc in procs if proc.stdout]
            assert answers == ["ok"] * PROCESSES, [a for a in answers if a != "ok"][:1]
            with sqlite3.connect(db) as conn:
                assert conn.execute("SELECT version FROM schema_migrations").fetchall() == [(1,)]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# --- the lock ------------------------------------------------------------------------------------


def test_the_lock_does_not_follow_a_symlink(isolated_home: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (isolated_home / "locks").mkdir(parents=True)
    (isolated_home / "locks" / "box.lock").symlink_to(victim)
    with (
        pytest.raises(StateError, match=r"box.lock: is a symbolic link; paroctl does not follow"),
        state.locked(),
    ):
        pass
    assert victim.read_text() == "precious\n"
    assert "moved" in run("repair")[1] and victim.read_text() == "precious\n"
    with state.locked() as path:
        assert path.read_text() == f"{os.getpid()}\n"


def test_the_lock_never_truncates_a_foreign_file(isolated_home: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (isolated_home / "locks").mkdir(parents=True)
    os.link(victim, isolated_home / "locks" / "box.lock")  # a hard link: same inode
    with state.locked():
        pass
    assert victim.read_text() == "precious\n"


def test_a_lock_path_that_is_a_directory_is_named(isolated_home: Path) -> None:
    (isolated_home / "locks" / "box.lock").mkdir(parents=True)
    with pytest.raises(StateError, match=r"box.lock: is a directory; remove it"), state.locked():
        pass
    assert "moved" in run("repair")[1]
    with state.locked():
        pass


def test_damaged_journal_is_moved_aside_with_a_warning(isolated_home: Path) -> None:
    from paroctl.switch import journal

    journal.path().parent.mkdir(parents=True, exist_ok=True)
    journal.path().write_text("{not json")
    out = run("repair")[1]
    assert f"moved {journal.path()} aside" in out
    assert "a switch was under way: check what serves before the next switch" in out
    assert journal.read() is None
