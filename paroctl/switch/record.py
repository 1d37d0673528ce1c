"""The switch's records and collaborators: the serve identity of a profile, the boot record read
back from the live pointer, the API key a serve wants, the switch's dependencies and its error.

The record types themselves live at the ground floor (paroctl/records.py) so that `state` reads
and writes the live pointer through them; this module adds what needs a profile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.errors import EXIT_INTERRUPTED, ParoctlError, ProfileError, StateError
from paroctl.events import Event, EventSink
from paroctl.profile import profiles, secrets
from paroctl.profile.profiles import Profile
from paroctl.records import BootRecord, LiveRecord, ServeRef
from paroctl.serve.runtime.base import Runtime

__all__ = [
    "BootRecord",
    "Deps",
    "LiveRecord",
    "ServeRef",
    "SwitchFailed",
    "SwitchInterrupted",
    "api_key_for",
    "api_key_named",
    "failure_cause",
    "record_from_live",
    "serve_ref",
]


class SwitchFailed(ParoctlError):
    """A switch did not end on the requested profile; the message says where the box is now."""


class SwitchInterrupted(SwitchFailed):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) stopped a switch; it rolled back (or kept what was live)
    first, and the message says where the box is now. Exit 130, as a shell reports Ctrl-C."""

    exit_code = EXIT_INTERRUPTED


# A rollback under way is what leaves the box serving: a signal that arrives during it is noted
# here (by the CLI's handler, through defer_interrupt) and answered once the rollback has ended.
_rolling_back: list[bool] = []
_deferred: list[str] = []


@contextlib.contextmanager
def rolling_back() -> Iterator[None]:
    """For the block's duration, an interruption is deferred (defer_interrupt says so)."""
    _rolling_back.append(True)
    try:
        yield
    finally:
        _rolling_back.pop()


def defer_interrupt(why: str) -> bool:
    """For a signal handler: True (and why noted) while a rollback runs, so it must not raise."""
    if _rolling_back:
        _deferred.append(why)
    return bool(_rolling_back)


def failure_cause(exc: BaseException) -> str:
    """Why a switch step failed, in one line: the error's message; for a write that failed (a full
    disk) the path and the system's reason; for a signal, which one; for a bug, type and text."""
    if isinstance(exc, ParoctlError):
        return exc.message
    if isinstance(exc, KeyboardInterrupt):
        return str(exc) or "Ctrl-C"
    if isinstance(exc, OSError):
        # A write on an open file (atomic_write's) carries no path: it was under PAROCTL_HOME.
        where = exc.filename if exc.filename is not None else f"a file under {state.home()}"
        return f"{where}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def take_deferred() -> str | None:
    """The first interruption deferred since the last call, if any (and forget them all)."""
    first = _deferred[0] if _deferred else None
    _deferred.clear()
    return first


@dataclass
class Deps:
    """The switch's collaborators; tests and the systemd-in-a-container harness swap them."""

    runtime_for: Callable[[str, str], Runtime]
    events: EventSink = lambda event: None
    record_boot: Callable[[Mapping[str, Any]], None] | None = None

    def keep(self, boot: Mapping[str, Any]) -> None:
        """Store a boot; a store failure is reported, never a reason to roll a good serve back."""
        if self.record_boot is None:
            return
        try:
            self.record_boot(boot)
        except ParoctlError as exc:
            self.events(Event("warn", f"boot not recorded in the results store: {exc.message}"))


def serve_ref(profile: Profile, running_hash: str | None = None) -> ServeRef:
    """The identity of profile's serve (running_hash: the hash it was started from, if not the
    profile's own)."""
    body = profile.body
    return ServeRef(
        profile=profile.name,
        hash=profile.hash if running_hash is None else running_hash,
        runtime=body.runtime.kind,
        scope=body.runtime.scope,
        host=body.serve.host,
        port=body.serve.port,
        served_names=tuple(body.model.served_names),
        grace_s=body.container.stop_grace_s,
    )


def record_from_live(live: LiveRecord) -> BootRecord:
    """The boot record the live pointer holds (what an older record lacks reads as empty)."""
    return BootRecord(
        serve=live.serve,
        boot_id=live.boot_id or "",
        knobs=live.knobs,
        image=live.image or "",
        cache_dir=live.cache_dir or "",
        first_boot=bool(live.first_boot),
        kv_tokens=live.kv_tokens,
        phases=live.phases,
        started_at=live.started_at or "",
        boot_s=live.boot_s or 0.0,
        health_s=live.health_s or 0.0,
        log=live.log or "",
        ok=live.ok,
        cause=live.cause,
        since=live.since or "",
        cpu=live.cpu,
        origin=live.origin,
        drain=live.drain,
    )


def api_key_for(profile: Profile) -> str | None:
    """The API key the profile's serve requires (VLLM_API_KEY from its secrets file), or None."""
    container = profile.body.container
    if secrets.API_KEY_NAME not in container.secret_names or not container.secrets_env_file:
        return None
    path = profiles.expand(container.secrets_env_file)
    try:
        values = secrets.parse_env_file(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise StateError(
            f"{path}: cannot read the API key of {profile.name} ({why}); run as root or export "
            "it for the client"
        ) from exc
    key = values.get(secrets.API_KEY_NAME)
    if not key:
        raise StateError(
            f"{path}: does not set {secrets.API_KEY_NAME} (named in container.secret_names)"
        )
    return key


def api_key_named(name: str | None) -> str | None:
    """api_key_for the profile called name, for a serve known only by its record (live.json, the
    journal); None when there is no such profile or it needs no key. An unreadable key still
    raises: a serve that needs one cannot be verified without it."""
    if not name:
        return None
    try:
        profile = profiles.load(name)
    except ProfileError:
        return None
    return api_key_for(profile)
