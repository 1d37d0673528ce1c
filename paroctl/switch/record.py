"""The switch's records and collaborators: the serve identity of a profile, the boot record read
back from the live pointer, the API key a serve wants, the switch's dependencies and its error.

The record types themselves live at the ground floor (paroctl/records.py) so that `state` reads
and writes the live pointer through them; this module adds what needs a profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl.errors import ParoctlError, ProfileError, StateError
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
    "api_key_for",
    "api_key_named",
    "record_from_live",
    "serve_ref",
]


class SwitchFailed(ParoctlError):
    """A switch did not end on the requested profile; the message says where the box is now."""


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
