"""The one HTTP client for an OpenAI-compatible serve: sessions, retries, streams, /metrics.

Every request paroctl sends (the switch's checks, recovery, status, every gate) goes through
`Client`. One retry policy for every method: connection errors, timeouts, 5xx answers, bodies
that are not JSON and streams cut before `[DONE]` are retried up to `retries` times with
exponential backoff, and each retried fault is recorded on the reply, so a gate can account for
every fault it survived. A 4xx is never retried (the request itself is wrong). POSTs are retried
too: every POST paroctl sends is a greedy read, so the worst a duplicate costs is server time;
callers that must not retry (the switch's probes) pass `retries=0`. Every answer is bounded in
size (after decoding: a gzip bomb counts what it inflates to) and in time (per read, and a
deadline on the whole answer that no trickle of bytes resets), and read through `Reply`'s typed
accessors: a server past a bound or out of shape is a `BadAnswer` naming what it did. `requests`
and `prometheus_client` are imported inside methods (commands that never talk HTTP skip them).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from paroctl import net
from paroctl.errors import RuntimeFailure

if TYPE_CHECKING:
    import requests

# (labels, value) per sample, keyed by the sample name as exposed (counters keep `_total`).
Metrics = dict[str, list[tuple[dict[str, str], float]]]
T = TypeVar("T")

_BODY_CHARS = 300
_FAULT_CHARS = 160
_ERROR_BODY_BYTES = 4096  # what a 4xx's message quotes is read, no more

# The bounds on one answer, against a vLLM CPU serve of SmolLM2 (2026-12-06): the largest answer
# is the kld gate's, prompt logprobs of a 1,024-token chunk at top-20 (its MAX_CHUNK_TOKENS x
# VLLM_MAX_LOGPROBS): 1,456,532 bytes; /metrics 54,614; a stream event 249 bytes, 1,001 with
# top-20 logprobs. 16 MiB is 11x the largest (longer escaped tokens, a raised max_logprobs).
MAX_ANSWER_BYTES = 16 << 20
MAX_CONTAINERS = 1 << 20  # JSON objects + arrays: that answer has 22k; each parses to >= 56 bytes
MAX_EVENT_BYTES = 64 << 10
MAX_STREAM_EVENTS = 1 << 17  # one event a token: twice `--gen`'s 65,536, at 256 bytes each
MAX_STREAM_BYTES = MAX_STREAM_EVENTS * 256
# vLLM writes a non-streamed body at once: one still arriving 30 s after its headers is a fault.
BODY_S = 30.0
# A whole answer: a stream may take the read timeout to its first token and as long again to
# generate; the read timeout alone restarts with every byte and never ends a trickle.
DEADLINE_READS = 2.0
HEALTH_TIMEOUT = (1.0, 5.0)


class RequestFailed(RuntimeFailure):
    """A request failed for good (after its retries, or at once on a 4xx); `faults` lists each."""

    def __init__(self, message: str, faults: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.faults = list(faults)


class BadAnswer(RequestFailed):
    """The server answered, but not as its API says (too large, too slow, malformed, missing what
    was asked for); not retried: the same request would get the same answer."""


class _Transient(Exception):
    """A fault worth another attempt (a 5xx, a bad body, a stream cut short)."""


class TokenLogprob(NamedTuple):
    """One candidate token's logprob and rank at one prompt position."""

    logprob: float
    rank: int


