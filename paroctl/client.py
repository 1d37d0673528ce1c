"""The one HTTP client for an OpenAI-compatible serve: sessions, retries, streams, /metrics.

Every request paroctl sends (the switch's checks, recovery, status, every gate) goes through
`Client`. One retry policy for every method: connection errors, timeouts, 5xx answers, bodies
that are not JSON and streams cut before `[DONE]` are retried up to `retries` times with
exponential backoff, and each retried fault is recorded on the reply, so a gate can account for
every fault it survived. A 4xx is never retried (the request itself is wrong). POSTs are retried
too: every POST paroctl sends is a greedy read, so the worst a duplicate costs is server time;
callers that must not retry (the switch's probes) pass `retries=0`.

`requests` and `prometheus_client` are imported inside methods so that `paroctl --help` and
the commands that never talk HTTP do not pay for them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from paroctl.errors import RuntimeFailure

if TYPE_CHECKING:
    import requests

# (labels, value) per sample, keyed by the sample name as exposed (counters keep `_total`).
Metrics = dict[str, list[tuple[dict[str, str], float]]]
T = TypeVar("T")

_BODY_CHARS = 300
_FAULT_CHARS = 160


class RequestFailed(RuntimeFailure):
    """A request failed for good (after its retries, or at once on a 4xx); `faults` lists each."""

    def __init__(self, message: str, faults: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.faults = list(faults)


class _Transient(Exception):
    """A fault worth another attempt (a 5xx, a bad body, a stream cut short)."""


@dataclass
class Reply:
    """A non-streamed JSON response, the seconds it took and the faults retried to get it."""

    data: dict[str, Any]
    faults: list[str]
    seconds: float


@dataclass
class StreamReply:
    """A streamed completion: chunk arrival times and texts, usage, and the faults retried."""

    start: float
    arrivals: list[float]
    chunks: list[str]
    completion_tokens: int
    prompt_tokens: int
    finish_reason: str | None
    faults: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The whole streamed text."""
        return "".join(self.chunks)


def metric_value(metrics: Metrics, name: str, **labels: str) -> float:
    """Sum of the samples of one metric whose labels include all of labels (0.0 if none)."""
    return sum(
        value
        for sample_labels, value in metrics.get(name, [])
        if all(sample_labels.get(key) == want for key, want in labels.items())
    )


def sample_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """The sum of each named metric's samples in Prometheus text, every label set included (0.0
    for a metric that is absent). A line scan for a few gauges: a full parse of vLLM's ~50 KB of
    histograms costs ~40 ms of a slow core (plus ~80 ms to import the parser) per call."""
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name, rest = _sample_name(line)
        if name in sums and rest:
            with contextlib.suppress(ValueError):
                sums[name] += float(rest.split()[0])
    return sums


def _sample_name(line: str) -> tuple[str, str]:
    """(metric name, text after its labels) of one sample line; ("", "") for a comment."""
    if not line or line.startswith("#"):
        return "", ""
    brace, space = line.find("{"), line.find(" ")
    if brace < 0 or 0 <= space < brace:
        return line[:space], line[space:] if space > 0 else ""
    quoted, escaped = False, False
    for index in range(brace + 1, len(line)):  # a label value may hold braces: mind the quotes
        char = line[index]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return line[:brace], line[index + 1 :]
    return "", ""


