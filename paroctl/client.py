"""OpenAI-compatible HTTP client for a vLLM serve: session, timeouts, retries, streaming, /metrics.

`requests` and `prometheus_client` are imported inside methods so that `paroctl --help` and
the commands that never talk HTTP do not pay for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from paroctl.errors import RuntimeFailure

if TYPE_CHECKING:
    import requests

# (labels, value) per sample, keyed by the sample name as exposed (counters keep `_total`).
Metrics = dict[str, list[tuple[dict[str, str], float]]]

_BODY_CHARS = 500


def _body_excerpt(response: requests.Response) -> str:
    text = response.text.strip()
    return text if len(text) <= _BODY_CHARS else text[:_BODY_CHARS] + "..."


def metric_value(metrics: Metrics, name: str, **labels: str) -> float:
    """Sum of the samples of one metric whose labels include all of labels (0.0 if none)."""
    return sum(
        value
        for sample_labels, value in metrics.get(name, [])
        if all(sample_labels.get(key) == want for key, want in labels.items())
    )


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
        self.api_key = api_key
        self._session: requests.Session | None = None

    @property
    def session(self) -> requests.Session:
        """The pooled HTTP session, created on first use."""
        if self._session is None:
            import requests

            self._session = requests.Session()
            if self.api_key:
                self._session.headers["Authorization"] = f"Bearer {self.api_key}"
        return self._session

    def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, path: str) -> str:
        """The absolute URL of an API path."""
        return f"{self.base_url}/{path.lstrip('/')}"

    def _check(self, method: str, url: str, response: requests.Response) -> requests.Response:
        if response.status_code >= 400:
            raise RuntimeFailure(
                f"{method} {url} -> HTTP {response.status_code}: {_body_excerpt(response)}"
            )
        return response

    def _get(self, path: str, *, retries: int | None = None) -> requests.Response:
        import requests

        url = self.url(path)
        attempts = 1 + (self.retries if retries is None else retries)
        for attempt in range(attempts):
            try:
                response = self.session.get(url, timeout=self.timeout)
            except requests.ConnectionError as exc:
                # Only connection failures are retried, and only on GETs: they are idempotent,
                # and a serve that is just binding its port refuses for a moment.
                if attempt + 1 >= attempts:
                    raise RuntimeFailure(
                        f"GET {url}: cannot connect after {attempts} attempts ({exc})"
                    ) from exc
                time.sleep(self.backoff_s * 2**attempt)
                continue
            except requests.RequestException as exc:
                raise RuntimeFailure(f"GET {url}: {exc}") from exc
            return self._check("GET", url, response)
        raise AssertionError("unreachable")

    def _post(
        self, path: str, payload: Mapping[str, Any], *, stream: bool = False
    ) -> requests.Response:
        import requests

        url = self.url(path)
        try:
            # No retry: a POST that reached the server may already be generating.
            response = self.session.post(url, json=payload, timeout=self.timeout, stream=stream)
        except requests.RequestException as exc:
            raise RuntimeFailure(f"POST {url}: {exc}") from exc
        return self._check("POST", url, response)

    def _post_json(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        response = self._post(path, payload)
        try:
            data = response.json()
        except ValueError as exc:
            raise RuntimeFailure(f"POST {response.url}: response is not JSON") from exc
        if not isinstance(data, dict):
            raise RuntimeFailure(f"POST {response.url}: expected a JSON object")
        return data

    def health(self) -> bool:
        """Whether /health answers 200 right now (one attempt, no retries: callers poll)."""
        import requests

        try:
            response = self.session.get(self.url("/health"), timeout=(1.0, 5.0))
        except requests.RequestException:
            return False
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

    def models(self) -> list[str]:
        """The served model names listed by /v1/models."""
        data = self._get("/v1/models").json()
        return [str(entry["id"]) for entry in data.get("data", [])]

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
        return self._post_json("/v1/completions", payload)

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
        return self._post_json("/v1/chat/completions", payload)

    def tokenize(self, model: str, text: str) -> list[int]:
        """Token ids of text under the served model's tokenizer (vLLM's /tokenize)."""
        data = self._post_json("/tokenize", {"model": model, "prompt": text})
        return [int(token) for token in data["tokens"]]

    def stream_completion(
        self,
        model: str,
        prompt: str | Sequence[int],
        max_tokens: int,
        temperature: float = 0.0,
        **extra: Any,
    ) -> Iterator[tuple[float, str]]:
        """Stream a completion, yielding (time.perf_counter() at arrival, text) per chunk."""
        payload: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
        }
        payload.update(extra)
        response = self._post("/v1/completions", payload, stream=True)
        with response:
            for raw in response.iter_lines():
                now = time.perf_counter()
                line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeFailure(f"POST {response.url}: stream error {event['error']}")
                for choice in event.get("choices", []):
                    if choice.get("text"):
                        yield now, str(choice["text"])

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