@dataclass
class Reply:
    """A non-streamed JSON response, the seconds it took and the faults retried to get it;
    its accessors read the OpenAI schema's fields or raise BadAnswer naming what is wrong."""

    data: dict[str, Any]
    faults: list[str]
    seconds: float
    answered: str = "the server answered"  # "the server at URL answered POST /path"

    def pick(self, *path: str | int, kind: type | tuple[type, ...] = object) -> Any:
        """The value at path, of kind (see net.pick); BadAnswer naming the path otherwise."""
        try:
            return net.pick(self.data, path, kind)
        except net.Unfit as exc:
            raise BadAnswer(f"{self.answered} {exc}") from None

    def text(self) -> str:
        """A completion's text (choices[0].text; null reads as "")."""
        return str(self.pick("choices", 0, "text", kind=(str, type(None))) or "")

    def content(self) -> str:
        """A chat answer's text (choices[0].message.content; null reads as "")."""
        return str(self.pick("choices", 0, "message", "content", kind=(str, type(None))) or "")

    def finish_reason(self) -> str | None:
        """Why generation stopped (choices[0].finish_reason), None when the server does not say."""
        reason: str | None = self.pick("choices", 0, "finish_reason", kind=(str, type(None)))
        return reason

    def usage(self, name: str) -> int | None:
        """A usage count (prompt_tokens, completion_tokens), None when the server does not say."""
        if self.pick("usage", kind=(dict, type(None))) is None:
            return None
        count: int | None = self.pick("usage", name, kind=(int, type(None)))
        return count

    def tokens(self) -> list[int]:
        """/tokenize's token ids."""
        ids: list[int] = self.pick("tokens", kind=list)
        for index in (i for i, token in enumerate(ids) if type(token) is not int):
            self.pick("tokens", index, kind=int)  # the first one that is not says what it is
        return ids

    def prompt_logprobs(self) -> list[dict[int, TokenLogprob] | None]:
        """vLLM's prompt_logprobs (choices[0], or top level): per prompt position, candidate
        token id -> (logprob, rank); None where the position has none (the first one)."""
        path: tuple[str | int, ...] = ("choices", 0, "prompt_logprobs")
        if self.pick(*path, kind=(list, type(None))) is None:
            path = ("prompt_logprobs",)
        rows = self.pick(*path, kind=list)
        return [self._logprob_row((*path, i)) for i in range(len(rows))]

    def _logprob_row(self, path: tuple[str | int, ...]) -> dict[int, TokenLogprob] | None:
        row = self.pick(*path, kind=(dict, type(None)))
        if row is None:
            return None
        out: dict[int, TokenLogprob] = {}
        for token in row:
            logprob = self.pick(*path, token, "logprob", kind=(int, float))
            if not token.lstrip("-").isdigit() or not math.isfinite(logprob):
                where = net.dotted((*path, token, "logprob"))
                raise BadAnswer(f"{self.answered} with {where} {logprob} (not a token's logprob)")
            rank = self.pick(*path, token, "rank", kind=int)
            out[int(token)] = TokenLogprob(float(logprob), rank)
        return out


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


