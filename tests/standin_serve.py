"""A stand-in vLLM OpenAI server for tests that need a serve's HTTP face and boot log, not a model
(a real vLLM CPU serve boots in ~30 s to minutes; these answer in a fraction of a second).

    python tests/standin_serve.py [CTL_DIR] --port P --served-model-name N [--host H]
        [--dtype D] [--label L] [--delay S] [any other vLLM argument, ignored]

It prints the boot lines paroctl reads from a vLLM log (load phase, load tracking, the dtype when
--dtype is given, the reserved cores when VLLM_CPU_NUM_OF_RESERVED_CPU is set, the KV size, ready)
and answers:
  GET  /health, /v1/models (N, max_model_len 2048), /load, /metrics (nothing running),
       /version ("standin-" + L), /counts (gate completions received and answered);
  POST the switch's sanity prompt ("The opposite of hot is") with " cold"; any other completion,
       after S seconds, with "served by L #### 7" as text and as a chat message (counted).
With CTL_DIR (a first argument that is no option), SIGTERM writes CTL_DIR/<port>.term and the
serve keeps answering while CTL_DIR/hold-stop exists, then exits 0: a test holds a serve mid-stop.

Standard library only: tests also copy this text and run it under the system python3. Tests that
start it through a runtime build its command line with command().
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SANITY_PROMPT = "The opposite of hot is"


def command(vllm_argv: Sequence[str], port: int, *options: str) -> tuple[str, ...]:
    """The command line that starts this stand-in on port in the place of a vLLM serve started
    with vllm_argv (its --served-model-name and --dtype), with options (--label, --delay)."""
    args = list(vllm_argv)
    served = args[args.index("--served-model-name") + 1]
    dtype = args[args.index("--dtype") + 1]
    script = str(Path(__file__).resolve())
    return (
        sys.executable, script, "--port", str(port), "--served-model-name", served,
        "--dtype", dtype, *options,
    )  # fmt: skip


def option(args: Sequence[str], name: str, default: str | None = None) -> str | None:
    """The value after --name in args (vLLM's argument style), or default."""
    return args[list(args).index(name) + 1] if name in args else default


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self, data: Any) -> None:
        self.send(json.dumps(data).encode(), "application/json")

    def do_GET(self) -> None:
        serve = self.server
        if self.path == "/health":
            return self.answer({})
        if self.path == "/v1/models":
            return self.answer({"data": [{"id": serve.name, "max_model_len": 2048}]})
        if self.path == "/version":
            return self.answer({"version": "standin-" + serve.label})
        if self.path == "/load":
            return self.answer({"server_load": 0})
        if self.path == "/metrics":
            body = b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            return self.send(body, "text/plain")
        if self.path == "/counts":
            with serve.lock:
                return self.answer(dict(serve.counts))
        self.send_error(404)

    def do_POST(self) -> None:
        serve = self.server
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if payload.get("prompt") == SANITY_PROMPT:
            return self.answer({"choices": [{"text": " cold", "finish_reason": "length"}]})
        with serve.lock:
            serve.counts["received"] += 1
        time.sleep(serve.delay)
        text = "served by " + serve.label + " #### 7"
        choice = {
            "text": text,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        usage = {"prompt_tokens": 9, "completion_tokens": 5}
        try:
            self.answer({"choices": [choice], "usage": usage})
        except OSError:
            return
        with serve.lock:
            serve.counts["answered"] += 1

    def log_message(self, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    """The stand-in's HTTP server: its served name, label and delay, and the gate completions
    it received and answered."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], name: str, label: str, delay: float) -> None:
        super().__init__(address, Handler)
        self.name, self.label, self.delay = name, label, delay
        self.counts = {"received": 0, "answered": 0}
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client gone mid-request (a stopped gate) is no boot failure; uvicorn logs none


def hold_stop(ctl: str, port: int) -> None:
    """On SIGTERM: write ctl/<port>.term, keep serving while ctl/hold-stop exists, then exit 0."""

    def stop(signum: int, frame: Any) -> None:
        open(os.path.join(ctl, f"{port}.term"), "w").close()

        def later() -> None:
            while os.path.exists(os.path.join(ctl, "hold-stop")):
                time.sleep(0.01)
            os._exit(0)

        threading.Thread(target=later, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)


def boot_lines(dtype: str | None, reserved: str | None) -> list[str]:
    """What a vLLM CPU boot logs that paroctl reads, in vLLM's order."""
    lines = [
        "Starting to load model /models/stub",
        "non-default args: {'enable_server_load_tracking': True}",
    ]
    if dtype:
        lines.append(f"Initializing a V1 LLM engine with config: dtype=torch.{dtype}")
    if reserved is not None:
        lines.append(f"OMP threads binding: reserve_cpu_num={reserved}")
    lines.append(
        "CPU KV cache size: 1,024 tokens, Maximum concurrency for 2,048 tokens per request: 0.50x"
    )
    lines.append("Available routes are:")
    return lines


def main(args: list[str]) -> None:
    ctl = args.pop(0) if args and not args[0].startswith("--") else None
    port = int(option(args, "--port") or "")
    name = option(args, "--served-model-name") or ""
    label, delay = option(args, "--label") or "stand-in", float(option(args, "--delay") or 0)
    server = Server((option(args, "--host") or "127.0.0.1", port), name, label, delay)
    if ctl is not None:
        hold_stop(ctl, port)
    reserved = os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
    for line in boot_lines(option(args, "--dtype"), reserved):
        print(line, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