def _short(text: str, most: int = _FAULT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= most else text[: most - 3] + "..."


class Client:
    """One serve's OpenAI-compatible API at base_url (e.g. http://127.0.0.1:8000)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.25,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout_s, timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self._api_key = api_key
        # requests.Session is not thread-safe: one pooled session per thread (gates fan out).
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = requests.Session()
            if self._api_key:
                session.headers["Authorization"] = f"Bearer {self._api_key}"
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _drop_session(self) -> None:
        # After a reset or a dropped connection a fresh pool is the safe next attempt.
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None

    def at(self, base_url: str) -> Client:
        """A client for another address with this one's timeouts, retries and API key."""
        connect_s, read_s = self.timeout
        return Client(
            base_url,
            timeout_s=read_s,
            connect_timeout_s=connect_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
            api_key=self._api_key,
        )

    def close(self) -> None:
        """Close every pooled connection of every thread."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._local = threading.local()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        """The absolute URL of an API path."""
        return f"{self.base_url}/{path.lstrip('/')}"

    # --- the retry policy ------------------------------------------------------------------

    def _attempts(
        self, method: str, url: str, call: Callable[[], T], retries: int | None = None
    ) -> tuple[T, list[str]]:
        """Run call() under the retry policy; return its result and every fault retried."""
        import requests

        attempts = 1 + (self.retries if retries is None else retries)
        faults: list[str] = []
        for attempt in range(attempts):
            try:
                return call(), faults
            except RequestFailed as exc:
                # A 4xx: the faults retried before it still belong to this call.
                exc.faults = faults + exc.faults
                raise
            except _Transient as exc:
                faults.append(str(exc))
            except requests.Timeout as exc:
                faults.append(f"timeout: {type(exc).__name__}")
                self._drop_session()
            except requests.ConnectionError as exc:
                # Includes resets and dropped connections; a fresh connection may succeed.
                faults.append(f"connection: {_short(str(exc))}")
                self._drop_session()
            except requests.RequestException as exc:
                faults.append(f"request: {_short(str(exc))}")
                self._drop_session()
            if attempt + 1 < attempts:
                time.sleep(self.backoff_s * 2**attempt)
        verb = "cannot connect" if faults[-1].startswith("connection") else "gave up"
        raise RequestFailed(
            f"{method} {url}: {verb} after {attempts} attempts ({faults[-1]})", faults
        )

    def _send(
        self,
        method: str,
        url: str,
        payload: Mapping[str, Any] | None,
        *,
        stream: bool = False,
        timeout: tuple[float, float] | None = None,
    ) -> requests.Response:
        """One attempt; a 5xx is transient, a 4xx fails the call for good."""
        response = self._session().request(
            method, url, json=payload, timeout=timeout or self.timeout, stream=stream
        )
        if response.status_code >= 500:
            response.close()
            raise _Transient(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            body = _short(response.text, _BODY_CHARS)
            response.close()
            raise RequestFailed(f"{method} {url} -> HTTP {response.status_code}: {body}")
        return response

    def _json(
        self,
        method: str,
        path: str,
        payload: Mapping[str, Any] | None,
        retries: int | None = None,
    ) -> Reply:
        url = self.url(path)

        def call() -> tuple[dict[str, Any], float]:
            start = time.perf_counter()
            response = self._send(method, url, payload)
            try:
                data = response.json()
            except ValueError as exc:
                raise _Transient(f"bad body: HTTP {response.status_code} not JSON") from exc
            if not isinstance(data, dict):
                raise _Transient("bad body: not a JSON object")
            return data, time.perf_counter() - start

        (data, seconds), faults = self._attempts(method, url, call, retries)
        return Reply(data, faults, seconds)

    def _get(self, path: str, *, retries: int | None = None) -> requests.Response:
        url = self.url(path)
        response, _ = self._attempts("GET", url, lambda: self._send("GET", url, None), retries)
        return response

    # --- public requests -------------------------------------------------------------------

    def get(self, path: str, *, retries: int | None = None) -> Reply:
        """GET a JSON object under the retry policy (retries: this call's own count)."""
        return self._json("GET", path, None, retries)

    def post(self, path: str, payload: Mapping[str, Any]) -> Reply:
        """POST JSON and return the JSON object under the retry policy."""
        return self._json("POST", path, payload)

    def stream(self, payload: Mapping[str, Any]) -> StreamReply:
        """Stream a /v1/completions request with usage; a fault retries it from scratch."""
        url = self.url("/v1/completions")
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}

        def call() -> StreamReply:
            start = time.perf_counter()
            return read_stream(self._send("POST", url, body, stream=True), start)

        reply, faults = self._attempts("POST", url, call)
        reply.faults = faults
        return reply

    def health(self) -> bool:
        """Whether /health answers 200 right now (one attempt, no retries: callers poll)."""
        import requests

        try:
            response = self._session().get(self.url("/health"), timeout=(1.0, 5.0))
        except requests.RequestException:
            return False
        response.close()
        return response.status_code == 200

    def wait_healthy(
        self,
        timeout_s: float,
        *,
        poll_s: float = 0.5,
        alive: Callable[[], bool] | None = None,
    ) -> float:
        """Poll /health until 200; return seconds waited. Fails early once alive() says it died."""
        start = time.monotonic()
        while not self.health():
            if alive is not None and not alive():
                raise RuntimeFailure(
                    f"the serve behind {self.base_url} exited before it was healthy"
                )
            if time.monotonic() - start >= timeout_s:
                raise RuntimeFailure(f"{self.url('/health')} not healthy after {timeout_s:g} s")
            time.sleep(poll_s)
        return time.monotonic() - start

    def model_entries(self, *, retries: int | None = None) -> dict[str, dict[str, Any]]:
        """The /v1/models entries by served name (each with vLLM's max_model_len)."""
        data = self.get("/v1/models", retries=retries).data
        return {str(entry.get("id")): dict(entry) for entry in data.get("data") or []}

    def models(self) -> list[str]:
        """The served model names listed by /v1/models."""
        return list(self.model_entries())

    def version(self) -> str | None:
        """The server's /version, or None when it has none (an older or a non-vLLM server)."""
        try:
            return str(self.get("/version", retries=0).data.get("version"))
        except RuntimeFailure:
            return None

    def completion(
        self,
        model: str,
        prompt: str | Sequence[int],
        max_tokens: int,
        temperature: float = 0.0,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """One /v1/completions request; returns the response object."""
        payload: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if logprobs is not None:
            payload["logprobs"] = logprobs
        if prompt_logprobs is not None:
            # A vLLM extension to the OpenAI schema, accepted at the top level.
            payload["prompt_logprobs"] = prompt_logprobs
        payload.update(extra)
        return self.post("/v1/completions", payload).data

    def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int | None = None,
        temperature: float = 0.0,
        **extra: Any,
    ) -> dict[str, Any]:
        """One /v1/chat/completions request; returns the response object."""
        payload: dict[str, Any] = {
            "model": model,
            "messages": [dict(message) for message in messages],
            "temperature": temperature,
        }
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        payload.update(extra)
        return self.post("/v1/chat/completions", payload).data

    def tokenize(self, model: str, text: str, *, special: bool = True) -> list[int]:
        """Token ids of text under the served model's tokenizer (vLLM's /tokenize)."""
        payload = {"model": model, "prompt": text, "add_special_tokens": special}
        return [int(token) for token in self.post("/tokenize", payload).data["tokens"]]

    def stream_completion(
        self,
        model: str,
        prompt: str | Sequence[int],
        max_tokens: int,
        temperature: float = 0.0,
        **extra: Any,
    ) -> Iterator[tuple[float, str]]:
        """Stream a completion; yield (time.perf_counter() at arrival, text) per chunk."""
        payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
        reply = self.stream({**payload, "temperature": temperature, **extra})
        yield from zip(reply.arrivals, reply.chunks, strict=True)

    def load(self) -> int:
        """vLLM's /load: the requests in flight on its generation routes (counted only by a serve
        started with --enable-server-load-tracking; 0 otherwise)."""
        value = self.get("/load", retries=0).data.get("server_load")
        if not isinstance(value, int) or isinstance(value, bool):
            shown = str(value)[:60]
            raise RuntimeFailure(f"{self.url('/load')}: no server_load count in {shown!r}")
        return value

    def gauges(self, *names: str) -> dict[str, float]:
        """/metrics' sum of samples for each name (see sample_sums): the drain's and status's
        request counts, without a full parse."""
        return sample_sums(self._get("/metrics").text, names)

    def metrics(self) -> Metrics:
        """/metrics parsed with prometheus_client: sample name -> [(labels, value), ...]."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self._get("/metrics").text
        parsed: Metrics = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                parsed.setdefault(sample.name, []).append(
                    (dict(sample.labels), float(sample.value))
                )
        return parsed


def stream_events(response: requests.Response) -> Iterator[tuple[float, dict[str, Any] | None]]:
    """The server-sent events of an OpenAI stream as (arrival time, event), then (time, None)
    for [DONE]; a bad or error event is transient. Closing the generator closes the response."""
    with response:
        for raw in response.iter_lines():
            now = time.perf_counter()
            line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                yield now, None
                return
            try:
                event = json.loads(data)
            except ValueError as exc:
                raise _Transient(f"bad stream event: {_short(data, 80)}") from exc
            if "error" in event:
                raise _Transient(f"stream error: {_short(str(event['error']), 200)}")
            yield now, event


def read_stream(response: requests.Response, start: float) -> StreamReply:
    """Read an OpenAI server-sent-event stream to [DONE]; a stream cut short is transient."""
    arrivals: list[float] = []
    chunks: list[str] = []
    usage: dict[str, Any] = {}
    finish: str | None = None
    done = False
    for now, event in stream_events(response):
        if event is None:
            done = True
            break
        for choice in event.get("choices") or []:
            if choice.get("text"):
                arrivals.append(now)
                chunks.append(str(choice["text"]))
            finish = choice.get("finish_reason") or finish
        usage = event.get("usage") or usage
    if not done:
        # A transport fault, not a model answer.
        raise _Transient("stream ended before [DONE]")
    return StreamReply(
        start=start,
        arrivals=arrivals,
        chunks=chunks,
        completion_tokens=int(usage.get("completion_tokens", len(arrivals))),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        finish_reason=finish,
    )
