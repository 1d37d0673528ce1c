"""The results store: migrations, boots, runs with provenance, items, resume state, compare."""

from __future__ import annotations

import sqlite3
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
