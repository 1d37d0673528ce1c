"""A serve as a detached local process group: the CPU demo's runtime and the tests' (Linux only)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from paroctl import env, state
from paroctl.errors import RuntimeFailure, StateError
from paroctl.procfs import alive as _alive
from paroctl.procfs import group_members, kernel_boot_id, read_proc
from paroctl.serve.runtime.base import ServeSpec

PID_FILE = "serve.pid"
LOG_FILE = "serve.log"
# A whole process group must be gone this long after SIGKILL, or something is badly wrong
# (a process stuck in uninterruptible sleep) and the operator has to look.
KILL_TIMEOUT_S = 10.0
POLL_S = 0.05
FOLLOW_POLL_S = 0.02  # a read of an unchanged file costs microseconds
# Whether a followed serve still runs is asked less often (a pid file and /proc read, ~1 ms of a
# slow core): at every 20 ms poll that was 5% of a core taken from the booting server.
ALIVE_CHECK_S = 0.25


@dataclass(frozen=True)
class PidRecord:
    """What start() wrote down: enough to recognise the very process it started, later."""

    pid: int
    start_ticks: int
    boot_id: str
    argv: tuple[str, ...]
    host: str
    port: int
    started_at: float
    hash: str = ""


def wait_exit(pid: int, timeout: float) -> None:
    """Return when pid exits (a pidfd wakes us at once: no poll interval to wait out) or after
    timeout; where pidfds are missing (Linux < 5.3, or not allowed) it just sleeps timeout."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone already (ProcessLookupError), or no pidfd here
        if os.path.exists(f"/proc/{pid}"):
            time.sleep(timeout)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))
    finally:
        os.close(fd)


