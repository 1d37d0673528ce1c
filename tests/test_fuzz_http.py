"""Property-based fuzz of paroctl.client against generated hostile answers: every call returns a
value of its type or raises a paroctl error (exit 2); nothing else, no hang, bounded memory.

Each case is one answer the hostile server of tests/test_hostile_http.py plays from a generated
spec (status, Content-Type, Content-Encoding, framing that may lie about the length, a body that
may be huge, endless or a trickle, shaped like the API's answers with every field of any type, or
a stream of such events) and one client call that meets it. The client runs in a worker process
under a memory limit (RLIMIT_AS) and a per-case wall time, like tests/fuzz_sandbox.py's: a crash,
a hang or a blow-up fails the test with the case named. Run as a script, this file is the worker
(`gates` mode indexes answers as the gates did before the client's accessors, for a comparison).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
CASE_TIMEOUT_S = 30.0  # two attempts at a 1.5 s deadline, on a loaded 2-core machine
START_TIMEOUT_S = 60.0
# Over what the worker maps after importing the client: the client's bounds let one answer take
# ~16 MiB read and a few times that parsed; an unbounded read of an endless body takes it all.
MEMORY_HEADROOM = 768 << 20
DRIP_S = 0.3


class CaseFailed(AssertionError):
    """A fuzz case crashed, hung or ran out of memory in the worker."""


# --- the generated answers -----------------------------------------------------------------------

KEYS = st.sampled_from(
    ["choices", "text", "message", "content", "finish_reason", "usage", "prompt_tokens",
     "completion_tokens", "tokens", "data", "id", "max_model_len", "version", "server_load",
     "prompt_logprobs", "logprob", "rank", "error", "1", "x"]
)  # fmt: skip
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
ANY = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)


def _maybe(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(shape, ANY)


ROW = st.dictionaries(
    st.sampled_from(["1", "2", "-3", "x", "07"]),
    _maybe(st.fixed_dictionaries({}, optional={"logprob": ANY, "rank": ANY})),
    max_size=3,
)
CHOICE = st.fixed_dictionaries(
    {},
    optional={
        "text": ANY,
        "message": _maybe(st.fixed_dictionaries({}, optional={"content": ANY})),
        "finish_reason": ANY,
        "prompt_logprobs": _maybe(st.lists(st.one_of(st.none(), _maybe(ROW)), max_size=3)),
    },
)
MODEL = st.fixed_dictionaries({"id": ANY}, optional={"max_model_len": ANY})
ANSWER = st.fixed_dictionaries(
    {},
    optional={
        "choices": _maybe(st.lists(_maybe(CHOICE), max_size=2)),
        "usage": _maybe(st.fixed_dictionaries({}, optional={"prompt_tokens": ANY})),
        "tokens": _maybe(st.lists(ANY, max_size=4)),
        "data": _maybe(st.lists(_maybe(MODEL), max_size=2)),
        "version": ANY,
        "server_load": ANY,
        "error": ANY,
    },
)


@st.composite
def events(draw: st.DrawFn) -> str:
    """A server-sent-event stream: answer-shaped events, junk lines, [DONE] or not."""
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["event", "event", "junk", "comment", "bad"]))
        if kind == "event":
            lines.append(f"data: {json.dumps(draw(ANSWER))}\n\n")
        elif kind == "junk":
            lines.append(draw(st.text(max_size=20)) + "\n")
        elif kind == "comment":
            lines.append(": keep-alive\r\n\r\n")
        else:
            lines.append(f"data: {draw(st.text(max_size=10))}\n\n")
    if draw(st.booleans()):
        lines.append("data: [DONE]\n\n")
    return "".join(lines)


BIG = st.sampled_from([1, 1, 1, 1, 1000, 1 << 20, 20 << 20])
METRICS = st.sampled_from(
    ['vllm:num_requests_running{model_name="m"} 2\n', "vllm:x 1 2 3 4\n", "# TYPE x gauge\nx{\n",
     "vllm:y{a=\"}\"} NaN\n", "\x00\xff", "vllm:num_requests_running 1e999\n"]
)  # fmt: skip


@st.composite
def spec(draw: st.DrawFn) -> dict[str, Any]:
    """One generated answer for the hostile server's `spec:` play."""
    kind = draw(st.sampled_from(["answer", "answer", "events", "metrics", "bytes", "repeat"]))
    if kind == "answer":
        parts = [[json.dumps(draw(ANSWER)).encode().decode("latin-1"), 1]]
    elif kind == "events":
        parts = [[draw(events()).encode().decode("latin-1"), draw(st.sampled_from([1, 1, 5000]))]]
    elif kind == "metrics":
        parts = [[draw(METRICS).encode().decode("latin-1"), draw(BIG)]]
    elif kind == "bytes":
        parts = [[draw(st.binary(max_size=40)).decode("latin-1"), 1]]
    else:
        unit = draw(st.sampled_from(["a", "{", "[", "\n", " ", 'data: {"choices": []}\n\n']))
        parts = [[unit, draw(BIG)]]
    return {
        "status": draw(st.sampled_from([200] * 6 + [201, 204, 302, 304, 404, 418, 429, 500, 503, 999])),
        "type": draw(st.sampled_from([None, "application/json", "application/json", "text/event-stream",
                                      "text/html", "text/plain", ""])),
        "encoding": draw(st.sampled_from([None, None, None, "gzip", "deflate", "bogus", "gzip, gzip"])),
        "framing": draw(st.sampled_from(["length", "length", "chunked", "close", "long", "short"])),
        "body": parts,
        "forever": draw(st.sampled_from([False] * 9 + [True])),
        "drip": draw(st.sampled_from([False] * 19 + [True])),
    }  # fmt: skip


