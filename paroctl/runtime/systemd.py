"""systemd through systemctl: argv builders (pure) and the few calls paroctl makes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from paroctl import proc, state
from paroctl.errors import StateError
from paroctl.profiles import Profile

Scope = Literal["system", "user"]


def systemctl_argv(scope: Scope, *args: str) -> list[str]:
    """A systemctl command line for a scope."""
    return ["systemctl", *(["--user"] if scope == "user" else []), *args]


def unit_dir(scope: Scope, quadlet: bool) -> Path:
    """Where unit (or Quadlet) files are installed; PAROCTL_UNIT_DIR overrides for tests/chroots."""
    override = state.env("PAROCTL_UNIT_DIR")
    if override:
        return Path(override)
    if scope == "user":
        base = Path(state.env("XDG_CONFIG_HOME", "~/.config") or "~/.config").expanduser()
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


def install_plan(profile: Profile, fmt: Literal["service", "quadlet"], reload: bool) -> InstallPlan:
    """The files and commands that install a profile's unit (or Quadlet file) and env list."""
    from paroctl import engine, render

    scope = profile.body.runtime.scope
    unit_art = render.render(profile, fmt)
    env_art = render.render(profile, "env")
    env_path = Path(engine.layout(profile).env_file)
    files = (
        (unit_dir(scope, fmt == "quadlet") / unit_art.filename, unit_art.content, 0o644),
        # No secrets in the env list (they come from the 0600 secrets file), so 0644 is safe.
        (env_path, env_art.content, 0o644),
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


def install_diff(profile: Profile, fmt: Literal["service", "quadlet"]) -> str:
    """Unified diff between installed and freshly rendered files ('' when identical)."""
    import difflib

    plan = install_plan(profile, fmt, reload=False)
    chunks: list[str] = []
    for path, text, _mode in plan.files:
        try:
            installed = path.read_text()
        except FileNotFoundError:
            chunks.append(f"{path}: not installed\n")
            continue
        chunks.extend(
            difflib.unified_diff(
                installed.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{path} (installed)",
                tofile=f"{path} (rendered)",
            )
        )
    return "".join(chunks)
