"""systemd through systemctl: argv builders (pure), unit installation, and SystemdRuntime."""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from paroctl import env, proc, state
from paroctl.errors import RuntimeFailure, StateError
from paroctl.serve import render
from paroctl.serve.plan import ServePlan
from paroctl.serve.runtime.base import ServeSpec

Scope = Literal["system", "user"]


def systemctl_argv(scope: Scope, *args: str) -> list[str]:
    """A systemctl command line for a scope."""
    return ["systemctl", *(["--user"] if scope == "user" else []), *args]


def unit_dir(scope: Scope, quadlet: bool) -> Path:
    """Where unit (or Quadlet) files are installed; PAROCTL_UNIT_DIR overrides for tests/chroots."""
    override = env.get("PAROCTL_UNIT_DIR")
    if override:
        return Path(override)
    if scope == "user":
        base = Path(env.get("XDG_CONFIG_HOME", "~/.config") or "~/.config").expanduser()
        return base / ("containers/systemd" if quadlet else "systemd/user")
    return Path("/etc/containers/systemd" if quadlet else "/etc/systemd/system")


def daemon_reload(scope: Scope) -> None:
    """Make systemd re-read unit files (and run the Quadlet generator)."""
    proc.run(systemctl_argv(scope, "daemon-reload"), timeout=60)


# --- installing a profile's unit ----------------------------------------------------------------


@dataclass(frozen=True)
class InstallPlan:
    """What `unit install` writes and runs, so --dry-run can print exactly that."""

    files: tuple[tuple[Path, str, int], ...]
    commands: tuple[tuple[str, ...], ...]

    def describe(self) -> list[str]:
        """Human-readable lines: each file with its mode, then each command."""
        lines = [
            f"write {path} (mode {mode:o}, {len(text)} bytes)" for path, text, mode in self.files
        ]
        return lines + [f"run   {proc.describe(argv)}" for argv in self.commands]


def plan_install(serve: ServePlan, fmt: Literal["service", "quadlet"], reload: bool) -> InstallPlan:
    """The files and commands that install a serve plan's unit (or Quadlet file) and env list."""
    scope = serve.profile.body.runtime.scope
    unit_art = render.artefact(serve, fmt)
    env_art = render.artefact(serve, "env")
    files = (
        (unit_dir(scope, fmt == "quadlet") / unit_art.filename, unit_art.content, 0o644),
        # No secrets in the env list (they come from the 0600 secrets file), so 0644 is safe.
        (Path(serve.layout.env_file), env_art.content, 0o644),
    )
    commands = (tuple(systemctl_argv(scope, "daemon-reload")),) if reload else ()
    return InstallPlan(files=files, commands=commands)


def install_apply(plan: InstallPlan) -> None:
    """Write the plan's files atomically, then run its commands."""
    for path, text, mode in plan.files:
        try:
            state.atomic_write(path, text, mode)
        except OSError as exc:
            raise StateError(
                f"cannot write {path}: {exc.strerror}; run as a user who can, "
                f"or set PAROCTL_UNIT_DIR"
            ) from exc
    for argv in plan.commands:
        proc.run(argv, timeout=60)


# --- the runtime: serves as systemd units --------------------------------------------------------

# Characters systemd accepts in a unit name; anything else would be escaped into another unit.
_UNIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:_.-]*$")
SHOW_TIMEOUT_S = 30.0
# The header every unit paroctl renders carries (units/service.j2, units/container.j2).
RENDERED_RE = re.compile(r"^# Rendered by paroctl from \S+ \(profile (\S+), hash (\w+)\)", re.M)
START_TIMEOUT_S = 120.0
# After SIGKILL the kernel frees a process in well under a second; longer means a process stuck in
# uninterruptible sleep (a hung device or mount), which the operator has to look at.
KILL_TIMEOUT_S = 15.0
POLL_S = 0.1
FOLLOW_POLL_S = 0.5
JOURNAL_TAIL_LINES = 30
_STOPPED = ("inactive", "failed")
_CURSOR_PREFIX = "-- cursor: "
# Where a unit's cgroup.procs lives for its ControlGroup path: cgroup v2, then v1 (systemd's
# named hierarchy), then the v2 half of a hybrid setup.
_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")


def unit_for(name: str) -> str:
    """The systemd unit that runs serve `name`."""
    if not _UNIT_NAME.match(name):
        raise RuntimeFailure(f"invalid serve name {name!r}: letters, digits, '-', '_', '.' only")
    return f"paroctl-{name}.service"


