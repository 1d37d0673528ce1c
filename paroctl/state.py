"""PAROCTL_HOME, resource lookup, atomic writes, the lock, the live pointer (its variables are read
through paroctl/env.py, the one module that reads os.environ)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from paroctl import env as _env
from paroctl.errors import StateError
from paroctl.records import LiveRecord

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent

DEFAULT_HOME = "~/.local/share/paroctl"


def home() -> Path:
    """PAROCTL_HOME: where state, logs, results and the CPU demo's venv and model live."""
    return Path(_env.get("PAROCTL_HOME", DEFAULT_HOME) or DEFAULT_HOME).expanduser()


def cache_dir() -> Path:
    """PAROCTL_CACHE: large, shareable downloads (the CPU demo's vLLM venv, converted models)."""
    return Path(_env.get("PAROCTL_CACHE", "~/.cache/paroctl") or "~/.cache/paroctl").expanduser()


def resource_path(name: str) -> Path:
    """A data directory or file shipped with paroctl: the repository copy, else the wheel's."""
    overrides = {"profiles": "PAROCTL_PROFILES_DIR", "knobs.yaml": "PAROCTL_KNOB_REGISTRY"}
    if name in overrides and (override := _env.get(overrides[name])):
        return Path(override).expanduser()
    repo_names = {"knobs.yaml": "plugin/paro_vllm/knobs.yaml"}
    repo = _REPO_DIR / repo_names.get(name, name)
    return repo if repo.exists() else _PACKAGE_DIR / "_data" / name


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write a file so a reader sees the old or the new content, never a torn one; durable:
    fsynced before the rename (off only for caches, which may be lost)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename or unlink in it) to disk, where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not there (nothing to flush) or not openable: the file itself was fsynced
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(name: str = "box") -> Iterator[Path]:
    """Hold an exclusive, non-blocking lock under PAROCTL_HOME for the duration of a block."""
    lock_path = home() / "locks" / f"{name}.lock"
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW and no O_TRUNC: a symlink planted at the lock path (to /etc/passwd, say) is
        # refused instead of followed, and an existing file is never emptied on open.
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateError(_lock_problem(lock_path, exc)) from exc
    with os.fdopen(fd, "r+") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateError(f"{lock_path}: not a regular file; remove it (`paroctl repair`)")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StateError(
                f"another paroctl holds {lock_path}; wait for it to finish or stop it"
            ) from exc
        # The pid is a courtesy for whoever finds the lock held; it is written only into a file
        # that is ours alone (a hard link to a foreign file has st_nlink > 1).
        if info.st_uid == os.geteuid() and info.st_nlink == 1:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        yield lock_path


def _lock_problem(lock_path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"{lock_path}: is a symbolic link; paroctl does not follow it (remove it)"
    if exc.errno == errno.EISDIR:
        return f"{lock_path}: is a directory; remove it (`paroctl repair` moves it aside)"
    return f"{lock_path}: cannot open the lock ({exc.strerror}); check PAROCTL_HOME ({home()})"


def debug() -> bool:
    """PAROCTL_DEBUG=1: print tracebacks of unexpected errors instead of only logging them."""
    return _env.get("PAROCTL_DEBUG") == "1"


def write_crash_log(text: str) -> Path | None:
    """Keep a traceback under PAROCTL_HOME/logs (else the temp dir); None when neither works."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"crash-{stamp}-{os.getpid()}.log"
    # A broken PAROCTL_HOME may be the very crash being logged: fall back to the temp dir.
    for directory in (home() / "logs", Path(tempfile.gettempdir())):
        try:
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
            return path
        except OSError:
            continue
    return None


# --- the live pointer: which profile serves now, written only by the switch ---------------------


def live_path() -> Path:
    """The JSON file naming the live serve (profile, address, boot id)."""
    return home() / "live.json"


def read_live() -> LiveRecord | None:
    """The live serve's record, or None when nothing is recorded as serving."""
    data, problem = _load_live()
    if problem:
        raise StateError(damaged(live_path(), problem))
    return None if data is None else LiveRecord.from_dict(data)


def live_damage() -> str | None:
    """Why live.json cannot be used, or None when it is sound or absent."""
    return _load_live()[1]


def _load_live() -> tuple[dict[str, Any] | None, str | None]:
    try:
        raw = live_path().read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"not JSON ({exc})"
    problem = live_problem(data)
    return (None, problem) if problem else (data, None)


def damaged(path: Path, why: str) -> str:
    """The one message for a damaged state file: what is wrong and the way out."""
    return (
        f"{path}: damaged: {why}; `paroctl repair` moves it aside (kept, with a timestamp), "
        "then `paroctl status` shows what serves"
    )


# What every reader of live.json relies on; the switch writes more (records.BootRecord), all
# optional here (records.LiveRecord gives each a default).
_LIVE_REQUIRED = {"profile": str, "host": str, "port": int}
_LIVE_TYPED: dict[str, type | tuple[type, ...]] = {
    "hash": str,
    "runtime": str,
    "scope": str,
    "served_names": list,
    "grace_s": (int, float),
    "kv_tokens": (int, type(None)),
}


def live_problem(data: Any) -> str | None:
    """Why a parsed live.json cannot be trusted, or None when its fields are usable."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    missing = [key for key in _LIVE_REQUIRED if key not in data]
    if missing:
        return f"lacks {', '.join(missing)}"
    for key, kind in (*_LIVE_REQUIRED.items(), *_LIVE_TYPED.items()):
        if key in data and (not isinstance(data[key], kind) or isinstance(data[key], bool)):
            return f"{key}: unexpected value {str(data[key])[:60]!r}"
    if not 1 <= data["port"] <= 65535:
        return f"port: {data['port']} is not a TCP port"
    names = data.get("served_names", [])
    if not all(isinstance(n, str) for n in names):
        return "served_names: expected a list of names"
    return None


def write_live(record: LiveRecord) -> None:
    """Record the live serve (atomically)."""
    atomic_write(live_path(), json.dumps(record.as_dict(), indent=2, sort_keys=True) + "\n")


def clear_live() -> None:
    """Record that nothing serves."""
    with contextlib.suppress(FileNotFoundError):
        live_path().unlink()
