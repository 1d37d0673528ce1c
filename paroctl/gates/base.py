"""The gate framework: the verified target (the live serve or any endpoint), the run context.

Requests go through `paroctl.client.Client`, the one HTTP client: its retry policy retries POSTs
too and records each fault it retried on the reply, so a run can account for every fault.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from paroctl import __version__, state
from paroctl.client import Client, Metrics
from paroctl.errors import ParoctlError, RuntimeFailure, StateError, UsageError
from paroctl.gates.watch import ServeWatch
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

    def note(self, message: str) -> None:
        """Say what the gate is about to do that the operator must know (it switches the serve)."""


class NoProgress:
    """A progress sink that shows nothing."""

    def start(self, description: str, total: int, completed: int = 0) -> None:
        """Begin a phase (ignored)."""

    def advance(self, steps: int = 1) -> None:
        """Mark steps done (ignored)."""

    def note(self, message: str) -> None:
        """Say something (ignored)."""


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
    # The serve the run started on; every item is checked against it before it is stored.
    watch: ServeWatch = field(default_factory=lambda: ServeWatch(None))
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    _seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def opt(self, name: str, default: Any) -> Any:
        """An option's value, or default when unset."""
        value = self.options.get(name)
        return default if value is None else value

    def record(self, key: str, outcome: str, record: Mapping[str, Any]) -> None:
        """Store one item as it arrives (so a crash keeps it) and remember it for the summary;
        ServeChanged, and the item is not stored, when the serve is no longer the run's."""
        self.watch.check()
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


Item = TypeVar("Item")
Answer = TypeVar("Answer")


@dataclass(frozen=True)
class Finished(Generic[Item, Answer]):
    """One item of a fan_out: its answer, or the exception its request raised."""

    item: Item
    answer: Answer | None
    error: Exception | None


class FanOut(Generic[Item, Answer]):
    """work(item) for every item, at most `workers` at once; iterate to get each as it finishes.

    Leaving the `with` block (done, Ctrl-C, SIGTERM, a changed serve raised in the consumer)
    stops sending at once: no item not yet started is sent. Requests in flight are abandoned, not
    joined: daemon threads, where a `ThreadPoolExecutor` joins its workers (after Ctrl-C it sent
    every remaining question of a run before it let go). `ready()` hands over the answers that
    have arrived, so an interrupted run keeps every answer it received.
    """

    # After a stop, how long ready() waits for answers already on their way (a reply being read
    # when Ctrl-C came is an answer received); nothing new is sent meanwhile.
    GRACE_S = 2.0

    def __init__(self, work: Callable[[Item], Answer], items: Sequence[Item], workers: int) -> None:
        self._work = work
        self._todo: queue.SimpleQueue[Item] = queue.SimpleQueue()
        for item in items:
            self._todo.put(item)
        self._finished: queue.SimpleQueue[Finished[Item, Answer]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._total = len(items)
        self._consumed = 0  # finished items handed to the consumer
        self._taken = 0  # items a worker has taken: sent, or being sent
        self._workers = min(workers, len(items))
        self._lock = threading.Lock()

    def __enter__(self) -> FanOut[Item, Answer]:
        for _ in range(self._workers):
            threading.Thread(target=self._worker, name="gate-request", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._stop.set()

    def _worker(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._todo.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                if self._stop.is_set():
                    return  # stopped while this worker took the item: it is not sent
                self._taken += 1
            try:
                self._finished.put(Finished(item, self._work(item), None))
            except Exception as exc:  # the consumer decides what a failed item means
                self._finished.put(Finished(item, None, exc))

    def __iter__(self) -> Iterator[Finished[Item, Answer]]:
        while self._consumed < self._total:
            done = self._finished.get()
            self._consumed += 1
            yield done

    def ready(self) -> list[Finished[Item, Answer]]:
        """Stop sending; the items finished and not taken yet, and those in flight that finish
        within GRACE_S."""
        with self._lock:
            self._stop.set()
        deadline = time.monotonic() + self.GRACE_S
        out: list[Finished[Item, Answer]] = []
        while True:
            with self._lock:
                in_flight = self._taken - (len(out) + self._consumed)
            wait = deadline - time.monotonic()
            try:
                out.append(self._finished.get(block=in_flight > 0 and wait > 0, timeout=wait))
            except queue.Empty:
                return out


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