def parse_show(text: str) -> dict[str, str]:
    """Parse `systemctl show` KEY=VALUE lines (values may contain '=')."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = value
    return props


def split_cursor(text: str) -> tuple[list[str], str | None]:
    """Split `journalctl --show-cursor` output into the entry lines and the trailing cursor."""
    lines = text.splitlines()
    if lines and lines[-1].startswith(_CURSOR_PREFIX):
        return lines[:-1], lines[-1][len(_CURSOR_PREFIX) :]
    return lines, None


SYSTEMD_BOOTED = state.SYSTEMD_BOOTED  # present exactly when systemd is init (sd_booted(3))


class SystemdRuntime:
    """Serves as systemd units `paroctl-<name>.service`, driven through systemctl/journalctl.

    `prefix` goes in front of every command, to reach a systemd elsewhere: `("docker", "exec",
    "box")` for one inside a container, `("ssh", "box")` for another machine (the command is then
    shell-quoted into one word, as ssh wants). The units are
    installed beforehand (plan_install/install_apply, then daemon_reload): a unit file, not the
    ServeSpec, is what systemd runs, so start() uses only the spec's name.
    """

    def __init__(self, scope: Scope = "system", prefix: Sequence[str] = ()) -> None:
        self.scope: Scope = scope
        self.prefix: tuple[str, ...] = tuple(prefix)

    # -- command lines (pure) --

    def command(self, *argv: str) -> list[str]:
        """argv run where this runtime's systemd is: behind the prefix."""
        if self.prefix and Path(self.prefix[0]).name == "ssh":
            # ssh hands its words to the remote shell as one line; journal cursors hold ';'.
            return [*self.prefix, shlex.join(argv)]
        return [*self.prefix, *argv]

    def systemctl(self, *args: str) -> list[str]:
        """A systemctl command line for this runtime's scope and prefix."""
        return self.command(*systemctl_argv(self.scope, *args))

    def journalctl(self, *args: str) -> list[str]:
        """A journalctl command line for this runtime's scope and prefix."""
        return self.command("journalctl", *(["--user"] if self.scope == "user" else []), *args)

    # -- inspection --

    def show(self, name: str, *props: str) -> dict[str, str]:
        """Selected `systemctl show` properties of the unit (a missing unit reads inactive)."""
        if not self.prefix and not SYSTEMD_BOOTED.is_dir():
            # sd_booted(3)'s test: asking systemctl here only costs a process (~15 ms) to learn
            # the same thing; `paroctl status` and a first switch ask once per systemd profile.
            raise RuntimeFailure(
                f"no systemd runs on this machine ({SYSTEMD_BOOTED} is absent): "
                f"cannot query {unit_for(name)}"
            )
        argv = self.systemctl("show", "-p", ",".join(props), "--", unit_for(name))
        return parse_show(proc.run(argv, timeout=SHOW_TIMEOUT_S).stdout)

    def is_active(self, name: str) -> bool:
        """Whether the unit runs (starting and stopping count; waiting to restart does not)."""
        props = self.show(name, "ActiveState", "SubState")
        # In auto-restart the serve has died and systemd only waits out RestartSec: no process
        # answers, and a switch waiting on it must learn that it died.
        return props.get("ActiveState") not in _STOPPED and props.get("SubState") != "auto-restart"

    def main_pid(self, name: str) -> int | None:
        """The unit's main process id (as the unit's systemd sees it) while it runs, else None."""
        pid = int(self.show(name, "MainPID").get("MainPID") or 0)
        return pid or None

    def running_hash(self, name: str) -> str | None:
        """The profile hash in the header paroctl rendered into the unit, while the unit runs."""
        if not self.is_active(name):
            return None
        done = proc.run(
            self.systemctl("cat", "--", unit_for(name)), timeout=SHOW_TIMEOUT_S, check=False
        )
        match = RENDERED_RE.search(done.stdout)
        return match.group(2) if match and match.group(1) == name else None

    def log_path(self, name: str) -> Path:
        """Where the logs are: not a file but the journal, written `journal:<unit>`."""
        return Path(f"journal:{unit_for(name)}")

    def invocation_id(self, name: str) -> str | None:
        """The id of the unit's current (or, once stopped, last) run, or None if it never ran."""
        current = self.show(name, "InvocationID").get("InvocationID")
        if current:
            return current
        # systemd clears InvocationID when the unit stops; its journal still has the last one.
        argv = self.journalctl(
            "-u",
            unit_for(name),
            "-r",
            "-n",
            "50",
            "-o",
            "json",
            "--output-fields=INVOCATION_ID,_SYSTEMD_INVOCATION_ID",
            "--no-pager",
        )
        for line in proc.run(argv, timeout=SHOW_TIMEOUT_S, check=False).stdout.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            found = entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID")
            if isinstance(found, str) and found:
                return found
        return None

    def cgroup_pids(self, name: str) -> list[int]:
        """Processes left in the unit's cgroup (systemd drops the cgroup once it is empty)."""
        group = self.show(name, "ControlGroup").get("ControlGroup", "")
        if not group:
            return []
        for root in _CGROUP_ROOTS:
            argv = self.command("cat", f"{root}{group}/cgroup.procs")
            done = proc.run(argv, timeout=SHOW_TIMEOUT_S, check=False)
            if done.returncode == 0:
                return [int(pid) for pid in done.stdout.split()]
        return []

    # -- control --

    def daemon_reload(self) -> None:
        """Make this runtime's systemd re-read unit files."""
        proc.run(self.systemctl("daemon-reload"), timeout=60)

    def start(self, spec: ServeSpec) -> None:
        """`systemctl start` the installed unit of spec.name (its argv and env are in the unit)."""
        unit = unit_for(spec.name)
        props = self.show(spec.name, "LoadState", "ActiveState", "SubState")
        if props.get("LoadState") != "loaded":
            raise RuntimeFailure(
                f"{unit} is not loaded (LoadState={props.get('LoadState') or '?'}): install it "
                f"(`paroctl unit install {spec.name}`) and run `systemctl daemon-reload`"
            )
        if props.get("ActiveState") not in _STOPPED and props.get("SubState") != "auto-restart":
            raise RuntimeFailure(f"{unit} is already {props.get('ActiveState')}; stop it first")
        # An explicit start is the operator's decision: clear the start-rate limit that earlier
        # crash-restarts may have used up (StartLimitBurst), which would refuse it otherwise.
        proc.run(self.systemctl("reset-failed", "--", unit), timeout=SHOW_TIMEOUT_S, check=False)
        done = proc.run(self.systemctl("start", "--", unit), timeout=START_TIMEOUT_S, check=False)
        if done.returncode != 0:
            reason = (done.stderr.strip() or done.stdout.strip()) or f"exit {done.returncode}"
            tail = self._tail(spec.name)
            raise RuntimeFailure(
                f"cannot start {unit}: {reason}\n--- last journal lines ---\n{tail}"
            )

    def stop(self, name: str, grace_s: float) -> None:
        """Stop the unit, SIGKILL it after grace_s, return once no process of it is left."""
        unit = unit_for(name)
        if not self._running(name) and not self.cgroup_pids(name):
            return
        # --no-block: the caller's grace_s, not the unit's TimeoutStopSec, decides when to kill.
        proc.run(self.systemctl("stop", "--no-block", "--", unit), timeout=SHOW_TIMEOUT_S)
        if not self._wait_stopped(name, grace_s):
            self._kill(unit)
            if not self._wait_stopped(name, KILL_TIMEOUT_S):
                raise RuntimeFailure(
                    f"{unit} still runs {KILL_TIMEOUT_S:g} s after SIGKILL; inspect it with "
                    f"`{proc.describe(self.systemctl('status', '--', unit))}`"
                )
        # KillMode=process (or a crashed stop) can leave processes behind an inactive unit.
        if self.cgroup_pids(name):
            self._kill(unit)
            deadline = time.monotonic() + KILL_TIMEOUT_S
            while left := self.cgroup_pids(name):
                if time.monotonic() >= deadline:
                    raise RuntimeFailure(
                        f"{unit}: processes {left} survived SIGKILL for {KILL_TIMEOUT_S:g} s"
                    )
                time.sleep(POLL_S)

    def logs(self, name: str, follow: bool = False) -> Iterator[str]:
        """Journal lines of the unit's current run only; with follow, new ones while it runs."""
        invocation = self.invocation_id(name)
        if invocation is None:
            return
        # The serve's own output carries _SYSTEMD_INVOCATION_ID; systemd's lines about the unit
        # (started, exited with code, killed) carry INVOCATION_ID.
        base = (
            f"_SYSTEMD_INVOCATION_ID={invocation}",
            "+",
            f"INVOCATION_ID={invocation}",
            "-o",
            "cat",
            "--all",
            "--no-pager",
            "--show-cursor",
        )
        cursor: str | None = None
        draining = not follow
        while True:
            after = (f"--after-cursor={cursor}",) if cursor else ()
            done = proc.run(self.journalctl(*base, *after), timeout=SHOW_TIMEOUT_S, check=False)
            lines, new_cursor = split_cursor(done.stdout)
            yield from lines
            cursor = new_cursor or cursor
            if draining:
                return
            # Polling with a cursor, not `journalctl -f`: an abandoned generator leaves nothing
            # running on the far side of the prefix (a docker exec or ssh session).
            props = self.show(name, "ActiveState", "MainPID", "InvocationID")
            stopped = props.get("ActiveState") in _STOPPED and props.get("MainPID") == "0"
            if stopped or props.get("InvocationID") not in ("", invocation):
                draining = True  # one more pass for lines journald wrote after our last read
                continue
            time.sleep(FOLLOW_POLL_S)

    # -- helpers --

    def _running(self, name: str) -> bool:
        props = self.show(name, "ActiveState", "MainPID")
        return props.get("ActiveState") not in _STOPPED or props.get("MainPID", "0") != "0"

    def _wait_stopped(self, name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._running(name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _kill(self, unit: str) -> None:
        # check=False: the unit may have emptied between our look and the kill; that is success.
        argv = self.systemctl("kill", "--signal=SIGKILL", "--", unit)
        proc.run(argv, timeout=SHOW_TIMEOUT_S, check=False)

    def _tail(self, name: str) -> str:
        argv = self.journalctl(
            "-u", unit_for(name), "-n", str(JOURNAL_TAIL_LINES), "-o", "cat", "--all", "--no-pager"
        )
        return proc.run(argv, timeout=SHOW_TIMEOUT_S, check=False).stdout.strip() or "(empty)"
