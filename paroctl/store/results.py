"""The results store: boots and gate runs with provenance, per-item records, in one sqlite file.

Schema changes are numbered migrations applied in order inside one transaction each; the applied
versions are listed in `schema_migrations`, so an old store upgrades in place and a store written by
a newer paroctl is refused rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.errors import DataError, StateError, UsageError

# Each entry is one schema version; never edit a shipped entry, append a new one.
MIGRATIONS: tuple[str, ...] = (
    # v1: boots, gate runs with provenance, per-item records.
    """
    CREATE TABLE boots (
        boot_id     TEXT PRIMARY KEY,
        profile     TEXT NOT NULL,
        hash        TEXT,
        knobs       TEXT NOT NULL DEFAULT '{}',
        image       TEXT,
        cache_dir   TEXT,
        first_boot  INTEGER,
        kv_tokens   INTEGER,
        phases      TEXT NOT NULL DEFAULT '{}',
        started_at  TEXT,
        ok          INTEGER NOT NULL,
        cause       TEXT,
        record      TEXT NOT NULL,
        recorded_at TEXT NOT NULL
    );
    CREATE INDEX boots_profile ON boots (profile, recorded_at);
    CREATE TABLE runs (
        run_id          TEXT PRIMARY KEY,
        gate            TEXT NOT NULL,
        profile         TEXT NOT NULL,
        profile_hash    TEXT,
        knobs           TEXT NOT NULL DEFAULT '{}',
        image           TEXT,
        boot_id         TEXT,
        first_boot      INTEGER,
        paroctl_version TEXT NOT NULL,
        server_version  TEXT,
        options         TEXT NOT NULL DEFAULT '{}',
        started_at      TEXT NOT NULL,
        finished_at     TEXT,
        status          TEXT NOT NULL,
        headline_name   TEXT,
        headline        REAL,
        summary         TEXT NOT NULL DEFAULT '{}',
        message         TEXT
    );
    CREATE INDEX runs_profile ON runs (profile, gate, started_at);
    CREATE TABLE items (
        run_id      TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        key         TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        outcome     TEXT NOT NULL,
        record      TEXT NOT NULL,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (run_id, key)
    );
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
BUSY_TIMEOUT_S = 10.0
# A run is "running" until finish(); one left "running" by a dead process is resumable.
RUN_STATUSES = ("running", "pass", "fail", "unjudged", "error")


def now_iso() -> str:
    """The current UTC time as an ISO-8601 string (sortable as text)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_run_id(gate: str) -> str:
    """A short, sortable, unique run id: <UTC time>-<gate>-<random>."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{gate}-{uuid.uuid4().hex[:6]}"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Provenance:
    """What was served when a gate ran: enough to tell two runs' conditions apart."""

    profile: str
    profile_hash: str | None
    knobs: Mapping[str, Any]
    image: str | None
    boot_id: str | None
    first_boot: bool | None
    paroctl_version: str
    server_version: str | None


