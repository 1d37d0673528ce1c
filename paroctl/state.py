"""PAROCTL_HOME, resource lookup, atomic writes, the lock; the one module that reads os.environ."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from paroctl.errors import StateError

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PACKAGE_DIR.parent

DEFAULT_HOME = "~/.local/share/paroctl"


def env(name: str, default: str | None = None) -> str | None:
    """Read one environment variable (the only place paroctl reads the environment)."""
    value = os.environ.get(name)
    return default if value in (None, "") else value


def environ() -> Mapping[str, str]:
    """A read-only view of the whole environment, for passing to child processes."""
    return dict(os.environ)


def home() -> Path:
    """PAROCTL_HOME: where state, logs, results and the CPU demo's venv and model live."""
    return Path(env("PAROCTL_HOME", DEFAULT_HOME) or DEFAULT_HOME).expanduser()


def cache_dir() -> Path:
    """PAROCTL_CACHE: large, shareable downloads (the CPU demo's vLLM venv, converted models)."""
    return Path(env("PAROCTL_CACHE", "~/.cache/paroctl") or "~/.cache/paroctl").expanduser()


def resource_path(name: str) -> Path:
    """A data directory or file shipped with paroctl: the repository copy, else the wheel's."""
    overrides = {"profiles": "PAROCTL_PROFILES_DIR", "knobs.yaml": "PAROCTL_KNOB_REGISTRY"}
    if name in overrides and (override := env(overrides[name])):
        return Path(override).expanduser()
    repo_names = {"knobs.yaml": "plugin/paro_vllm/knobs.yaml"}
    repo = _REPO_DIR / repo_names.get(name, name)
    return repo if repo.exists() else _PACKAGE_DIR / "_data" / name


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write a file so a reader sees the old or the new content, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
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
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StateError(
                f"another paroctl holds {lock_path}; wait for it to finish or stop it"
            ) from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield lock_path


def debug() -> bool:
    """PAROCTL_DEBUG=1: print tracebacks of unexpected errors instead of only logging them."""
    return env("PAROCTL_DEBUG") == "1"


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


def read_live() -> dict[str, Any] | None:
    """The live serve's record, or None when nothing is recorded as serving."""
    try:
        data = json.loads(live_path().read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise StateError(f"{live_path()}: unreadable ({exc}); `paroctl stop` resets it") from exc
    return data if isinstance(data, dict) else None


def write_live(record: Mapping[str, Any]) -> None:
    """Record the live serve (atomically)."""
    atomic_write(live_path(), json.dumps(dict(record), indent=2, sort_keys=True) + "\n")


def clear_live() -> None:
    """Record that nothing serves."""
    with contextlib.suppress(FileNotFoundError):
        live_path().unlink()