class LocalRuntime:
    """Serves as detached process groups, with pid and log files under PAROCTL_HOME/runs/<name>/."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else state.home() / "runs"
        # Popen handles of serves started by this process, so exited ones are reaped, not zombies.
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run_dir(self, name: str) -> Path:
        """The directory holding one serve's pid file and logs."""
        if not name or "/" in name or name.startswith("."):
            raise RuntimeFailure(f"invalid serve name {name!r}: use a plain file name")
        return self.root / name

    def log_path(self, name: str) -> Path:
        """Where the serve's current log is written (the previous boot's is `serve.log.1`)."""
        return self.run_dir(name) / LOG_FILE

    def pid_record(self, name: str) -> PidRecord | None:
        """The pid file's record of the last start, or None when there is none."""
        path = self.run_dir(name) / PID_FILE
        try:
            data = json.loads(path.read_text())
            return PidRecord(
                pid=int(data["pid"]),
                start_ticks=int(data["start_ticks"]),
                boot_id=str(data["boot_id"]),
                argv=tuple(data["argv"]),
                host=str(data["host"]),
                port=int(data["port"]),
                started_at=float(data["started_at"]),
                hash=str(data.get("hash", "")),
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(state.damaged(path, f"unreadable pid file ({exc})")) from exc

    def _reap(self, pid: int) -> None:
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]

    def _ours(self, record: PidRecord) -> bool:
        # A pid number is reused after its process is gone; the start time and boot id are not.
        self._reap(record.pid)
        info = read_proc(record.pid)
        return (
            _alive(info)
            and info is not None
            and info.start_ticks == record.start_ticks
            and record.boot_id == kernel_boot_id()
        )

    def is_active(self, name: str) -> bool:
        """Whether the process we started under this name is still running (not a reused pid)."""
        record = self.pid_record(name)
        return record is not None and self._ours(record)

    def main_pid(self, name: str) -> int | None:
        """The serve's main process id while it is active, else None."""
        record = self.pid_record(name)
        return record.pid if record is not None and self._ours(record) else None

    def running_hash(self, name: str) -> str | None:
        """The profile hash start() recorded for the serve, while it runs."""
        record = self.pid_record(name)
        return record.hash or None if record is not None and self._ours(record) else None

    def start(self, spec: ServeSpec) -> None:
        """Start spec detached (own session, no stdin, output to the log); keep the last log."""
        if self.is_active(spec.name):
            raise RuntimeFailure(
                f"serve {spec.name!r} is already running (pid {self.main_pid(spec.name)}); "
                "stop it first"
            )
        run_dir = self.run_dir(spec.name)
        log = run_dir / LOG_FILE
        for planted in (run_dir.parent, run_dir, log):  # never written through to a link's target
            if planted.is_symlink():
                raise StateError(state.damaged(planted, state.SYMLINK))
        run_dir.mkdir(parents=True, exist_ok=True)
        if log.exists():
            log.replace(run_dir / f"{LOG_FILE}.1")
        child_env = dict(env.environ())
        child_env.update(spec.env)
        with state.create_file(log) as log_handle, open(os.devnull, "rb") as devnull:
            try:
                # A new session makes the serve its own process-group leader: stop() signals the
                # whole group (vLLM's engine-core workers too), and the operator's Ctrl-C does not.
                child = subprocess.Popen(
                    list(spec.argv),
                    stdin=devnull,
                    stdout=log_handle,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise RuntimeFailure(f"cannot start serve {spec.name!r}: {exc}") from exc
        self._children[child.pid] = child
        try:
            self._record(spec, child.pid, run_dir / PID_FILE)
        except BaseException:
            # Without its pid file nothing finds this serve again (a full disk, or a signal
            # between the start and the record): it must not run on untracked.
            self._signal_group(child.pid, signal.SIGKILL)
            child.wait()
            self._children.pop(child.pid, None)
            raise

    @staticmethod
    def _record(spec: ServeSpec, pid: int, path: Path) -> None:
        info = read_proc(pid)
        record = {
            "pid": pid,
            "start_ticks": info.start_ticks if info is not None else -1,
            "boot_id": kernel_boot_id(),
            "argv": list(spec.argv),
            "host": spec.host,
            "port": spec.port,
            "started_at": time.time(),
            "hash": spec.hash,
        }
        try:
            state.atomic_write(path, json.dumps(record, indent=2) + "\n")
        except (OSError, StateError) as exc:
            why = exc.message if isinstance(exc, StateError) else exc.strerror or str(exc)
            raise StateError(
                f"{path}: cannot record the serve {spec.name!r} ({why}); it was stopped again"
            ) from exc

    def _wait_group_gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self._reap(pid)
            members = group_members(pid)
            if not members:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # The leader first (vLLM's API server outlives its engine): woken by its exit.
            wait_exit(pid if pid in members else members[0], min(left, POLL_S))

    def stop(self, name: str, grace_s: float) -> None:
        """SIGTERM the serve's process group, SIGKILL it after grace_s, return once all are gone."""
        record = self.pid_record(name)
        if record is None:
            return
        pid_file = self.run_dir(name) / PID_FILE
        leader = read_proc(record.pid)
        if _alive(leader) and not self._ours(record):
            # The pid now belongs to someone else: our serve (and its group) ended long ago.
            pid_file.unlink(missing_ok=True)
            return
        self._signal_group(record.pid, signal.SIGTERM)
        if not self._wait_group_gone(record.pid, grace_s):
            self._signal_group(record.pid, signal.SIGKILL)
            if not self._wait_group_gone(record.pid, KILL_TIMEOUT_S):
                left = group_members(record.pid)
                raise RuntimeFailure(
                    f"serve {name!r}: processes {left} of group {record.pid} survived SIGKILL "
                    f"for {KILL_TIMEOUT_S:g} s; inspect them with "
                    f"`ps -o pid,stat,cmd -g {record.pid}`"
                )
        child = self._children.pop(record.pid, None)
        if child is not None:
            child.wait()
        pid_file.unlink(missing_ok=True)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        # ProcessLookupError: the group emptied between our look and the signal; that is success.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)

    def logs(self, name: str, follow: bool = False) -> Iterator[str]:
        """The current log's lines; with follow, keep yielding new ones while the serve runs."""
        path = self.log_path(name)
        if not path.exists():
            return
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            pending = ""
            draining = not follow
            next_check = 0.0
            while True:
                chunk = handle.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith("\n"):
                        yield pending.rstrip("\r\n")
                        pending = ""
                    continue
                if draining:
                    if pending:
                        yield pending.rstrip("\r\n")
                    return
                now = time.monotonic()
                if now >= next_check:
                    if not self.is_active(name):
                        # One more pass: a dying serve's last lines may have landed after our EOF.
                        draining = True
                        continue
                    next_check = now + ALIVE_CHECK_S
                time.sleep(FOLLOW_POLL_S)
