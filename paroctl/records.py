"""The typed records of a serve that cross modules: who serves where, what its boot proved, and
the live pointer (live.json) that names it.

Ground floor: `state` reads and writes the live pointer through these types, so this module
imports nothing of paroctl above `net`. live.json keeps its flat JSON keys (a record written by
an older paroctl loads here, and one written here loads there); only the Python side is typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paroctl import net

DEFAULT_GRACE_S = 30  # a record that does not say how long its serve may take to stop


@dataclass(frozen=True, kw_only=True)
class CpuDecision:
    """A CPU serve's dtype, cores and KV space, each with why (paroctl/serve/cpu.py decides it).
    A record written before the reasons and flags were kept lacks them: None, and left out when
    written back, so an old live.json round-trips byte for byte."""

    dtype: str
    dtype_why: str
    cores: int
    reserved: int
    reserved_why: str | None = None
    kv_gib: str | float  # as decided (a string), or as an older record stored it
    kv_why: str | None = None
    flags: tuple[str, ...] | None = None

    @property
    def engine_cores(self) -> int:
        """The cores the engine computes on (the others are reserved for the API server)."""
        return self.cores - self.reserved

    def summary(self) -> str:
        """One line for the switch display."""
        return (
            f"cpu: dtype {self.dtype} ({self.dtype_why}); engine on {self.engine_cores} "
            f"of {self.cores} cores ({self.reserved_why}); KV {self.kv_gib} GiB ({self.kv_why})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON keys of a record's `cpu` (what an older record lacked stays out)."""
        out: dict[str, Any] = {
            "dtype": self.dtype,
            "dtype_why": self.dtype_why,
            "cores": self.cores,
            "reserved": self.reserved,
            "reserved_why": self.reserved_why,
            "kv_gib": self.kv_gib,
            "kv_why": self.kv_why,
            "flags": None if self.flags is None else list(self.flags),
        }
        return {key: value for key, value in out.items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CpuDecision:
        """Read a record's `cpu` keys; values kept as stored."""
        flags = data.get("flags")
        return cls(
            dtype=str(data["dtype"]),
            dtype_why=str(data.get("dtype_why", "")),
            cores=int(data["cores"]),
            reserved=int(data["reserved"]),
            reserved_why=data.get("reserved_why"),
            kv_gib=data["kv_gib"],
            kv_why=data.get("kv_why"),
            flags=None if flags is None else tuple(str(flag) for flag in flags),
        )


@dataclass(frozen=True, kw_only=True)
class ServeRef:
    """A serve's identity: the profile (and hash) it runs, where it runs, where it listens, the
    names it must list, and how long its stop may take."""

    profile: str
    hash: str = ""
    runtime: str = "local"
    scope: str = "system"
    host: str
    port: int
    served_names: tuple[str, ...] = ()
    grace_s: float = DEFAULT_GRACE_S

    @property
    def url(self) -> str:
        """The HTTP address to connect to (a wildcard bind is reached on loopback)."""
        return f"http://{net.connect_host(self.host)}:{self.port}"

    def as_dict(self) -> dict[str, Any]:
        """The flat JSON keys live.json and the journal use."""
        return {
            "profile": self.profile,
            "hash": self.hash,
            "runtime": self.runtime,
            "scope": self.scope,
            "host": self.host,
            "port": self.port,
            "served_names": list(self.served_names),
            "grace_s": self.grace_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServeRef:
        """Read the identity keys of a flat record; only profile, host and port are required.
        Values are kept as stored (an int grace stays an int, so it prints as it was written)."""
        return cls(
            profile=str(data["profile"]),
            hash=str(data.get("hash", "")),
            runtime=str(data.get("runtime", "local")),
            scope=str(data.get("scope", "system")),
            host=str(data["host"]),
            port=int(data["port"]),
            served_names=tuple(str(name) for name in data.get("served_names", ())),
            grace_s=data.get("grace_s", DEFAULT_GRACE_S),
        )


@dataclass(frozen=True, kw_only=True)
class LiveRecord:
    """The live pointer: the serve, and what its boot recorded. A record written by an older
    paroctl (or by hand) may lack any field but profile, host and port; absent reads as None."""

    serve: ServeRef
    boot_id: str | None = None
    knobs: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    cache_dir: str | None = None
    first_boot: bool | None = None
    kv_tokens: int | None = None
    phases: Mapping[str, float] = field(default_factory=dict)
    started_at: str | None = None
    boot_s: float | None = None
    health_s: float | None = None
    log: str | None = None
    ok: bool = True
    cause: str = ""
    since: str | None = None
    cpu: CpuDecision | None = None  # a CPU box: the dtype/cores/KV decision it booted with
    origin: str = "switch"  # "switch", "adopt" (started outside paroctl) or "resume"
    # What the stop's drain reads: "load" (/load, when the boot log shows load tracking on) or
    # "metrics" (/metrics' running gauge; also what a record without this field gets).
    drain: str = "metrics"

    def as_dict(self) -> dict[str, Any]:
        """live.json's flat keys, in the boot record's order (JSON-able)."""
        serve = self.serve.as_dict()
        return {
            "boot_id": self.boot_id,
            **{key: serve[key] for key in _IDENTITY_HEAD},
            "knobs": dict(self.knobs),
            "image": self.image,
            "cache_dir": self.cache_dir,
            "first_boot": self.first_boot,
            "kv_tokens": self.kv_tokens,
            "phases": dict(self.phases),
            "started_at": self.started_at,
            "boot_s": self.boot_s,
            "health_s": self.health_s,
            "grace_s": serve["grace_s"],
            "log": self.log,
            "ok": self.ok,
            "cause": self.cause,
            "since": self.since,
            "cpu": None if self.cpu is None else self.cpu.as_dict(),
            "origin": self.origin,
            "drain": self.drain,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LiveRecord:
        """Parse live.json's keys (state.live_problem has checked the ones every reader needs)."""
        since = data.get("since")
        return cls(
            serve=ServeRef.from_dict(data),
            boot_id=data.get("boot_id"),
            knobs=data.get("knobs") or {},
            image=data.get("image"),
            cache_dir=data.get("cache_dir"),
            first_boot=data.get("first_boot"),
            kv_tokens=data.get("kv_tokens"),
            phases=data.get("phases") or {},
            started_at=data.get("started_at"),
            boot_s=data.get("boot_s"),
            health_s=data.get("health_s"),
            log=data.get("log"),
            ok=bool(data.get("ok", True)),
            cause=str(data.get("cause", "")),
            since=None if since is None else str(since),
            cpu=CpuDecision.from_dict(data["cpu"]) if data.get("cpu") else None,
            origin=str(data.get("origin", "switch")),
            drain=str(data.get("drain", "metrics")),
        )


# The identity keys that come before the boot's own in a record (grace_s sits further down).
_IDENTITY_HEAD = ("profile", "hash", "runtime", "scope", "host", "port", "served_names")


@dataclass(frozen=True, kw_only=True)
class BootRecord:
    """What a verified boot proved, recorded in the results store and as the live pointer."""

    serve: ServeRef
    boot_id: str
    knobs: Mapping[str, str]
    image: str
    cache_dir: str
    first_boot: bool
    kv_tokens: int | None
    phases: Mapping[str, float]
    started_at: str
    boot_s: float
    health_s: float
    log: str
    ok: bool = True
    cause: str = ""
    since: str = ""
    cpu: CpuDecision | None = None
    origin: str = "switch"
    drain: str = "metrics"

    def live(self) -> LiveRecord:
        """This boot as the live pointer."""
        return LiveRecord(
            serve=self.serve,
            boot_id=self.boot_id,
            knobs=self.knobs,
            image=self.image,
            cache_dir=self.cache_dir,
            first_boot=self.first_boot,
            kv_tokens=self.kv_tokens,
            phases=self.phases,
            started_at=self.started_at,
            boot_s=self.boot_s,
            health_s=self.health_s,
            log=self.log,
            ok=self.ok,
            cause=self.cause,
            since=self.since,
            cpu=self.cpu,
            origin=self.origin,
            drain=self.drain,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able): live.json's keys, the results store's boot row."""
        return self.live().as_dict()