OPS = ("text", "content", "finish", "usage", "tokens", "logprobs", "models", "version", "load",
       "metrics", "gauges", "stream", "health")  # fmt: skip


# --- the worker ----------------------------------------------------------------------------------


def _call(client: Any, op: str, gates: bool) -> Any:
    payload = {"model": "m", "prompt": "x", "max_tokens": 4}
    if op in ("text", "content", "finish", "usage", "logprobs"):
        path = "/v1/chat/completions" if op == "content" else "/v1/completions"
        reply = client.post(path, payload)
        if gates:  # as the gates read answers before the client had accessors
            choice = reply.data["choices"][0]
            usage = reply.data.get("usage") or {}
            return (choice.get("text"), choice["message"].get("content") if op == "content"
                    else None, choice.get("finish_reason"), usage.get("prompt_tokens"))  # fmt: skip
        if op == "logprobs":
            return reply.prompt_logprobs()
        return (reply.text() if op == "text" else reply.content() if op == "content" else
                reply.finish_reason() if op == "finish" else reply.usage("prompt_tokens"))  # fmt: skip
    if op == "stream":
        return client.stream(payload).text
    if op == "gauges":
        return client.gauges("vllm:num_requests_running")
    if op == "tokens":
        return client.tokenize("m", "hello")
    return getattr(client, op)()


def _case(url: str, op: str, gates: bool) -> str:
    from paroctl.client import Client
    from paroctl.errors import ParoctlError

    try:
        client = Client(url, retries=1, backoff_s=0.0, timeout_s=0.5, deadline_s=1.5)
    except TypeError:  # the comparison run against the client before it had a deadline
        client = Client(url, retries=1, backoff_s=0.0, timeout_s=0.5)
    try:
        _call(client, op, gates)
    except ParoctlError as exc:
        if not exc.message or "\n" in exc.message or "Traceback" in exc.message:
            return f"bad-message: {exc.message[:300]!r}"
        return "refused"
    finally:
        client.close()
    return "answered"


def _serve(gates: bool) -> None:
    import resource
    import traceback

    import paroctl.client

    paroctl.client.Client("http://127.0.0.1:1")._session()
    with open("/proc/self/statm") as handle:
        mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (mapped + MEMORY_HEADROOM, mapped + MEMORY_HEADROOM))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer: dict[str, Any] = {"outcome": _case(request["url"], request["op"], gates)}
        except BaseException:  # a MemoryError under the limit too: the case fails, not the worker
            answer = {"error": traceback.format_exc(limit=-6)}
        answer["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


class Worker:
    """The parent side: a worker started on first use and restarted after a hang or a death."""

    def __init__(self, gates: bool = False) -> None:
        self.gates = gates
        self.proc: subprocess.Popen[str] | None = None
        self.counts = {"cases": 0, "answered": 0, "refused": 0, "crashes": 0, "hangs": 0}
        self.peak_rss_mb = 0

    def ask(self, url: str, op: str, shown: str) -> str:
        """Run one case; its outcome, or CaseFailed naming it."""
        self.counts["cases"] += 1
        proc = self._worker()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"url": url, "op": op}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], CASE_TIMEOUT_S)
        if not ready:
            self.close()
            self.counts["hangs"] += 1
            raise CaseFailed(f"hang: no answer within {CASE_TIMEOUT_S} s for {op} on {shown}")
        line = proc.stdout.readline()
        if not line:
            self.close()
            self.counts["crashes"] += 1
            raise CaseFailed(f"the worker died on {op} on {shown}")
        answer = json.loads(line)
        self.peak_rss_mb = max(self.peak_rss_mb, int(answer["rss_mb"]))
        outcome = str(answer.get("outcome", "crash"))
        if "error" in answer or outcome.startswith("bad-message"):
            self.counts["crashes"] += 1
            raise CaseFailed(f"{answer.get('error', outcome)}\non {op} on {shown}")
        self.counts[outcome] += 1
        return outcome

    def close(self) -> None:
        """Stop the worker (it is started again on the next case)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _worker(self) -> subprocess.Popen[str]:
        if self.proc is None:
            argv = [sys.executable, __file__] + (["gates"] if self.gates else [])
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            if not ready or proc.stdout.readline() != "ready\n":
                proc.kill()
                raise CaseFailed(f"the fuzz worker did not start within {START_TIMEOUT_S} s")
            self.proc = proc
        return self.proc


# --- the property ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    from test_hostile_http import HOSTILE

    proc = subprocess.Popen([sys.executable, "-c", HOSTILE, str(DRIP_S)], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120.0)
    assert ready, "the hostile server did not start"
    yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    box = Worker()
    yield box
    box.close()
    print(f"\nhostile-http fuzz: {box.counts}, worker peak RSS {box.peak_rss_mb} MB")


def played(base: str, answer: dict[str, Any]) -> str:
    """The address under which the hostile server plays `answer` on every request."""
    from urllib.parse import quote

    return f"{base}/h/{quote('spec:' + json.dumps(answer), safe='')}/all"


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(answer=spec(), op=st.sampled_from(OPS))
def test_any_answer_is_a_value_or_a_clean_refusal(
    server: str, worker: Worker, answer: dict[str, Any], op: str
) -> None:
    worker.ask(played(server, answer), op, json.dumps(answer)[:400])


if __name__ == "__main__":
    _serve(gates=sys.argv[1:] == ["gates"])
