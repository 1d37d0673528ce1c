"""The gate framework: the verified target (the live serve or any endpoint), the run context.

Requests go through `paroctl.client.Client`, the one HTTP client: its retry policy retries POSTs
too and records each fault it retried on the reply, so a run can account for every fault.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from paroctl import __version__, state
from paroctl.client import Client, Metrics
from paroctl.errors import ParoctlError, RuntimeFailure, StateError, UsageError
from paroctl.records import LiveRecord

if TYPE_CHECKING:
    from paroctl.profile.profiles import Profile
    from paroctl.store.results import Store

NOTHING_LIVE = "nothing is live; run `paroctl switch NAME` first, or pass --url and --model"
# A target that refuses twice is down: the run's own retries are for items, not for finding it.
CONNECT_RETRIES = 1
# The provenance of a run against an endpoint given by URL: no profile, no profile hash.
EXTERNAL = "external"


# --- the target: what read_live() says, checked against what actually answers -------------------


@dataclass(frozen=True)
class Target:
    """The live serve as verified: address, served name, max length, server version, record
    (None for an endpoint given by URL)."""

    base_url: str
    model: str
    served_names: tuple[str, ...]
    max_model_len: int | None
    server_version: str | None
    live: LiveRecord | None

    @property
    def profile(self) -> str:
        """The live profile's name, or "external" for an endpoint given by URL."""
        return EXTERNAL if self.live is None else self.live.serve.profile

    @property
    def external(self) -> bool:
        """Whether this is an endpoint given by URL rather than this box's live serve."""
        return self.profile == EXTERNAL

    @property
    def profile_hash(self) -> str | None:
        """The hash of the profile the live serve booted from (provenance); None when unknown."""
        return None if self.external or self.live is None else (self.live.serve.hash or None)


def read_target_record() -> LiveRecord:
    """The live record, or UsageError when nothing is live."""
    live = state.read_live()
    if live is None:
        raise UsageError(NOTHING_LIVE)
    serve = live.serve
    needed = {"profile": serve.profile, "host": serve.host, "port": serve.port}
    missing = [
        key for key, value in {**needed, "served_names": serve.served_names}.items() if not value
    ]
    if missing:
        raise StateError(f"{state.live_path()}: live record lacks {', '.join(missing)}")
    return live


def base_url_of(live: LiveRecord) -> str:
    """The HTTP address of a live record (a wildcard bind is reached on loopback)."""
    return live.serve.url


def connect(live: LiveRecord, client: Client) -> Target:
    """Verify /v1/models lists the live record's served names; never trust a stale pointer."""
    want = live.serve.served_names
    try:
        entries = client.model_entries(retries=CONNECT_RETRIES)
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"{client.url('/v1/models')}: the live serve ({live.serve.profile}) does not answer "
            f"({exc.message}); check it with `paroctl status`"
        ) from exc
    if not set(want) <= set(entries):
        raise StateError(
            f"{client.base_url} lists {sorted(entries)}, not the live record's {list(want)} "
            f"(profile {live.serve.profile}): the live pointer is stale; run `paroctl switch "
            "NAME`"
        )
    return _target(client, want, entries, live)


def connect_external(client: Client, model: str) -> Target:
    """Verify an endpoint given by URL serves `model`; its provenance is "external"."""
    try:
        entries = client.model_entries(retries=CONNECT_RETRIES)
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"{client.url('/v1/models')}: the endpoint does not answer ({exc.message}); "
            "check --url and the API key"
        ) from exc
    if model not in entries:
        raise UsageError(f"{client.base_url} serves {sorted(entries)}, not --model {model!r}")
    return _target(client, (model,), entries, None)


def _target(
    client: Client,
    want: tuple[str, ...],
    entries: Mapping[str, Mapping[str, Any]],
    live: LiveRecord | None,
) -> Target:
    max_len = entries[want[0]].get("max_model_len")
    return Target(
        base_url=client.base_url,
        model=want[0],
        served_names=want,
        max_model_len=int(max_len) if max_len else None,
        # /version is provenance, not a precondition: an old server without it still gates.
        server_version=client.version(),
        live=live,
    )


# --- progress, options, the run context ------------------------------------------------------


class Progress(Protocol):
    """Where a gate reports progress (the CLI draws a rich bar; tests pass nothing)."""

    def start(self, description: str, total: int, completed: int = 0) -> None:
        """Begin a phase of `total` steps, `completed` of them already done (a resume)."""

    def advance(self, steps: int = 1) -> None:
        """Mark steps done."""


class NoProgress:
    """A progress sink that shows nothing."""

    def start(self, description: str, total: int, completed: int = 0) -> None:
        """Begin a phase (ignored)."""

    def advance(self, steps: int = 1) -> None:
        """Mark steps done (ignored)."""


@dataclass
class Outcome:
    """What a gate module returns: verdict, headline number, summary, one-line message."""

    status: str  # pass | fail | unjudged
    headline_name: str
    headline: float | None
    summary: dict[str, Any]
    message: str


@dataclass
class GateContext:
    """Everything a gate needs: the verified target, requests, the store, options, progress."""

    target: Target
    client: Client
    store: Store
    run_id: str
    options: dict[str, Any]
    profile: Profile | None
    progress: Progress = field(default_factory=NoProgress)
    # The KLD gate's source for a reference the store lacks (paroctl.switch.promote supplies one).
    kld_reference: Callable[..., Any] | None = None
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    _seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def opt(self, name: str, default: Any) -> Any:
        """An option's value, or default when unset."""
        value = self.options.get(name)
        return default if value is None else value

    def record(self, key: str, outcome: str, record: Mapping[str, Any]) -> None:
        """Store one item as it arrives (so a crash keeps it) and remember it for the summary."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            self.done[key] = {"key": key, "outcome": outcome, **record}
        self.store.add_item(self.run_id, key, outcome, record, seq=seq)

    def metrics(self) -> Metrics:
        """The serve's /metrics, parsed."""
        return self.client.metrics()

    def max_len(self, default: int = 2048) -> int:
        """The serve's max model length (from /v1/models), or default when it does not say."""
        return self.target.max_model_len or default


def counters(metrics: Metrics, names: tuple[str, ...]) -> dict[str, float]:
    """Sum each named counter over its label sets."""
    return {name: sum(value for _, value in metrics.get(name, [])) for name in names}


def paroctl_version() -> str:
    """This paroctl's version, for provenance."""
    return __version__


def wrap_failure(exc: BaseException) -> ParoctlError:
    """Turn an unexpected exception inside a gate into a could-not-run error naming it."""
    if isinstance(exc, ParoctlError):
        return exc
    return RuntimeFailure(f"the gate could not run: {type(exc).__name__}: {exc}")
