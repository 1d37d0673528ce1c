"""PAROCTL_HOME, resource lookup, atomic writes, the lock, the live pointer (its variables are read
through paroctl/env.py, the one module that reads os.environ)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

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
    fsynced before the rename (off only for caches, which may be lost). A full disk, a quota, a
    read-only or unwritable directory is a StateError naming the path and the cause, and leaves
    the old content (or nothing) in place."""
    raw = data.encode() if isinstance(data, str) else data
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise WriteRefused(path, exc) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def cannot_write(path: Path, exc: OSError) -> str:
    """The one message for a write into PAROCTL_HOME that the system refused (ENOSPC, EDQUOT,
    EROFS, EACCES, ...): the path and the cause."""
    return f"cannot write {path}: {exc.strerror or exc}"


class WriteRefused(StateError, OSError):
    """A write the system refused (full disk, quota, read-only, no permission): a StateError
    naming the path and the cause, and still the OSError it was (errno, strerror, filename), so
    a caller that tolerates a lost write (a cache) or adds its own advice keeps catching it."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(cannot_write(path, exc))
        self.errno, self.strerror, self.filename = exc.errno, exc.strerror, exc.filename

    def __str__(self) -> str:
        return self.message


def claim_file(path: Path, fresh: bool = False) -> tuple[int, int]:
    """The (device, inode) of the regular file at path, created empty when absent (fresh: it
    must not exist yet), never through a symlink; a link or a non-file there is damage."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if fresh else 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(damaged(path, SYMLINK)) from exc
        if exc.errno == errno.EISDIR:
            raise StateError(damaged(path, "not a regular file")) from exc
        raise WriteRefused(path, exc) from exc
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise StateError(damaged(path, "not a regular file"))
    return info.st_dev, info.st_ino


