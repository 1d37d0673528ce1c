"""The results store: migrations, boots, runs with provenance, items, resume state, compare."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from paroctl.errors import DataError, StateError, UsageError
from paroctl.store import results
from paroctl.store.results import Provenance, open_store

PROV = Provenance(
    profile="cpu-demo",
    profile_hash="abc123",
    knobs={"PARO_X": "1"},
    image="local/x:1",
    boot_id="boot-1",
    first_boot=False,
    paroctl_version="0.1.0",
    server_version="0.32.0",
)

BOOT = {
    "boot_id": "boot-1",
    "profile": "cpu-demo",
    "hash": "abc123",
    "knobs": {"PARO_X": "1"},
    "image": "local/x:1",
    "cache_dir": Path("/tmp/cache"),
    "first_boot": True,
    "kv_tokens": 12345,
    "phases": {"load": 3.5, "health": 30.1},
    "started_at": "2026-11-29T10:00:00+00:00",
    "ok": True,
    "cause": None,
}


def test_default_path_is_under_paroctl_home(isolated_home: Path) -> None:
    with open_store() as store:
        assert store.path == isolated_home / "results.db"
        assert store.schema_version() == results.SCHEMA_VERSION == 1


def test_migrations_apply_once_and_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    open_store(path).close()
    open_store(path).close()
    with sqlite3.connect(path) as conn:
        assert [row[0] for row in conn.execute("SELECT version FROM schema_migrations")] == [1]
        conn.execute("INSERT INTO schema_migrations VALUES (99, 'later')")
    with pytest.raises(StateError, match="schema v99 is newer"):
        open_store(path)


def test_boots_round_trip_newest_first_and_by_profile(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.record_boot(BOOT)
        store.record_boot({**BOOT, "boot_id": "boot-2", "ok": False, "cause": "marker missing"})
        store.record_boot({**BOOT, "boot_id": "boot-3", "profile": "other"})
        boots = store.boots("cpu-demo")
        assert [b["boot_id"] for b in boots] == ["boot-2", "boot-1"]
        assert boots[0]["ok"] is False and boots[0]["cause"] == "marker missing"
        first = boots[1]
        assert first["phases"] == {"load": 3.5, "health": 30.1}
        assert first["first_boot"] is True and first["kv_tokens"] == 12345
        assert first["cache_dir"] == "/tmp/cache" and first["knobs"] == {"PARO_X": "1"}
        assert len(store.boots()) == 3 and len(store.boots(limit=1)) == 1
        with pytest.raises(DataError, match="boot_id and profile"):
            store.record_boot({"profile": "x"})


def test_run_lifecycle_items_and_last_gate_results(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.start_run("r1", "gsm8k", PROV, {"limit": 2})
        store.add_item("r1", "q0", "correct", {"index": 0}, seq=1)
        store.add_item("r1", "q1", "error", {"index": 1, "error": "boom"}, seq=2)
        # A retried item replaces its earlier record.
        store.add_item("r1", "q1", "wrong", {"index": 1}, seq=3)
        assert store.run("r1")["status"] == "running"
        assert store.last_gate_results("cpu-demo") == []  # running runs are not results
        store.finish_run("r1", "pass", {"n": 2}, headline_name="acc", headline=0.5, message="ok")
        run = store.run("r1")
        assert run["status"] == "pass" and run["summary"] == {"n": 2}
        assert run["knobs"] == {"PARO_X": "1"} and run["first_boot"] is False
        assert run["server_version"] == "0.32.0" and run["options"] == {"limit": 2}
        assert [(i["key"], i["outcome"]) for i in store.items("r1")] == [
            ("q0", "correct"),
            ("q1", "wrong"),
        ]
        store.start_run("r2", "decode", PROV, {})
        store.finish_run("r2", "fail", {}, headline_name="ms/step", headline=30.0)
        last = store.last_gate_results("cpu-demo")
        assert [(r["gate"], r["passed"], r["headline"]) for r in last] == [
            ("decode", False, 30.0),
            ("gsm8k", True, 0.5),
        ]
        assert last[0]["when"] is not None
        with pytest.raises(ValueError):
            store.finish_run("r2", "maybe", {})


def test_run_lookup_by_prefix(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.start_run("20260101-gsm8k-aaaa", "gsm8k", PROV, {})
        store.start_run("20260101-gsm8k-bbbb", "gsm8k", PROV, {})
        assert store.run("20260101-gsm8k-a")["run_id"] == "20260101-gsm8k-aaaa"
        assert store.run("nope") is None
        with pytest.raises(UsageError, match="ambiguous"):
            store.run("20260101")


def test_compare_rows_have_deltas() -> None:
    a = {"gate": "decode", "summary": {"points": {"25": {"ms_per_step": {"median": 24.0}}}}}
    b = {"gate": "decode", "summary": {"points": {"25": {"ms_per_step": {"median": 25.2}}}}}
    (row,) = results.compare(a, b)
    assert row[0] == "ms_per_step @25"
    assert row[1:4] == (24.0, 25.2, pytest.approx(1.2))
    assert row[4] == pytest.approx(0.05)


def test_a_run_id_prefix_is_literal_never_a_like_pattern(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.start_run("20260101T000000-decode-aaaaaa", "decode", PROV, {})
        store.start_run("20260102T000000-gsm8k-bbbbbb", "gsm8k", PROV, {})
        for pattern in ("%", "_", "2026%decode%", "2026010_T", "%decode"):
            assert store.run(pattern) is None, pattern
        assert store.run("") is None
        assert store.run("20260101")["run_id"] == "20260101T000000-decode-aaaaaa"
        store.start_run("odd%_id", "decode", PROV, {})
        assert store.run("odd%")["run_id"] == "odd%_id"  # % in an id is a character


def test_results_cli_show_limit_and_compare_take_odd_input() -> None:
    from click.testing import CliRunner

    from paroctl.cli.main import cli

    with open_store() as store:
        store.start_run("20260101T000000-gsm8k-aaaaaa", "gsm8k", PROV, {})
        # A summary from another paroctl: no `low`, a string where a number was.
        summary = {"flexible-extract": {"acc": 0.5}, "strict-match": "n/a", "answered": 9}
        store.finish_run("20260101T000000-gsm8k-aaaaaa", "pass", summary, "acc", 0.5)
        store.start_run("20260102T000000-gsm8k-bbbbbb", "gsm8k", PROV, {})
        store.finish_run("20260102T000000-gsm8k-bbbbbb", "pass", {}, "acc", 0.6)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, list(args))
        return result.exit_code, result.output

    for pattern in ("%", "2026%gsm8k%"):
        assert run("results", "show", pattern) == (
            2, f"Error: no run {pattern!r}; see `paroctl results list`\n"
        )  # fmt: skip
    code, out = run("results", "list", "--limit", "99999999999999999999")
    assert code == 0 and out.count("-gsm8k-") == 2, out
    code, out = run("results", "list", "--limit", "0")
    assert code == 2 and "Invalid value for '--limit'" in out
    code, out = run("results", "compare", "20260101", "20260102")
    assert code == 0, out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert "flexible-extract acc" in rows and "answered" in rows and "acc" in rows
    assert not any("low" in name for name in rows)


def test_headline_numbers_skip_what_a_summary_lacks_or_holds_as_something_else() -> None:
    odd = {"gate": "decode", "summary": {"points": {"25": {"ms_per_step": "fast"},
                                                    "1k": "x", "4k": {"ms_per_step": {}}}}}  # fmt: skip
    assert results.headline_numbers(odd) == {}
    assert results.headline_numbers({"gate": "concurrency", "summary": {"points": []}}) == {}
    kept = {"gate": "decode", "summary": {"points": {"25": {"ms_per_step": {"median": 24.0},
            "acceptance": {"accepted_per_draft": 0.0}}}}, "headline_name": "ms", "headline": 24}  # fmt: skip
    assert results.headline_numbers(kept) == {
        "ms_per_step @25": 24.0, "acc/draft @25": 0.0, "ms": 24.0
    }  # fmt: skip


def test_a_resumed_run_never_repeats_a_seq(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.start_run("r1", "gsm8k", PROV, {})
        for index in range(48):
            store.add_item("r1", f"q{index}", "correct", {}, seq=index + 1)
        store.finish_run("r1", "error", {}, message="killed")
        store.reopen_run("r1")  # the resumed gate counts from 1 again
        for index in range(48, 52):
            store.add_item("r1", f"q{index}", "correct", {}, seq=index - 47)
        seqs = [item["seq"] for item in store.items("r1")]
        assert seqs == list(range(1, 53))
        assert [item["key"] for item in store.items("r1")][-4:] == ["q48", "q49", "q50", "q51"]


def _fresh_store(path: Path) -> None:
    open_store(path).close()


@pytest.mark.parametrize(
    "fault,what,whole",
    [
        (lambda db: db.unlink(), "deleted while this run was being recorded", True),
        (lambda db: (_fresh_store(db.with_name("o.db")), db.with_name("o.db").replace(db)),
         "replaced by another file while this run was being recorded", True),
        # The earlier runs' pages went with the file's bytes: the run alone is kept.
        (lambda db: os.truncate(db, 0), "emptied while this run was being recorded", False),
    ],
    ids=["deleted", "replaced", "truncated"],
)  # fmt: skip
def test_a_store_gone_from_its_path_during_a_run_is_an_error_and_the_run_is_kept(
    tmp_path: Path, fault: Callable[[Path], object], what: str, whole: bool
) -> None:
    db = tmp_path / "results.db"
    store = open_store(db)
    for index in range(20):  # earlier runs, folded into the file
        store.start_run(f"old-{index}", "decode", PROV, {"pad": "x" * 2000})
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.start_run("r1", "gsm8k", PROV, {})
    for index in range(5):
        store.add_item("r1", f"q{index}", "correct", {"index": index}, seq=index + 1)
    fault(db)
    with pytest.raises(StateError) as raised:
        store.finish_run("r1", "pass", {"n": 5}, headline_name="acc", headline=1.0)
    store.close()
    [kept] = tmp_path.glob("results.db.rescued-*")
    assert raised.value.message == (
        f"{db}: {what}; run r1 is not in it; what it measured is kept in {kept} (a results "
        f"store: move it to {db} to read it with `paroctl results show r1`)"
    )
    with open_store(kept) as rescued:
        assert rescued.run("r1")["status"] == "pass" and len(rescued.items("r1")) == 5
        assert (rescued.run("old-19") is not None) == whole
        assert results.store_problem(kept) is None
    assert raised.value.exit_code == 2


def test_a_store_that_stayed_put_finishes_quietly(tmp_path: Path) -> None:
    with open_store(tmp_path / "r.db") as store:
        store.start_run("r1", "gsm8k", PROV, {})
        store.finish_run("r1", "pass", {})
    assert sorted(p.name for p in tmp_path.iterdir() if "rescued" in p.name) == []


# Enough of an OpenAI-compatible server for the greedy gate; on its first completion it does to
# the results store (argv[2]) what argv[3] says, as an operator's `rm` or `mv` would mid-gate.
FAULTY_SERVE = """
import json, os, sqlite3, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
db, fault, done = sys.argv[2], sys.argv[3], []
class H(BaseHTTPRequestHandler):
    def reply(self, data):
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/v1/models":
            return self.reply({"data": [{"id": "m", "max_model_len": 4096}]})
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self.reply({"tokens": list(range(len(request["prompt"]) // 3 + 1))})
        if not done:
            done.append(1)
            if fault == "delete":
                os.unlink(db)
            else:
                sqlite3.connect(db + ".new").close()
                os.replace(db + ".new", db)
        self.reply({"choices": [{"text": "same answer"}]})
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


@pytest.mark.parametrize("fault", ["delete", "replace"])
def test_a_gate_whose_store_goes_away_mid_run_exits_2_and_keeps_its_run(
    isolated_home: Path, fault: str
) -> None:
    import subprocess
    import sys
    import time

    from click.testing import CliRunner

    from paroctl import net
    from paroctl.cli.main import cli

    db = isolated_home / "results.db"
    open_store(db).close()
    port = net.free_port()
    serve = subprocess.Popen([sys.executable, "-c", FAULTY_SERVE, str(port), str(db), fault])
    try:
        deadline = time.monotonic() + 30
        while not net.port_open("127.0.0.1", port):
            assert time.monotonic() < deadline and serve.poll() is None
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        result = CliRunner().invoke(cli, ["gate", "greedy", "--url", url, "--model", "m"])
    finally:
        serve.kill()
        serve.wait()
    assert result.exit_code == 2, result.output
    [kept] = isolated_home.glob("results.db.rescued-*")
    run_id = kept.name.split("-", 2)[-1]
    what = "deleted" if fault == "delete" else "replaced by another file"
    assert f"{db}: {what} while this run was being recorded; run {run_id} is not in it" in (
        " ".join(result.output.split())
    )
    with open_store(kept) as rescued:
        run = rescued.run(run_id)
        assert run is not None and run["gate"] == "greedy" and run["status"] != "running"
        assert len(rescued.items(run_id)) == 5