def _short(text: str, most: int = _FAULT_CHARS) -> str:
    # Often the server's own words: one line, and no control character reaches a terminal.
    text = "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))
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
        deadline_s: float | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = (connect_timeout_s, timeout_s)
        # The most one answer may take, headers to last byte (timeout_s bounds each read).
        self.deadline_s = DEADLINE_READS * timeout_s if deadline_s is None else deadline_s
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
            session.mount("http://", net.watched_adapter()())
            session.mount("https://", net.watched_adapter()())
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
            deadline_s=self.deadline_s,
        )

    def bearer_env(self) -> dict[str, str]:
        """OPENAI_API_KEY for a child that calls this serve itself (lm-eval); never argv."""
        return {"OPENAI_API_KEY": self._api_key} if self._api_key else {}

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

    def _answered(self, method: str, url: str) -> str:
        return f"the server at {self.base_url} answered {method} {url[len(self.base_url) :] or '/'}"

    # --- the retry policy ------------------------------------------------------------------

    def _attempts(
        self, method: str, url: str, call: Callable[[net.Deadline], T], retries: int | None = None
    ) -> tuple[T, list[str]]:
        """Run call() under the retry policy and each attempt's deadline; return its result and
        every fault retried."""
        import requests

        attempts = 1 + (self.retries if retries is None else retries)
        faults: list[str] = []
        for attempt in range(attempts):
            try:
                with net.deadline(self.deadline_s) as watch:
                    try:
                        return call(watch), faults
                    except (requests.RequestException, _Transient, net.Unfit):
                        # Cut off, a body can also look merely short or malformed.
                        if watch.expired:
                            raise BadAnswer(self._too_slow(method, url, watch), faults) from None
                        raise
            except net.Unfit as exc:
                raise BadAnswer(f"{self._answered(method, url)} {exc}", faults) from None
            except RequestFailed as exc:
                # A 4xx or a bad answer: the faults retried before it still belong to this call.
                exc.faults = faults + [f for f in exc.faults if f not in faults]
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

    def _too_slow(self, method: str, url: str, watch: net.Deadline) -> str:
        self._drop_session()
        limits = f"an answer may take {self.deadline_s:g} s, a whole body {BODY_S:g} s past headers"
        cut = f"too slowly: cut off after {watch.age():.0f} s ({limits})"
        return f"{self._answered(method, url)} {cut}"

    def _send(self, method: str, url: str, payload: Mapping[str, Any] | None) -> requests.Response:
        """One attempt, up to its headers (the body is the caller's to read, bounded); a 5xx is
        transient, a 4xx fails the call for good, a redirect is not followed."""
        response = self._session().request(
            method, url, json=payload, timeout=self.timeout, stream=True, allow_redirects=False
        )
        status = response.status_code
        if status < 300:
            return response
        with response:
            if status >= 500:
                raise _Transient(f"HTTP {status}")
            answered = self._answered(method, url)
            if status < 400:
                where = response.headers.get("Location", "nowhere")
                raise BadAnswer(f"{answered} HTTP {status} (to {_short(where, 120)}), a redirect")
            head = net.head(response, _ERROR_BODY_BYTES).decode("utf-8", "replace")
        body = _short(head, _BODY_CHARS)
        raise RequestFailed(f"{method} {url} -> HTTP {status}: {body}")

    def _json(
        self, method: str, path: str, payload: Mapping[str, Any] | None, retries: int | None = None
    ) -> Reply:
        url = self.url(path)
        answered = self._answered(method, url)

        def call(watch: net.Deadline) -> tuple[dict[str, Any], float]:
            start = time.perf_counter()
            with self._send(method, url, payload) as response:
                watch.within(BODY_S)
                try:
                    data = net.read_json(response, MAX_ANSWER_BYTES, MAX_CONTAINERS)
                except ValueError as exc:  # a proxy's error page, say: worth another attempt
                    raise _Transient(f"bad body: HTTP {response.status_code} {exc}") from None
            return data, time.perf_counter() - start

        (data, seconds), faults = self._attempts(method, url, call, retries)
        return Reply(data, faults, seconds, answered)

    def _get(self, path: str, *, retries: int | None = None) -> str:
        """GET a text answer (/metrics) under the retry policy, bounded like every answer."""
        url = self.url(path)

        def call(watch: net.Deadline) -> str:
            with self._send("GET", url, None) as response:
                watch.within(BODY_S)
                return net.read_capped(response, MAX_ANSWER_BYTES).decode("utf-8", "replace")

        text, _ = self._attempts("GET", url, call, retries)
        return text

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

        def call(watch: net.Deadline) -> StreamReply:
            start = time.perf_counter()
            return read_stream(self._send("POST", url, body), start)

        reply, faults = self._attempts("POST", url, call)
        reply.faults = faults
        return reply

    def health(self) -> bool:
        """Whether /health answers 200 right now (one attempt, no retries: callers poll; the
        body is never read)."""
        import requests

        try:
            with net.deadline(sum(HEALTH_TIMEOUT)):
                response = self._session().get(
                    self.url("/health"), timeout=HEALTH_TIMEOUT, stream=True, allow_redirects=False
                )
        except requests.RequestException:
            self._drop_session()
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
        reply = self.get("/v1/models", retries=retries)
        entries: dict[str, dict[str, Any]] = {}
        for index in range(len(reply.pick("data", kind=list))):
            name = reply.pick("data", index, "id", kind=str)
            length = reply.pick("data", index, "max_model_len", kind=(int, type(None)))
            if length is not None and length < 1:
                raise BadAnswer(f"{reply.answered} with data[{index}].max_model_len {length}")
            entries[name] = dict(reply.pick("data", index, kind=dict))
        return entries

    def models(self) -> list[str]:
        """The served model names listed by /v1/models."""
        return list(self.model_entries())

    def version(self) -> str | None:
        """The server's /version, or None when it has none (an older or a non-vLLM server)."""
        version: str | None = None
        with contextlib.suppress(RuntimeFailure):
            version = self.get("/version", retries=0).pick("version", kind=(str, type(None)))
        return version

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
        payload: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
        payload["temperature"] = temperature
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
        asked = [dict(message) for message in messages]
        payload: dict[str, Any] = {"model": model, "messages": asked, "temperature": temperature}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        payload.update(extra)
        return self.post("/v1/chat/completions", payload).data

    def tokenize(self, model: str, text: str, *, special: bool = True) -> list[int]:
        """Token ids of text under the served model's tokenizer (vLLM's /tokenize)."""
        payload = {"model": model, "prompt": text, "add_special_tokens": special}
        return self.post("/tokenize", payload).tokens()

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
        load: int = self.get("/load", retries=0).pick("server_load", kind=int)
        return load

    def gauges(self, *names: str) -> dict[str, float]:
        """/metrics' sum of samples for each name (see sample_sums): the drain's and status's
        request counts, without a full parse."""
        return net.sample_sums(self._get("/metrics"), names)

    def metrics(self) -> Metrics:
        """/metrics parsed with prometheus_client: sample name -> [(labels, value), ...]."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self._get("/metrics")
        parsed: Metrics = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    parsed.setdefault(sample.name, []).append(
                        (dict(sample.labels), float(sample.value))
                    )
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            answered = self._answered("GET", self.url("/metrics"))
            raise BadAnswer(f"{answered} with text that is not Prometheus metrics ({exc})") from exc
        return parsed


def stream_events(response: requests.Response) -> Iterator[tuple[float, dict[str, Any] | None]]:
    """The server-sent events of an OpenAI stream as (arrival time, event), then (time, None)
    for [DONE]; a bad or error event is transient. Closing the generator closes the response."""
    with response:
        bounds = (MAX_EVENT_BYTES, MAX_STREAM_BYTES, MAX_STREAM_EVENTS)
        for now, data in net.sse_data(response, *bounds):
            if data == b"[DONE]":
                yield now, None
                return
            try:
                event = json.loads(data)
            except (ValueError, RecursionError) as exc:
                raise _Transient(f"bad stream event: {net.preview(data)}") from exc
            if not isinstance(event, dict):
                raise _Transient(f"bad stream event: {net.json_type(event)}, not a JSON object")
            if "error" in event:
                raise _Transient(f"stream error: {_short(str(event['error']), 200)}")
            yield now, event


def _event_fields(event: dict[str, Any]) -> tuple[list[str], str | None, dict[str, Any]]:
    """(texts, finish reason, usage) of one stream event, each checked; Unfit naming a field."""
    pick, null = net.pick, type(None)
    try:
        choices = range(len(pick(event, ("choices",), (list, null)) or ()))
        texts = [pick(event, ("choices", i, "text"), (str, null)) or "" for i in choices]
        reasons = [pick(event, ("choices", i, "finish_reason"), (str, null)) for i in choices]
        usage = pick(event, ("usage",), (dict, null)) or {}
        for name in ("completion_tokens", "prompt_tokens"):
            pick(usage, (name,), (int, null))
    except net.Unfit as exc:
        raise net.Unfit(f"with a stream event {exc}") from None
    return texts, next((reason for reason in reversed(reasons) if reason), None), usage


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
        texts, reason, counts = _event_fields(event)
        for text in filter(None, texts):
            arrivals.append(now)
            chunks.append(text)
        finish = reason or finish
        usage = counts or usage
    if not done:
        # A transport fault, not a model answer.
        raise _Transient("stream ended before [DONE]")
    tokens = usage.get("completion_tokens")
    return StreamReply(
        start=start,
        arrivals=arrivals,
        chunks=chunks,
        completion_tokens=len(arrivals) if tokens is None else int(tokens),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        finish_reason=finish,
    )
