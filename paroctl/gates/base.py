"""The gate framework: the verified live target, the retrying request layer, the run context.

Requests go through `Requester`, not `Client._post`: a gate must retry a POST (a greedy read is
idempotent; the worst a duplicate costs is server time), must see every fault it retried so the
run can account for it, and needs the usage chunk of a stream for token counts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from paroctl import __version__, state
from paroctl.client import Client, Metrics
from paroctl.errors import ParoctlError, RuntimeFailure, StateError

if TYPE_CHECKING:
    import requests

    from paroctl.profiles import Profile
    from paroctl.results import Store

NOTHING_LIVE = "nothing is live; run `paroctl switch NAME` first"


# --- the target: what read_live() says, checked against what actually answers -------------------


@dataclass(frozen=True)
class Target:
    """The live serve as verified: address, served name, max length, server version, record."""

    base_url: str
    model: str
    served_names: tuple[str, ...]
    max_model_len: int | None
    server_version: str | None
    live: Mapping[str, Any]

    @property
    def profile(self) -> str:
        """The live profile's name."""
        return str(self.live["profile"])


def read_target_record() -> dict[str, Any]:
    """The live record, or StateError when nothing is live."""
    live = state.read_live()
    if live is None:
        raise StateError(NOTHING_LIVE)
    missing = [key for key in ("profile", "host", "port", "served_names") if not live.get(key)]
    if missing:
        raise StateError(f"{state.live_path()}: live record lacks {', '.join(missing)}")
    return live


def base_url_of(live: Mapping[str, Any]) -> str:
    """The HTTP address of a live record (a wildcard bind is reached on loopback)."""
    host = str(live["host"])
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{int(live['port'])}"


def connect(live: Mapping[str, Any], client: Client) -> Target:
    """Verify /v1/models lists the live record's served names; never trust a stale pointer."""
    want = tuple(str(name) for name in live["served_names"])
    try:
        data = client.session.get(client.url("/v1/models"), timeout=client.timeout).json()
    except Exception as exc:
        raise RuntimeFailure(
            f"{client.url('/v1/models')}: the live serve ({live['profile']}) does not answer "
            f"({exc}); check it with `paroctl status`"
        ) from exc
    entries = {str(entry.get("id")): entry for entry in data.get("data", [])}
    if not set(want) <= set(entries):
        raise StateError(
            f"{client.base_url} lists {sorted(entries)}, not the live record's {list(want)} "
            f"(profile {live['profile']}): the live pointer is stale; run `paroctl switch NAME`"
        )
    max_len = entries[want[0]].get("max_model_len")
    return Target(
        base_url=client.base_url,
        model=want[0],
        served_names=want,
        max_model_len=int(max_len) if max_len else None,
        server_version=_server_version(client),
        live=dict(live),
    )


def _server_version(client: Client) -> str | None:
    try:
        response = client.session.get(client.url("/version"), timeout=client.timeout)
        return str(response.json().get("version")) if response.ok else None
    except Exception:
        # /version is provenance, not a precondition: an old server without it still gates.
        return None


# --- the request layer -----------------------------------------------------------------------


class ItemError(Exception):
    """One request failed for good (after retries, or at once for a client error)."""

    def __init__(self, message: str, faults: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.faults = faults


class _Retry(Exception):
    """A transient fault: worth another attempt."""


@dataclass
class Reply:
    """A non-streamed JSON response and the transient faults retried to get it."""

    data: dict[str, Any]
    faults: list[str]
    seconds: float


@dataclass
class StreamReply:
    """A streamed completion: chunk arrival times, text, usage, and the faults retried."""

    start: float
    arrivals: list[float]
    text: str
    completion_tokens: int
    prompt_tokens: int
    finish_reason: str | None
    faults: list[str] = field(default_factory=list)


class Requester:
    """POSTs to the live serve with bounded retries and backoff; one pooled session per thread."""

    def __init__(
        self,
        base_url: str,
        *,
        retries: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout = (connect_timeout_s, timeout_s)
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            self._local.session = session
        return session

    def _attempts(self, call: Callable[[], Any]) -> tuple[Any, list[str]]:
        import requests

        faults: list[str] = []
        for attempt in range(self.retries + 1):
            try:
                return call(), faults
            except _Retry as exc:
                faults.append(str(exc))
            except requests.Timeout as exc:
                faults.append(f"timeout: {type(exc).__name__}")
            except requests.ConnectionError as exc:
                # Includes resets and dropped connections; a fresh connection may succeed.
                faults.append(f"connection: {_short(exc)}")
                self._local.session = None
            except requests.RequestException as exc:
                faults.append(f"request: {_short(exc)}")
                self._local.session = None
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt)
        raise ItemError(f"gave up after {self.retries + 1} attempts: {faults[-1]}", faults)

    def post(self, path: str, payload: Mapping[str, Any]) -> Reply:
        """POST JSON and return the JSON object; retries connection errors, timeouts and 5xx."""
        url = f"{self.base_url}{path}"

        def call() -> tuple[dict[str, Any], float]:
            start = time.perf_counter()
            response = self._session().post(url, json=payload, timeout=self.timeout)
            _raise_for_status(response, [])
            try:
                data = response.json()
            except ValueError as exc:
                raise _Retry(f"bad body: HTTP {response.status_code} not JSON") from exc
            if not isinstance(data, dict):
                raise _Retry("bad body: not a JSON object")
            return data, time.perf_counter() - start

        (data, seconds), faults = self._attempts(call)
        return Reply(data, faults, seconds)

    def stream(self, payload: Mapping[str, Any]) -> StreamReply:
        """Stream a /v1/completions request with usage; retried from scratch on a fault."""
        url = f"{self.base_url}/v1/completions"
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}

        def call() -> StreamReply:
            start = time.perf_counter()
            response = self._session().post(url, json=body, timeout=self.timeout, stream=True)
            _raise_for_status(response, [])
            return _read_stream(response, start)

        reply, faults = self._attempts(call)
        assert isinstance(reply, StreamReply)
        reply.faults = faults
        return reply


def _read_stream(response: requests.Response, start: float) -> StreamReply:
    arrivals: list[float] = []
    parts: list[str] = []
    usage: dict[str, Any] = {}
    finish: str | None = None
    done = False
    with response:
        for raw in response.iter_lines():
            now = time.perf_counter()
            line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                raise _Retry(f"stream error: {str(event['error'])[:200]}")
            for choice in event.get("choices") or []:
                if choice.get("text"):
                    arrivals.append(now)
                    parts.append(str(choice["text"]))
                finish = choice.get("finish_reason") or finish
            usage = event.get("usage") or usage
    if not done:
        # A stream cut short is a transport fault, not a model answer.
        raise _Retry("stream ended before [DONE]")
    return StreamReply(
        start=start,
        arrivals=arrivals,
        text="".join(parts),
        completion_tokens=int(usage.get("completion_tokens", len(arrivals))),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        finish_reason=finish,
    )


def _raise_for_status(response: requests.Response, faults: list[str]) -> None:
    if response.status_code >= 500:
        response.close()
        raise _Retry(f"HTTP {response.status_code}")
    if response.status_code >= 400:
        text = response.text.strip()[:300]
        raise ItemError(f"HTTP {response.status_code}: {text}", faults)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 160 else text[:157] + "..."


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
    requester: Requester
    store: Store
    run_id: str
    options: dict[str, Any]
    profile: Profile | None
    progress: Progress = field(default_factory=NoProgress)
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
