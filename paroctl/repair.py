"""`paroctl repair`: check the state files under PAROCTL_HOME (the live pointer, the switch
journal, the results store, the locks, the local runtime's runs/) and move the damaged ones aside
(kept, never deleted).

Above `state`, the journal, the results store and the local runtime: it asks each whether its
file is sound.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from paroctl import state
from paroctl.errors import RuntimeFailure, StateError
from paroctl.serve.runtime import local
from paroctl.store import results
from paroctl.switch import journal

# What a moved-aside file is renamed to: `<name>.corrupt-<UTC stamp>[-<serial>]`.
ASIDE_MARK = ".corrupt-"


def move_aside(path: Path) -> Path:
    """Rename a damaged file or directory to `<name>.corrupt-<UTC stamp>`; never delete it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}{ASIDE_MARK}{stamp}")
    serial = 1
    while target.exists() or target.is_symlink():
        serial += 1
        target = path.with_name(f"{path.name}{ASIDE_MARK}{stamp}-{serial}")
    os.rename(path, target)
    state.fsync_dir(path.parent)
    return target


def repair(dry_run: bool = False) -> list[str]:
    """Check the state files under PAROCTL_HOME; move the damaged ones aside; say what was done."""
    root = state.home()
    if root.exists() and not root.is_dir():
        raise StateError(f"PAROCTL_HOME {root} is not a directory; point PAROCTL_HOME elsewhere")
    if not root.exists():
        return [f"{root}: no state yet; nothing to repair"]
    # The locks first: the rest is checked holding the box lock, which a damaged one prevents.
    lines = [_aside(path, why, dry_run) for path, why in _lock_problems(root / "locks")]
    if dry_run:
        return lines + _state_problems(dry_run)
    with state.locked():
        return lines + _state_problems(dry_run)


def _lock_problems(locks: Path) -> Iterator[tuple[Path, str]]:
    if locks.is_symlink() or (locks.exists() and not locks.is_dir()):
        yield locks, state.SYMLINK if locks.is_symlink() else "not a directory of locks"
        return
    for lock in sorted(locks.glob("*.lock")) if locks.is_dir() else ():
        if lock.is_symlink() or not lock.is_file():
            yield lock, state.SYMLINK if lock.is_symlink() else "not a regular file"


def _state_problems(dry_run: bool) -> list[str]:
    lines: list[str] = []
    why = state.live_damage()
    if why:
        lines.append(_aside(state.live_path(), why, dry_run))
        lines.append(
            "  then nothing is recorded as live; a serve that still runs shows in `paroctl "
            "status` (found through its runtime): `paroctl adopt NAME` or `paroctl stop`"
        )
    why = journal.damage()
    if why:
        lines.append(_aside(journal.path(), why[:200], dry_run))
        lines.append("  a switch was under way: check what serves before the next switch")
    lines += _store_problems(results.default_path(), dry_run)
    lines += _runs_problems(state.home() / "runs", dry_run)
    return lines or [f"{state.home()}: state files are sound; nothing to repair"]


def _store_problems(store: Path, dry_run: bool) -> list[str]:
    extras = [store.with_name(store.name + suffix) for suffix in ("-wal", "-shm")]
    links = [path for path in (store, *extras) if path.is_symlink()]
    if links:
        # A link is moved, never followed: what it points at is not ours to judge.
        return [_aside(path, state.SYMLINK, dry_run) for path in links]
    if not store.exists():
        return []
    problem = "not a regular file" if not store.is_file() else results.store_problem(store)
    if not problem:
        return []
    lines = [_aside(store, problem, dry_run)]
    for extra in extras:
        if extra.exists():
            lines.append(_aside(extra, "belongs to the damaged store", dry_run))
    return [*lines, "  a fresh results store is created on the next gate run"]


def _runs_problems(runs: Path, dry_run: bool) -> list[str]:
    """The local runtime's runs/<name>/ (pid file, logs): links or non-files where its files
    belong, a pid file it cannot read."""
    if runs.is_symlink() or (runs.exists() and not runs.is_dir()):
        why = state.SYMLINK if runs.is_symlink() else "not a directory of serves"
        return [_aside(runs, why, dry_run)]
    lines: list[str] = []
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else ():
        if ASIDE_MARK in run_dir.name:
            continue  # moved aside earlier
        if run_dir.is_symlink():
            lines.append(_aside(run_dir, state.SYMLINK, dry_run))
            continue
        if not run_dir.is_dir():
            continue  # a log an older paroctl kept beside the serves' directories
        for name in (local.PID_FILE, local.LOG_FILE, f"{local.LOG_FILE}.1"):
            path = run_dir / name
            if path.is_symlink() or (path.exists() and not path.is_file()):
                kind = state.SYMLINK if path.is_symlink() else "not a regular file"
                lines.append(_aside(path, kind, dry_run))
        if (run_dir / local.PID_FILE).is_file() and (bad := _pid_problem(runs, run_dir.name)):
            lines.append(_aside(run_dir / local.PID_FILE, bad, dry_run))
            lines.append("  the serve it named is untracked: `paroctl status` shows what answers")
    return lines


def _pid_problem(runs: Path, name: str) -> str | None:
    try:
        local.LocalRuntime(runs).pid_record(name)
    except (RuntimeFailure, StateError) as exc:
        return exc.message[:200]
    return None


def _aside(path: Path, why: str, dry_run: bool) -> str:
    if dry_run:
        return f"would move {path} aside ({why})"
    try:
        target = move_aside(path)
    except OSError as exc:
        raise StateError(f"{path}: cannot move it aside ({exc.strerror}); move it by hand") from exc
    return f"moved {path} aside to {target.name} ({why})"
