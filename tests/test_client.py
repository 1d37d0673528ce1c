"""paroctl.client's one retry policy, bearer key and stream reader, against a real HTTP server.

The server is the standard library's, on loopback, scripted per path: the faults it plays (5xx,
a stream cut before [DONE], a 4xx) are what a real serve or proxy sends, and a vLLM CPU serve
cannot be made to send them on cue. The same client against the real serve, faults injected by a
real TCP proxy, is tests/e2e/gates/test_gates_live.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paroctl import net
from paroctl.client import BadAnswer, Client, RequestFailed, TokenLogprob
from paroctl.net import sample_sums


class Script:
    """Per path, the answers still to play (status, body); then 200 with the default body."""

    def __init__(self) -> None:
        self.plans: dict[str, list[tuple[int, bytes]]] = {}
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, Authorization


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            script.seen.append((self.command, self.path, self.headers.get("Authorization")))
            plan = script.plans.get(self.path) or []
            status, body = plan.pop(0) if plan else (200, _default(self.path))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    return Handler


def _default(path: str) -> bytes:
    if path == "/v1/completions":
        return _sse(["he", "llo"], done=True)
    if path == "/metrics":
        return b'vllm:num_requests_running{model_name="m"} 2.0\n'
    if path == "/v1/models":
        return json.dumps({"data": [{"id": "m", "max_model_len": 2048}]}).encode()
    return b'{"ok": true}'


def _sse(texts: list[str], done: bool) -> bytes:
    events = [{"choices": [{"text": t, "finish_reason": None}]} for t in texts]
    events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(texts)}})
    lines = [f"data: {json.dumps(e)}\n\n" for e in events] + (["data: [DONE]\n\n"] if done else [])
    return "".join(lines).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def test_every_request_carries_the_bearer_key(server: tuple[str, Script]) -> None:
    url, script = server
    with Client(url, api_key="sk-test") as client:
        assert client.health()
        assert client.models() == ["m"]
        client.post("/v1/chat/completions", {"model": "m"})
        assert client.stream({"model": "m", "prompt": "x"}).text == "hello"
        assert client.metrics()["vllm:num_requests_running"] == [({"model_name": "m"}, 2.0)]
    assert len(script.seen) == 5
    assert {auth for _, _, auth in script.seen} == {"Bearer sk-test"}
    with Client(url) as anonymous:
        anonymous.post("/tokenize", {})
    assert script.seen[-1][2] is None


def test_transient_faults_are_retried_and_each_is_recorded(server: tuple[str, Script]) -> None:
    url, script = server
    script.plans["/x"] = [(503, b""), (502, b""), (200, b"not json")]
    reply = Client(url, retries=3, backoff_s=0.01).post("/x", {})
    assert reply.data == {"ok": True}
    assert reply.faults == ["HTTP 503", "HTTP 502", "bad body: HTTP 200 not JSON: 'not json'"]
    script.plans["/x"] = [(503, b""), (503, b"")]
    with pytest.raises(RequestFailed) as info:
        Client(url, retries=1, backoff_s=0.01).post("/x", {})
    assert info.value.faults == ["HTTP 503", "HTTP 503"]
    assert info.value.message == f"POST {url}/x: gave up after 2 attempts (HTTP 503)"


def test_a_client_error_fails_at_once_naming_url_status_and_body(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.plans["/x"] = [(503, b""), (404, b'{"error": "no such model"}')]
    with pytest.raises(RequestFailed) as info:
        Client(url, retries=5, backoff_s=0.01).post("/x", {})
    assert info.value.message == f'POST {url}/x -> HTTP 404: {{"error": "no such model"}}'
    assert info.value.faults == ["HTTP 503"]  # the fault before it still belongs to the call
    assert len(script.seen) == 2


def test_a_stream_cut_before_done_is_retried_from_scratch(server: tuple[str, Script]) -> None:
    url, script = server
    script.plans["/v1/completions"] = [(200, _sse(["he"], done=False))]
    reply = Client(url, backoff_s=0.01).stream({"model": "m", "prompt": "x"})
    assert (reply.text, reply.chunks, reply.completion_tokens) == ("hello", ["he", "llo"], 2)
    assert reply.faults == ["stream ended before [DONE]"]
    assert len(reply.arrivals) == 2 and reply.prompt_tokens == 3


def test_a_closed_port_cannot_connect_after_every_attempt() -> None:
    url = f"http://127.0.0.1:{net.free_port()}"
    with pytest.raises(RequestFailed, match=r"GET .*/v1/models: cannot connect after 2 attempts"):
        Client(url, retries=1, backoff_s=0.01).models()
    assert not Client(url).health()


def test_sample_sums_agree_with_the_prometheus_parser() -> None:
    # The line scan the drain and status use, against prometheus_client's full parse, on text
    # shaped like vLLM's (labels, a histogram, comments), with braces and quotes inside label
    # values, a sample timestamp, and a metric that is absent.
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
        'vllm:num_requests_running{engine="1",model_name="we}ird \\"name\\" {x}"} 3.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 4 1700000000000\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="m"} 1.0\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7.0\n'
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 7.0\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="m"} 2.5\n'
    )
    from prometheus_client.parser import text_string_to_metric_families

    parsed: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            parsed[sample.name] = parsed.get(sample.name, 0.0) + float(sample.value)
    names = [*parsed, "vllm:absent"]
    assert sample_sums(text, names) == {**parsed, "vllm:absent": 0.0}
    assert sample_sums(text, ["vllm:num_requests_running"]) == {"vllm:num_requests_running": 5.0}


def test_the_accessors_read_a_vllm_shaped_answer(server: tuple[str, Script]) -> None:
    url, script = server
    row = {"7": {"logprob": -0.1, "rank": 1, "decoded_token": "a"}, "3": {"logprob": -2, "rank": 2}}
    choice = {"text": " Paris", "finish_reason": "length", "prompt_logprobs": [None, row]}
    answer = {"choices": [choice], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}
    script.plans["/v1/completions"] = [(200, json.dumps(answer).encode())]
    reply = Client(url).post("/v1/completions", {})
    assert (reply.text(), reply.finish_reason(), reply.usage("prompt_tokens")) == (
        " Paris",
        "length",
        2,
    )
    assert reply.prompt_logprobs() == [None, {7: TokenLogprob(-0.1, 1), 3: TokenLogprob(-2.0, 2)}]
    assert reply.usage("total_tokens") is None  # a count the server does not give is unknown
    row["7"]["logprob"] = float("nan")
    script.plans["/v1/completions"] = [(200, json.dumps(answer).encode())]
    with pytest.raises(BadAnswer, match=r"with 'choices\[0\].prompt_logprobs\[1\].7.logprob' nan"):
        Client(url).post("/v1/completions", {}).prompt_logprobs()
