"""paroctl.client against a hostile HTTP server: every answer bounded in size, time and memory,
and every refusal a could-not-run error that says what the server did wrong.

The server is a real socket server in its own process (HOSTILE below), speaking HTTP/1.1 by
hand so it can do what no well-behaved framework lets it: lie in Content-Length, inflate a 1 KiB
body to 1 GiB (gzip and deflate bombs), never end a body or a stream, send one byte every 2 s,
answer out of the API's shape or with odd statuses. The URL picks the play: `/h/<play>/<scope>`,
then the API path; scope `all` plays on every request, `post` only on POSTs (so a gate gets past
/v1/models and meets the play in its work), `stream` only on streamed completions. The client runs in this process where only its
behaviour is asserted, and in a child process where its memory is (peak RSS from getrusage).
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paroctl.client import BadAnswer, Client, RequestFailed
from paroctl.errors import EXIT_CANNOT_RUN, ParoctlError
from paroctl.store.results import open_store

REPO = Path(__file__).resolve().parents[1]
DRIP_S = 2.0  # the trickle: one byte every 2 s, which no read timeout ever cuts
# Wall bounds for a loaded 2-core machine, far above what a bounded client needs (a cut-off
# trickle ends at the client's deadline, a bomb at its size bound) and far below an unbounded one.
CASE_WALL_S = 60.0
# Peak RSS of a child that imports paroctl.client and requests, then reads one hostile answer:
# ~60 MB to start; the bounds allow a 16 MiB answer and its parse. An unbounded client reading
# the 1 GiB bomb or an endless body passes 1 GB.
CHILD_RSS_MB = 400

HOSTILE = r"""
import json, socketserver, struct, sys, time, zlib
from urllib.parse import unquote

DRIP = float(sys.argv[1])
MODELS = json.dumps({"data": [{"id": "m", "max_model_len": 2048}]}).encode()
EVENT = b'data: {"choices": [{"text": "x", "finish_reason": null}]}\n\n'


def bomb(encoding, mib=1024):
    # 1 GiB of zeros in ~1 MiB: identical full-flush blocks; CRC32 / Adler-32 of 1 GiB of zeros.
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = (c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)) * mib + c.flush()
    if encoding == "gzip":
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + raw + struct.pack("<II", 0x5B64C2B0, 0)
    return b"\x78\xda" + raw + struct.pack(">I", 0xC02D0001)


BOMBS = {"gzip": bomb("gzip"), "deflate": bomb("deflate")}