class Store:
    """One results database; safe to share between threads of one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(
                f"{path.parent}: cannot hold the results store ({exc.strerror}); point "
                "PAROCTL_HOME at a writable directory"
            ) from exc
        self._lock = threading.RLock()
        try:
            # timeout: concurrent first opens wait for each other's schema transaction.
            self._conn = sqlite3.connect(
                path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S
            )
            self._conn.row_factory = sqlite3.Row
            _set_wal(self._conn)
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.Error as exc:
            raise StateError(store_error(path, exc)) from exc

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, _sqlite_errors(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock, _sqlite_errors(self.path):
            return list(self._conn.execute(sql, params))

    # --- schema -----------------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest migration applied to this database."""
        rows = self._query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
        return int(rows[0]["v"])

    def _migrate(self) -> None:
        # One IMMEDIATE transaction reads the version and applies what is missing: two processes
        # opening a fresh store at once serialise here, and the second finds nothing left to do
        # (reading the version outside the transaction let both apply v1: "table boots already
        # exists", 1 in 15 opens in the issue-13 probe).
        with self._tx() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
            current = int(row[0])
            if current > SCHEMA_VERSION:
                raise StateError(
                    f"{self.path}: schema v{current} is newer than this paroctl understands "
                    f"(v{SCHEMA_VERSION}); upgrade paroctl"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                # executescript would COMMIT on its own; run the statements one by one instead.
                for statement in MIGRATIONS[version - 1].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, now_iso()),
                )

    # --- boots (written by the switch) ------------------------------------------------------

    def record_boot(self, record: Mapping[str, Any]) -> None:
        """Store one boot attempt (ok or failed); a repeated boot_id replaces the earlier row."""
        if not record.get("boot_id") or not record.get("profile"):
            raise DataError("a boot record needs boot_id and profile")
        first_boot = record.get("first_boot")
        kv_tokens = record.get("kv_tokens")
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO boots (boot_id, profile, hash, knobs, image, cache_dir, "
                "first_boot, kv_tokens, phases, started_at, ok, cause, record, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    str(record["boot_id"]),
                    str(record["profile"]),
                    record.get("hash"),
                    _dumps(record.get("knobs") or {}),
                    record.get("image"),
                    None if record.get("cache_dir") is None else str(record["cache_dir"]),
                    None if first_boot is None else int(bool(first_boot)),
                    None if kv_tokens is None else int(kv_tokens),
                    _dumps(record.get("phases") or {}),
                    None if record.get("started_at") is None else str(record["started_at"]),
                    int(bool(record.get("ok"))),
                    record.get("cause"),
                    _dumps(dict(record)),
                    now_iso(),
                ),
            )

    def boots(self, profile: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The most recent boots, newest first, optionally of one profile."""
        where, params = ("WHERE profile = ?", [profile]) if profile else ("", [])
        rows = self._query(
            f"SELECT * FROM boots {where} ORDER BY recorded_at DESC, rowid DESC LIMIT ?",
            [*params, limit],
        )
        return [_boot_dict(row) for row in rows]

    # --- gate runs ----------------------------------------------------------------------------

    def start_run(
        self, run_id: str, gate: str, provenance: Provenance, options: Mapping[str, Any]
    ) -> None:
        """Open a run (status running) with its provenance and options."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, gate, profile, profile_hash, knobs, image, boot_id, "
                "first_boot, paroctl_version, server_version, options, started_at, status) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')",
                (
                    run_id,
                    gate,
                    provenance.profile,
                    provenance.profile_hash,
                    _dumps(dict(provenance.knobs)),
                    provenance.image,
                    provenance.boot_id,
                    None if provenance.first_boot is None else int(provenance.first_boot),
                    provenance.paroctl_version,
                    provenance.server_version,
                    _dumps(dict(options)),
                    now_iso(),
                ),
            )

    def reopen_run(self, run_id: str) -> None:
        """Mark a run running again (a resume); its stored items are kept."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?",
                (run_id,),
            )

    def add_item(
        self, run_id: str, key: str, outcome: str, record: Mapping[str, Any], seq: int = 0
    ) -> None:
        """Store one per-item record as it arrives (a retried key replaces its earlier record)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO items (run_id, key, seq, outcome, record, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, key, seq, outcome, _dumps(dict(record)), now_iso()),
            )

    def finish_run(
        self,
        run_id: str,
        status: str,
        summary: Mapping[str, Any],
        headline_name: str | None = None,
        headline: float | None = None,
        message: str | None = None,
    ) -> None:
        """Close a run with its verdict, headline number and summary."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        with self._tx() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, summary = ?, headline_name = ?, headline = ?, "
                "message = ?, finished_at = ? WHERE run_id = ?",
                (
                    status,
                    _dumps(dict(summary)),
                    headline_name,
                    headline,
                    message,
                    now_iso(),
                    run_id,
                ),
            )

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run (with provenance and summary), or None; a unique prefix of the id is enough."""
        rows = self._query(
            "SELECT * FROM runs WHERE run_id = ? OR run_id LIKE ? ORDER BY run_id",
            (run_id, f"{run_id}%"),
        )
        exact = [row for row in rows if row["run_id"] == run_id]
        if exact:
            return _run_dict(exact[0])
        if len(rows) > 1:
            raise UsageError(f"run id {run_id!r} is ambiguous: matches {len(rows)} runs")
        return _run_dict(rows[0]) if rows else None

    def runs(
        self,
        profile: str | None = None,
        gate: str | None = None,
        limit: int = 50,
        status: str | None = None,
    ) -> list[dict[str, Any]]:
        """Runs, newest first, filtered by profile / gate / status."""
        clauses, params = [], []
        for column, value in (("profile", profile), ("gate", gate), ("status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query(
            f"SELECT * FROM runs {where} ORDER BY started_at DESC, rowid DESC LIMIT ?",
            [*params, limit],
        )
        return [_run_dict(row) for row in rows]

    def items(self, run_id: str) -> list[dict[str, Any]]:
        """A run's per-item records in arrival order, each with key, outcome and record."""
        rows = self._query(
            "SELECT key, seq, outcome, record, recorded_at FROM items WHERE run_id = ? "
            "ORDER BY seq, key",
            (run_id,),
        )
        return [
            {
                "key": row["key"],
                "seq": row["seq"],
                "outcome": row["outcome"],
                "recorded_at": row["recorded_at"],
                **json.loads(row["record"]),
            }
            for row in rows
        ]

    def last_gate_results(self, profile: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest finished runs of a profile: gate, status, passed, headline, when."""
        rows = self._query(
            "SELECT run_id, gate, status, headline_name, headline, finished_at, boot_id "
            "FROM runs WHERE profile = ? AND status != 'running' "
            "ORDER BY finished_at DESC, rowid DESC LIMIT ?",
            (profile, limit),
        )
        return [
            {
                "run_id": row["run_id"],
                "gate": row["gate"],
                "status": row["status"],
                "passed": row["status"] in ("pass", "unjudged"),
                "headline_name": row["headline_name"],
                "headline": row["headline"],
                "when": row["finished_at"],
                "boot_id": row["boot_id"],
            }
            for row in rows
        ]


def _boot_dict(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(json.loads(row["record"]))
    out.update(
        boot_id=row["boot_id"],
        profile=row["profile"],
        hash=row["hash"],
        knobs=json.loads(row["knobs"]),
        image=row["image"],
        cache_dir=row["cache_dir"],
        first_boot=None if row["first_boot"] is None else bool(row["first_boot"]),
        kv_tokens=row["kv_tokens"],
        phases=json.loads(row["phases"]),
        started_at=row["started_at"],
        ok=bool(row["ok"]),
        cause=row["cause"],
        recorded_at=row["recorded_at"],
    )
    return out


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("knobs", "options", "summary"):
        out[key] = json.loads(out[key])
    if out["first_boot"] is not None:
        out["first_boot"] = bool(out["first_boot"])
    return out


def _set_wal(conn: sqlite3.Connection) -> None:
    """WAL: a report can read while a gate writes; a crash loses at most the last item."""
    import time

    # Switching a fresh file to WAL takes an exclusive lock, and sqlite answers "database is
    # locked" at once (no busy wait) when another process is switching it too: retry until the
    # timeout. Seen in 1 of ~20 rounds of 6 concurrent first opens (test_state_repair).
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    """sqlite's errors as StateError: one message naming the store and the way out."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StateError(store_error(path, exc)) from exc


def store_error(path: Path, exc: sqlite3.Error) -> str:
    """The message for a store sqlite cannot use: damage (the repair), or another cause."""
    if isinstance(exc, sqlite3.OperationalError):
        # Busy past the timeout, disk full, unwritable: the file itself is not damaged.
        return f"{path}: cannot use the results store ({exc})"
    return state.damaged(path, f"sqlite: {exc}")


def store_problem(path: Path) -> str | None:
    """Why the store at path is damaged (sqlite's quick_check), or None when it is sound."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        return f"cannot open ({exc})"
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return None  # in use by a writer: not evidence of damage
        return f"sqlite: {exc}"
    except sqlite3.Error as exc:
        return f"sqlite: {exc}"
    finally:
        conn.close()
    found = [str(row[0]) for row in rows]
    return None if found == ["ok"] else "sqlite quick_check: " + "; ".join(found)[:300]


def default_path() -> Path:
    """Where the store lives: PAROCTL_HOME/results.db."""
    return state.home() / "results.db"


def open_store(path: Path | None = None) -> Store:
    """Open (creating and migrating as needed) the results store."""
    return Store(path or default_path())


# --- comparison (pure) ---------------------------------------------------------------------------


def headline_numbers(run: Mapping[str, Any]) -> dict[str, float]:
    """A run's comparable numbers, flattened to 'name -> value' from its gate's summary."""
    summary, gate = run.get("summary") or {}, run.get("gate")
    out: dict[str, float] = {}
    if gate == "gsm8k":
        for metric in ("strict-match", "flexible-extract"):
            if metric in summary:
                out[f"{metric} acc"] = summary[metric]["acc"]
                out[f"{metric} low"] = summary[metric]["low"]
        for key in ("answered", "truncated", "invalid", "errors"):
            if key in summary:
                out[key] = summary[key]
    elif gate in ("decode", "prefill"):
        fields = (
            ("ms_per_step", "decode_tok_s", "ttft_ms")
            if gate == "decode"
            else (
                "prefill_tok_s",
                "ttft_ms",
            )
        )
        for point, values in (summary.get("points") or {}).items():
            for field in fields:
                if values.get(field):
                    out[f"{field} @{point}"] = values[field]["median"]
            acc = values.get("acceptance")
            if acc:
                out[f"acc/draft @{point}"] = acc["accepted_per_draft"]
    elif gate == "concurrency":
        for point, values in (summary.get("points") or {}).items():
            if "aggregate_tok_s" in values:
                out[f"tok/s @{point} streams"] = values["aggregate_tok_s"]
    elif gate == "kld":
        for key in ("kl", "kl_median", "kl_p99", "same_top"):
            if key in summary:
                out[key] = summary[key]
    elif gate in ("greedy", "sanity"):
        for key in ("self_consistent", "prompts", "passed", "required"):
            if key in summary:
                out[key] = summary[key]
    if run.get("headline") is not None and run.get("headline_name"):
        out.setdefault(str(run["headline_name"]), float(run["headline"]))
    return out


def compare(
    a: Mapping[str, Any], b: Mapping[str, Any]
) -> list[tuple[str, float | None, float | None, float | None, float | None]]:
    """Rows (name, A, B, B - A, (B - A) / A) over the numbers either run has."""
    left, right = headline_numbers(a), headline_numbers(b)
    rows = []
    for name in sorted(set(left) | set(right)):
        va, vb = left.get(name), right.get(name)
        delta = vb - va if va is not None and vb is not None else None
        rel = delta / va if delta is not None and va else None
        rows.append((name, va, vb, delta, rel))
    return rows
