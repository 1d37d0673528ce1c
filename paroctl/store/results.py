"""The results store: boots and gate runs with provenance, per-item records, in one sqlite file.

Schema changes are numbered migrations applied in order inside one transaction each; the applied
versions are listed in `schema_migrations`, so an old store upgrades in place and a store written by
a newer paroctl is refused rather than misread.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing as contextlib_closing
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
# "interrupted": a signal stopped the gate (what it measured is kept, resumable like "error").
RUN_STATUSES = ("running", "pass", "fail", "unjudged", "error", "interrupted")
# sqlite's largest integer: a larger LIMIT is "all of them", not an OverflowError.
MAX_LIMIT = (1 << 63) - 1
SQLITE_HEADER = b"SQLite format 3\x00"


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
        # Links are refused (-wal/-shm too); finish_run checks the path still names this file.
        for extra in ("-wal", "-shm"):
            if (link := path.with_name(path.name + extra)).is_symlink():
                raise StateError(state.damaged(link, state.SYMLINK))
        self._identity = state.claim_file(path)
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
            [*params, min(limit, MAX_LIMIT)],
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
        """Store one per-item record as it arrives (a retried key replaces its earlier record).
        seq orders the items; one at or below a seq the run already holds (a resumed run's count
        starts again at 1) is stored after them instead, so a run's seqs never repeat."""
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO items (run_id, key, seq, outcome, record, recorded_at) "
                "SELECT ?, ?, MAX(?, COALESCE(MAX(seq), 0) + 1), ?, ?, ? FROM items "
                "WHERE run_id = ? AND key != ?",
                (run_id, key, seq, outcome, _dumps(dict(record)), now_iso(), run_id, key),
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
        self._check_kept(run_id, status)

    def _check_kept(self, run_id: str, status: str) -> None:
        """The run just finished is in the file at self.path, or a StateError naming what
        happened to the store and where the run is kept."""
        what = self._moved()
        if what is None:  # what another paroctl reads there, through a connection of its own
            try:
                with contextlib_closing(
                    sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                ) as c:
                    row = c.execute(
                        "SELECT status FROM runs WHERE run_id = ?", (run_id,)
                    ).fetchone()
            except sqlite3.Error as exc:
                row, what = None, f"damaged while this run was being recorded (sqlite: {exc})"
            if row is not None and row[0] == status:
                return
            what = what or "rewritten while this run was being recorded"
        raise StateError(f"{self.path}: {what}; run {run_id} is not in it; {self._rescue(run_id)}")

    def _moved(self) -> str | None:
        """Whether the path still names the file this store opened: why not, or None."""
        try:
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) != self._identity:
                return "replaced by another file while this run was being recorded"
            with open(self.path, "rb") as handle:  # every store has its header from its open on
                header = handle.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return "deleted while this run was being recorded"
        except OSError as exc:
            return f"unreadable while this run was being recorded ({exc.strerror})"
        return None if header == SQLITE_HEADER else "emptied while this run was being recorded"

    def _rescue(self, run_id: str) -> str:
        """Copy what this store holds open (a deleted, replaced or emptied file stays readable
        through it) beside the path: all of it if sound, else the run; say where, or that not."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.path.with_name(f"{self.path.name}.rescued-{stamp}-{run_id}")
        try:
            state.claim_file(target, fresh=True)
            with self._lock:
                with contextlib_closing(sqlite3.connect(target)) as copy:
                    self._conn.backup(copy)
                    copy.execute("PRAGMA journal_mode=DELETE")  # one file, no -wal/-shm beside it
                    whole = store_problem(target) is None
                if not whole:
                    os.unlink(target)  # our own broken copy: the run alone instead
                    run = self._conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,))
                    row = tuple(run.fetchone())
                    items = self._conn.execute("SELECT * FROM items WHERE run_id = ?", (run_id,))
                    with Store(target) as fresh, fresh._tx() as conn:
                        conn.execute(f"INSERT INTO runs VALUES ({','.join('?' * len(row))})", row)
                        conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", items)
        except (sqlite3.Error, StateError, OSError, TypeError) as exc:
            return f"what it measured could not be kept ({exc}); run the gate again"
        return (
            f"what it measured is kept in {target} (a results store: move it to {self.path} "
            f"to read it with `paroctl results show {run_id}`)"
        )

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run (with provenance and summary), or None; a unique prefix of the id is enough
        (taken literally: `%` and `_` are characters of an id, not patterns)."""
        if not run_id:
            return None
        rows = self._query(
            "SELECT * FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY run_id",
            (len(run_id), run_id),
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
            [*params, min(limit, MAX_LIMIT)],
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
            (profile, min(limit, MAX_LIMIT)),
        )
        keys = ("run_id", "gate", "status", "headline_name", "headline", "boot_id")
        return [
            {**{key: row[key] for key in keys}, "when": row["finished_at"],
             "passed": row["status"] in ("pass", "unjudged")}
            for row in rows
        ]  # fmt: skip