class Handler(socketserver.StreamRequestHandler):
    def head(self, status, headers):
        lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers.items()]
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def send(self, status, body, kind="application/json", **extra):
        self.head(status, {"Content-Type": kind, "Content-Length": len(body), **extra})
        self.wfile.write(body)
        return True

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def forever(self, data, chunked=True):
        while True:
            self.chunk(data) if chunked else self.wfile.write(data)

    def drip(self, data):
        for byte in data:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(DRIP)
        return False

    def normal(self, method, path, payload):
        if path == "/v1/models":
            return self.send("200 OK", MODELS)
        if path == "/version":
            return self.send("200 OK", b'{"version": "hostile"}')
        if path == "/metrics":
            return self.send("200 OK", b"vllm:num_requests_running 0\n", "text/plain")
        if path == "/tokenize":
            tokens = list(range(len(str(payload.get("prompt", ""))) // 4 + 1))
            return self.send("200 OK", json.dumps({"tokens": tokens}).encode())
        if payload.get("stream"):
            self.head("200 OK", {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
            for _ in range(4):
                self.chunk(EVENT)
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")
            return True
        text = {"text": " Paris", "message": {"role": "assistant", "content": "Paris"}}
        answer = {"choices": [{**text, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}
        return self.send("200 OK", json.dumps(answer).encode())

    def play(self, play, path, payload):
        sse = {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"}
        chunked = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
        if play == "huge":  # says 64 MiB and sends it
            self.head("200 OK", {"Content-Type": "application/json", "Content-Length": 64 << 20})
            self.forever(b" " * (1 << 20), chunked=False)
        if play == "huge-chunked":
            self.head("200 OK", chunked)
            self.chunk(b'{"choices": "')
            self.forever(b"a" * (1 << 16))
        if play == "endless-close":  # no length: the body ends when the connection does
            self.head("200 OK", {"Content-Type": "application/json", "Connection": "close"})
            self.forever(b"[" * (1 << 16), chunked=False)
        if play in ("gzip-bomb", "deflate-bomb"):
            encoding = play.split("-")[0]
            return self.send("200 OK", BOMBS[encoding], **{"Content-Encoding": encoding})
        if play == "bad-gzip":
            return self.send("200 OK", b"\x1f\x8b not gzip at all", **{"Content-Encoding": "gzip"})
        if play == "many-containers":
            return self.send("200 OK", b'{"a": [' + b"{}," * (1200 << 10) + b"{}]}")
        if play == "deep":
            return self.send("200 OK", b"[" * 200000 + b"]" * 200000)
        if play == "drip-headers":
            return self.drip(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10000)
        if play == "drip-body":
            self.head("200 OK", {"Content-Type": "application/json", "Content-Length": 10000})
            return self.drip(b'{"choices": "' + b"a" * 10000)
        if play == "sse-drip":
            self.head("200 OK", {"Content-Type": "text/event-stream", "Connection": "close"})
            return self.drip(EVENT * 1000)
        if play == "sse-endless":
            self.head("200 OK", sse)
            self.forever(EVENT * 64)
        if play == "sse-long-line":
            self.head("200 OK", sse)
            self.chunk(b"data: ")
            self.forever(b"a" * (1 << 16))
        if play == "sse-blank":
            self.head("200 OK", sse)
            self.forever(b"\n" * (1 << 16))
        if play == "sse-bad-event":
            self.head("200 OK", sse)
            self.chunk(b'data: {"choices": [{"text": 7}]}\n\n')
            self.chunk(b"")
            return True
        if play == "sse-as-json":
            return self.send("200 OK", b'{"choices": [{"text": "whole"}]}')
        if play == "many-headers":
            return self.send("200 OK", b"{}", **{f"X-{i}": "y" for i in range(200)})
        if play == "long-header":
            return self.send("200 OK", b"{}", **{"X-Long": "y" * 70000})
        if play == "html":
            return self.send("200 OK", b"<html><body>Gateway login</body></html>", "text/html")
        if play == "redirect":
            return self.send("302 Found", b"", Location="http://127.0.0.1:1/elsewhere")
        if play.startswith("status-"):
            return self.send(play[len("status-") :] + " Odd", b'{"error": "odd"}')
        if play.startswith("json:"):
            return self.send("200 OK", play[len("json:") :].encode())
        if play.startswith("spec:"):
            return self.spec(json.loads(play[len("spec:") :]))
        if play == "metrics-garbage":
            return self.send("200 OK", b"vllm:x{le=\"1\" 2 3 4 } }\n", "text/plain")
        return self.send("404 Not Found", b"no such play")

    def spec(self, spec):
        # A generated answer (tests/test_fuzz_http.py): status, type, encoding, framing, body.
        body = b"".join(part.encode("latin-1") * count for part, count in spec["body"])
        encoding = spec.get("encoding")
        if encoding in ("gzip", "deflate"):
            packer = zlib.compressobj(1, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
            body = packer.compress(body) + packer.flush()
        headers = {k: v for k, v in (("Content-Type", spec.get("type")),
                                     ("Content-Encoding", encoding)) if v is not None}
        framing = spec["framing"]
        if framing == "chunked":
            headers["Transfer-Encoding"] = "chunked"
        elif framing == "close":
            headers["Connection"] = "close"
        else:
            headers["Content-Length"] = len(body) + {"length": 0, "long": 5, "short": -5}[framing]
        self.head(f"{spec['status']} Generated", headers)
        if spec.get("drip"):
            return self.drip(body[:40])
        while True:
            for start in range(0, max(len(body), 1), 1 << 16):
                piece = body[start : start + (1 << 16)]
                if piece:
                    self.chunk(piece) if framing == "chunked" else self.wfile.write(piece)
            if not spec.get("forever"):
                break
        if framing == "chunked":
            self.chunk(b"")
        return framing in ("length", "chunked")

    def handle(self):
        try:
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                length = 0
                while (header := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                payload = json.loads(self.rfile.read(length) or b"{}")
                _, _, play, scope, rest = (target.split("/", 4) + ["", ""])[:5]
                path = "/" + rest.split("?")[0]
                hostile = scope == "all" or (scope == "post" and method == "POST")
                hostile = hostile or (scope == "stream" and payload.get("stream") is True)
                if hostile:
                    kept = self.play(unquote(play), path, payload)
                else:
                    kept = self.normal(method, path, payload)
                self.wfile.flush()
                if not kept:
                    return
        except (BrokenPipeError, ConnectionResetError):
            return


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    """The hostile server's base address, for the whole module (its bombs are built once)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOSTILE, str(DRIP_S)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120.0)
    assert ready, "the hostile server did not start"
    port = int(proc.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def at(base: str, play: str, scope: str = "all") -> str:
    """The address under which the server plays `play` (URL-quoted) on `scope`'s requests."""
    from urllib.parse import quote

    return f"{base}/h/{quote(play, safe='')}/{scope}"


# --- in this process: what the client says, for each kind of wrong answer -----------------------


def _fails(client: Client, call: str) -> RequestFailed:
    with pytest.raises(RequestFailed) as info:
        _call(client, call)
    assert isinstance(info.value, ParoctlError) and info.value.exit_code == EXIT_CANNOT_RUN
    return info.value


def _call(client: Client, call: str) -> Any:
    payload = {"model": "m", "prompt": "x", "max_tokens": 4}
    if call == "text":
        return client.post("/v1/completions", payload).text()
    if call == "content":
        return client.post("/v1/chat/completions", {"model": "m", "messages": []}).content()
    if call == "stream":
        return client.stream(payload).text
    if call == "tokens":
        return client.tokenize("m", "hello")
    if call == "models":
        return client.models()
    if call == "metrics":
        return client.metrics()
    raise AssertionError(call)


@pytest.mark.parametrize(
    ("play", "call", "says"),
    [
        ('json:{"id": "x"}', "text", "answered POST /v1/completions without 'choices'"),
        ('json:{"choices": "abc"}', "text", "with 'choices' a string, not an array"),
        ('json:{"choices": []}', "text", "without 'choices[0]'"),
        ('json:{"choices": [{"text": 5}]}', "text", "with 'choices[0].text' an integer, not a"),
        ('json:{"choices": [{"text": "a"}]}', "content", "without 'choices[0].message'"),
        ('json:{"tokens": ["a"]}', "tokens", "with 'tokens[0]' a string, not an integer"),
        ('json:{"data": [{"id": 3}]}', "models", "GET /v1/models with 'data[0].id' an integer"),
        ('json:{"object": "list"}', "models", "GET /v1/models without 'data'"),
        ("many-containers", "text", "with more than 1048576 JSON objects and arrays"),
        ("huge", "text", "with a 67108864-byte body (Content-Length), over the 16 MiB"),
        ("huge-chunked", "text", "with a body over the 16 MiB an answer may have"),
        ("redirect", "text", "answered POST /v1/completions HTTP 302 (to http://127.0.0.1:1/"),
        ("sse-as-json", "stream", "with 'application/json', not an event stream"),
        ("sse-bad-event", "stream", "with a stream event with 'choices[0].text' an integer"),
        ("sse-long-line", "stream", "with a stream line over 64 KiB"),
        ("metrics-garbage", "metrics", "GET /metrics with text that is not Prometheus metrics"),
    ],
)
def test_a_wrong_answer_is_refused_at_once_naming_what_the_server_did(
    hostile: str, play: str, call: str, says: str
) -> None:
    client = Client(at(hostile, play), retries=2, backoff_s=0.01)
    error = _fails(client, call)
    assert isinstance(error, BadAnswer), error.message
    assert error.message.startswith(f"the server at {at(hostile, play)} answered"), error.message
    assert says in error.message
    assert "\n" not in error.message and len(error.message) < 400


@pytest.mark.parametrize(
    ("play", "fault"),
    [
        (
            "html",
            "bad body: HTTP 200 text/html, not JSON: '<html><body>Gateway login</body></html>'",
        ),
        ("deep", "bad body: HTTP 200 not JSON: '[[[["),
        ("json:[1, 2]", "bad body: HTTP 200 an array, not a JSON object"),
        ("bad-gzip", "request: ('Received response with content-encoding: gzip"),
        ("many-headers", "connection: ('Connection aborted.', HTTPException('got more than 100"),
        ("long-header", "connection: ('Connection aborted.', LineTooLong('got more than 65536"),
        ("status-500", "HTTP 500"),
        ("status-999", "HTTP 999"),
    ],
)
def test_a_fault_that_may_pass_is_retried_then_named(hostile: str, play: str, fault: str) -> None:
    error = _fails(Client(at(hostile, play), retries=1, backoff_s=0.01), "text")
    assert not isinstance(error, BadAnswer)
    assert len(error.faults) == 2 and error.faults[0].startswith(fault), error.faults
    assert error.message.endswith(f" after 2 attempts ({error.faults[-1]})")


def test_odd_statuses_are_answers_or_refusals_never_crashes(hostile: str) -> None:
    client = Client(at(hostile, "status-418"), retries=3, backoff_s=0.01)
    error = _fails(client, "text")
    assert error.message.endswith('/v1/completions -> HTTP 418: {"error": "odd"}')
    assert error.faults == []  # a 4xx is the request's fault: not retried
    # A 2xx other than 200 is an answer like any other: its body is read as one.
    assert Client(at(hostile, "status-203")).post("/x", {}).data == {"error": "odd"}


@pytest.mark.parametrize("play", ["drip-headers", "drip-body", "sse-drip"])
def test_one_byte_every_2_s_is_cut_off_at_the_deadline(hostile: str, play: str) -> None:
    # A read timeout far above the trickle's 2 s: only the deadline can end it.
    client = Client(at(hostile, play), timeout_s=30.0, deadline_s=3.0, retries=3)
    start = time.monotonic()
    error = _fails(client, "stream" if play.startswith("sse") else "text")
    assert time.monotonic() - start < CASE_WALL_S
    assert isinstance(error, BadAnswer)  # too slow once is too slow: not retried
    assert "answered POST /v1/completions too slowly: cut off after" in error.message
    assert "an answer may take 3 s, a whole body 30 s past headers" in error.message


def test_a_health_probe_never_waits_on_a_trickle_or_reads_a_bomb(hostile: str) -> None:
    assert not Client(at(hostile, "drip-headers")).health()
    assert Client(at(hostile, "gzip-bomb")).health()  # 200; the body is never read


# --- in a child process: time and memory, against bodies that never end or inflate to 1 GiB -----

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from paroctl.client import Client
    from paroctl.errors import ParoctlError
    url, call = sys.argv[1], sys.argv[2]
    client = Client(url, retries=0)
    start = time.monotonic()
    payload = {"model": "m", "prompt": "x", "max_tokens": 4}
    try:
        if call == "stream":
            client.stream(payload)
        else:
            client.post("/v1/completions", payload).text()
        out = "ok"
    except ParoctlError as exc:
        out = exc.message
    hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    print(json.dumps({"message": out, "rss_mb": int(hwm) // 1024,
                      "seconds": time.monotonic() - start}))
    """
)


def _child(url: str, call: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url, call],
        capture_output=True,
        text=True,
        timeout=CASE_WALL_S,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("play", "call", "says"),
    [
        ("gzip-bomb", "text", "with a body over the 16 MiB an answer may have (counted after"),
        ("deflate-bomb", "text", "with a body over the 16 MiB an answer may have (counted after"),
        ("endless-close", "text", "with a body over the 16 MiB an answer may have"),
        ("sse-endless", "stream", "with more than 131072 stream events"),
        ("sse-blank", "stream", "with more than 524288 stream lines"),
    ],
)
def test_endless_and_inflating_answers_stay_bounded_in_memory(
    hostile: str, play: str, call: str, says: str
) -> None:
    result = _child(at(hostile, play), call)
    assert says in result["message"], result
    assert result["rss_mb"] < CHILD_RSS_MB, result


# --- the real CLI: a gate against the hostile server as its endpoint ------------------------------


# The CLI as `python -m paroctl` runs it, printing its own peak RSS at exit: VmHWM, the high-water
# mark of this process's memory. Not getrusage's ru_maxrss: Linux carries that over fork and exec,
# so a child of a large pytest worker reports the worker's peak (measured: 1290 MB after a test
# that imported torch in the same worker).
CLI_WITH_PEAK = textwrap.dedent(
    """
    import atexit, sys
    def peak():
        hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
        print(f"peak-rss-kb {hwm}", file=sys.stderr, flush=True)
    atexit.register(peak)
    from paroctl.cli.main import cli
    cli(args=sys.argv[1:], prog_name="paroctl")
    """
)


def _paroctl(*args: str) -> tuple[int, str, int]:
    """Run the real CLI in a child; its exit code, stderr+stdout and peak RSS (MB)."""
    done = subprocess.run(
        [sys.executable, "-c", CLI_WITH_PEAK, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
        timeout=CASE_WALL_S,
    )
    output = done.stdout.decode("utf-8", "replace")
    kb = [int(line.split()[1]) for line in output.splitlines() if line.startswith("peak-rss-kb ")]
    assert kb, output[-2000:]
    return done.returncode, output, kb[-1] // 1024


def test_a_gate_against_a_bomb_serving_endpoint_cannot_run_and_says_why(hostile: str) -> None:
    code, output, rss = _paroctl(
        "gate", "sanity", "--url", at(hostile, "gzip-bomb"), "--model", "m"
    )
    assert code == EXIT_CANNOT_RUN, output
    assert "answered GET /v1/models with a body over the 16 MiB an answer may have" in output
    assert "Traceback" not in output and "crashed" not in output
    assert rss < CHILD_RSS_MB


def test_a_gate_whose_requests_meet_an_endless_stream_cannot_run_and_says_why(
    hostile: str,
) -> None:
    start = time.monotonic()
    url = at(hostile, "sse-endless", scope="stream")
    args = ("--url", url, "--model", "m", "--contexts", "25", "--reps", "1")
    code, output, rss = _paroctl("gate", "decode", *args)
    assert time.monotonic() - start < 4 * CASE_WALL_S
    assert code == EXIT_CANNOT_RUN, output
    assert "decode could not run: nothing measured" in output
    assert "Traceback" not in output and "crashed" not in output
    assert rss < CHILD_RSS_MB
    # The gate's one-line verdict counts; the stored item says what the server did.
    run_id = re.search(r"\(run (\S+)\)", output)
    assert run_id, output
    with open_store() as store:
        (item,) = store.items(run_id.group(1))
    assert item["outcome"] == "error"
    says = "answered POST /v1/completions with more than 131072 stream events"
    assert item["error"] == f"the server at {url} {says}"


def test_a_gate_meeting_answers_out_of_shape_says_what_the_server_did(hostile: str) -> None:
    url = at(hostile, 'json:{"tokens": "abc"}', scope="post")
    code, output, _ = _paroctl("gate", "greedy", "--url", url, "--model", "m")
    assert code == EXIT_CANNOT_RUN, output
    assert f"the server at {url} answered POST /tokenize with 'tokens' a string, not an" in output
    # Each sanity check meets an answer without what it asks for; each stored error says which.
    url = at(hostile, 'json:{"id": "x"}', scope="post")
    code, output, _ = _paroctl("gate", "sanity", "--url", url, "--model", "m")
    assert code == EXIT_CANNOT_RUN and "KeyError" not in output, output
    run_id = re.search(r"\(run (\S+)\)", output)
    assert run_id, output
    with open_store() as store:
        errors = {item["key"]: item["error"] for item in store.items(run_id.group(1))}
    chat = "answered POST /v1/chat/completions without 'choices'"
    assert errors["capital-chat"] == f"the server at {url} {chat}"
    assert errors["long-recall"] == f"the server at {url} answered POST /tokenize without 'tokens'"