def create_file(path: Path) -> BinaryIO:
    """Open a fresh file for writing (emptied if there) without following a symlink at path: a
    link planted there is refused as damage (`paroctl repair` moves it aside), never written
    through to its target; any other refusal is a StateError naming the path and the cause."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(damaged(path, SYMLINK)) from exc
        raise WriteRefused(path, exc) from exc
    return os.fdopen(fd, "wb")


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename or unlink in it) to disk, where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not there (nothing to flush) or not openable: the file itself was fsynced
    try:
        os.fsync(fd)
    except OSError as exc:
        raise WriteRefused(directory, exc) from exc
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(name: str = "box") -> Iterator[Path]:
    """Hold an exclusive, non-blocking lock under PAROCTL_HOME for the duration of a block."""
    lock_path = home() / "locks" / f"{name}.lock"
    if lock_path.parent.is_symlink():  # O_NOFOLLOW guards the last component only
        raise StateError(damaged(lock_path.parent, SYMLINK))
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
            raise StateError(damaged(lock_path, "not a regular file"))
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StateError(
                f"another paroctl holds {lock_path}; wait for it to finish or stop it"
            ) from exc
        # The pid is a courtesy for whoever finds the lock held; it is written only into a file
        # that is ours alone (a hard link to a foreign file has st_nlink > 1).
        if info.st_uid == os.geteuid() and info.st_nlink == 1:
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(f"{os.getpid()}\n")
                handle.flush()
            except OSError as exc:
                raise WriteRefused(lock_path, exc) from exc
        yield lock_path


def _lock_problem(lock_path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return (
            f"{lock_path}: is a symbolic link; paroctl does not follow it (`paroctl repair` "
            "moves it aside)"
        )
    if exc.errno == errno.EISDIR:
        return f"{lock_path}: is a directory; remove it (`paroctl repair` moves it aside)"
    if exc.errno in (errno.ENOTDIR, errno.EEXIST) or lock_path.parent.is_symlink():
        return damaged(lock_path.parent, "not a directory of locks")
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
    present, data, problem = read_state_json(live_path())
    if not present or problem:
        return None, problem
    problem = live_problem(data)
    return (None, problem) if problem else (data, None)


def read_state_json(path: Path) -> tuple[bool, Any, str | None]:
    """(whether the file is there, its JSON value, why it cannot be read or None)."""
    raw, problem = read_state_file(path)
    if raw is None:
        return problem is not None, None, problem
    try:
        return True, json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return True, None, f"not JSON ({exc})"


# Far above what the switch writes (live.json ~1.5 KiB, the journal ~1 KiB): a larger file is
# not one of ours, and is not read into memory.
MAX_STATE_FILE = 1 << 20
SYMLINK = "a symbolic link where a file belongs (paroctl does not follow it)"


def read_state_file(path: Path) -> tuple[bytes | None, str | None]:
    """A small state file's bytes (None, None when absent), never through a symlink; or None and
    why it cannot be used (a link, not a regular file, too large, unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, SYMLINK
        return None, f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_size > MAX_STATE_FILE:
            return None, f"{info.st_size} bytes, far more than paroctl writes there"
        try:
            return handle.read(MAX_STATE_FILE + 1), None
        except OSError as exc:
            return None, f"unreadable ({exc.strerror})"


def damaged(path: Path, why: str) -> str:
    """The one message for a damaged state file: what is wrong and the way out."""
    return (
        f"{path}: damaged: {why}; `paroctl repair` moves it aside (kept, with a timestamp), "
        "then `paroctl status` shows what serves"
    )


# What every reader of live.json relies on; the switch writes more (records.BootRecord), all
# optional here (records.LiveRecord gives each a default).
_LIVE_REQUIRED = ("profile", "host", "port")

# A name a profile can have (paroctl/profile/profiles.py: NAME_RE, MAX_NAME; this module sits
# below the profile loader, so the rule is restated, and tests/test_state_repair.py holds the two
# equal): a recorded name becomes a path (runs/NAME, a unit file), so `../x` is damage.
PROFILE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
RUNTIMES = ("local", "systemd")
SCOPES = ("system", "user")
# sd_booted(3): the directory exists exactly when systemd is PID 1 here.
SYSTEMD_BOOTED = Path("/run/systemd/system")
_PRINTABLE = re.compile(r"[^\x00-\x20\x7f]{1,253}")


def systemd_reachable() -> str | None:
    """Why no systemd can be asked here (none booted, no PAROCTL_SYSTEMCTL_PREFIX), or None."""
    if _env.get("PAROCTL_SYSTEMCTL_PREFIX") or SYSTEMD_BOOTED.is_dir():
        return None
    return (
        f"no systemd runs on this machine ({SYSTEMD_BOOTED} is absent) and no systemd is "
        "reached through PAROCTL_SYSTEMCTL_PREFIX"
    )


def _typed(value: Any, kinds: type | tuple[type, ...]) -> bool:
    """value is of one of the JSON kinds (a bool only where bool is named: not for an int)."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return bool in kinds if isinstance(value, bool) else isinstance(value, kinds)


def serve_problem(data: Any) -> str | None:
    """Why a recorded serve identity (live.json's keys, the journal's `serve`) cannot be acted
    on, or None: wrong types, a name that is no profile name, a runtime this box cannot have."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    missing = [key for key in _LIVE_REQUIRED if key not in data]
    if missing:
        return f"lacks {', '.join(missing)}"
    checks: tuple[tuple[str, type | tuple[type, ...]], ...] = (
        ("profile", str), ("host", str), ("port", int), ("hash", str), ("runtime", str),
        ("scope", str), ("served_names", list), ("grace_s", (int, float)),
    )  # fmt: skip
    for key, kind in checks:
        if key in data and not _typed(data[key], kind):
            return f"{key}: unexpected value {str(data[key])[:60]!r}"
    if not PROFILE_NAME.fullmatch(data["profile"]):
        return f"profile: {data['profile'][:80]!r} is not a profile name"
    if not _PRINTABLE.fullmatch(data["host"]):
        return f"host: {data['host'][:80]!r} is not a host name or address"
    if not 1 <= data["port"] <= 65535:
        return f"port: {data['port']} is not a TCP port"
    if data.get("runtime", "local") not in RUNTIMES:
        return f"runtime: {data['runtime'][:40]!r} is none of {', '.join(RUNTIMES)}"
    if data.get("scope", "system") not in SCOPES:
        return f"scope: {data['scope'][:40]!r} is none of {', '.join(SCOPES)}"
    if data.get("runtime") == "systemd" and (why := systemd_reachable()):
        return f"runtime: systemd, but {why}"
    names = data.get("served_names", [])
    if not all(isinstance(n, str) and _PRINTABLE.fullmatch(n) for n in names):
        return "served_names: expected a list of names"
    grace = data.get("grace_s", 0)
    if not math.isfinite(grace) or grace < 0:
        return f"grace_s: {grace} is not a duration"
    return None


# The rest of a live record (records.LiveRecord), each optional, with the JSON types it may have.
_NONE = type(None)
_LIVE_OPTIONAL: dict[str, tuple[type, ...]] = {
    "boot_id": (str, _NONE), "knobs": (dict, _NONE), "image": (str, _NONE),
    "cache_dir": (str, _NONE), "first_boot": (bool, _NONE), "kv_tokens": (int, _NONE),
    "phases": (dict, _NONE), "started_at": (str, _NONE), "boot_s": (int, float, _NONE),
    "health_s": (int, float, _NONE), "log": (str, _NONE), "ok": (bool,), "cause": (str, _NONE),
    "since": (str, _NONE), "cpu": (dict, _NONE), "origin": (str,), "drain": (str,),
}  # fmt: skip


def live_problem(data: Any) -> str | None:
    """Why a parsed live.json cannot be trusted, or None when its fields are usable."""
    problem = serve_problem(data)
    if problem:
        return problem
    for key, kinds in _LIVE_OPTIONAL.items():
        if key in data and not _typed(data[key], kinds):
            return f"{key}: unexpected value {str(data[key])[:60]!r}"
    try:
        LiveRecord.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"not a live record ({type(exc).__name__}: {str(exc)[:80]})"
    return None


def write_live(record: LiveRecord) -> None:
    """Record the live serve (atomically)."""
    atomic_write(live_path(), json.dumps(record.as_dict(), indent=2, sort_keys=True) + "\n")


def clear_live() -> None:
    """Record that nothing serves."""
    remove(live_path())


def remove(path: Path) -> None:
    """Delete a state file (gone already is fine) and flush its directory entry; a refusal is a
    StateError naming the path and the cause."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    fsync_dir(path.parent)
