"""`paroctl repair`: check the state files under PAROCTL_HOME (the live pointer, the switch
journal, the results store) and move the damaged ones aside (kept, never deleted).

Above `state`, the journal and the results store: it asks each whether its file is sound.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from paroctl import state
from paroctl.errors import StateError
from paroctl.store import results
from paroctl.switch import journal


def move_aside(path: Path) -> Path:
    """Rename a damaged file or directory to `<name>.corrupt-<UTC stamp>`; never delete it."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    serial = 1
    while target.exists() or target.is_symlink():
        serial += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{serial}")
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
    lines: list[str] = []
    locks = root / "locks"
    for lock in sorted(locks.glob("*.lock")) if locks.is_dir() else ():
        if lock.is_symlink() or not lock.is_file():
            lines.append(_aside(lock, "not a regular file", dry_run))
    if dry_run:
        return lines + _state_problems(dry_run)
    with state.locked():
        return lines + _state_problems(dry_run)


def _state_problems(dry_run: bool) -> list[str]:
    lines: list[str] = []
    why = state.live_damage()
    if why:
        lines.append(_aside(state.live_path(), why, dry_run))
        lines.append(
            "  then nothing is recorded as live; a serve that still runs shows in `paroctl "
            "status` (found through its runtime): `paroctl adopt NAME` or `paroctl stop`"
        )
    try:
        journal.read()
    except StateError as exc:
        lines.append(_aside(journal.path(), exc.message.split(": ", 1)[-1][:200], dry_run))
        lines.append("  a switch was under way: check what serves before the next switch")
    store = results.default_path()
    problem = results.store_problem(store) if store.is_file() else None
    if problem:
        lines.append(_aside(store, problem, dry_run))
        for extra in (store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
            if extra.exists():
                lines.append(_aside(extra, "belongs to the damaged store", dry_run))
        lines.append("  a fresh results store is created on the next gate run")
    return lines or [f"{state.home()}: state files are sound; nothing to repair"]


def _aside(path: Path, why: str, dry_run: bool) -> str:
    if dry_run:
        return f"would move {path} aside ({why})"
    try:
        target = move_aside(path)
    except OSError as exc:
        raise StateError(f"{path}: cannot move it aside ({exc.strerror}); move it by hand") from exc
    return f"moved {path} aside to {target.name} ({why})"