def _boot_dict(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(json.loads(row["record"]))
    out.update((key, value) for key, value in zip(row.keys(), row, strict=True) if key != "record")
    out.update(knobs=json.loads(row["knobs"]), phases=json.loads(row["phases"]), ok=bool(row["ok"]))
    out["first_boot"] = None if row["first_boot"] is None else bool(row["first_boot"])
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


def _number(data: Any, *keys: str) -> float | None:
    """data[k1][k2]... when every step is there and the end is a finite number, else None: a
    stored summary is whatever its gate (of any paroctl version) wrote."""
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    number = isinstance(data, (int, float)) and not isinstance(data, bool)
    return float(data) if number and math.isfinite(data) else None


_GATE_NUMBERS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "decode": (("ms_per_step", ("ms_per_step", "median")),
               ("decode_tok_s", ("decode_tok_s", "median")), ("ttft_ms", ("ttft_ms", "median")),
               ("acc/draft", ("acceptance", "accepted_per_draft"))),
    "prefill": (("prefill_tok_s", ("prefill_tok_s", "median")),
                ("ttft_ms", ("ttft_ms", "median"))),
    "concurrency": (("tok/s", ("aggregate_tok_s",)),),
}  # fmt: skip
_TOP_NUMBERS = {
    "gsm8k": ("answered", "truncated", "invalid", "errors"),
    "kld": ("kl", "kl_median", "kl_p99", "same_top"),
    "greedy": ("self_consistent", "prompts", "passed", "required"),
    "sanity": ("self_consistent", "prompts", "passed", "required"),
}


def headline_numbers(run: Mapping[str, Any]) -> dict[str, float]:
    """A run's comparable numbers, flattened to 'name -> value' from its gate's summary (a
    number the summary lacks, or holds as something else, is left out)."""
    summary, gate = run.get("summary") or {}, str(run.get("gate"))
    found: dict[str, float | None] = {}
    if gate == "gsm8k":
        for metric in ("strict-match", "flexible-extract"):
            for stat_name in ("acc", "low"):
                found[f"{metric} {stat_name}"] = _number(summary, metric, stat_name)
    for key in _TOP_NUMBERS.get(gate, ()):
        found[key] = _number(summary, key)
    points = summary.get("points") if isinstance(summary, Mapping) else None
    for point, values in (points or {}).items() if isinstance(points, Mapping) else ():
        for name, keys in _GATE_NUMBERS.get(gate, ()):
            label = f"{name} @{point} streams" if gate == "concurrency" else f"{name} @{point}"
            found[label] = _number(values, *keys)
    out = {name: value for name, value in found.items() if value is not None}
    headline = _number(run, "headline")
    if headline is not None and run.get("headline_name"):
        out.setdefault(str(run["headline_name"]), headline)
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
