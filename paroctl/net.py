"""TCP probes (is a port open, wait until it is closed, pick a free one), and the bounds on what
a peer may send: the deadline of one HTTP exchange, capped reads of a body and of its lines, and
typed reads of a JSON answer."""

from __future__ import annotations

import contextlib
import functools
import json
import random
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paroctl.errors import RuntimeFailure

if TYPE_CHECKING:
    import requests


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port_closed(host: str, port: int, timeout: float, poll: float = 0.05) -> float:
    """Wait until host:port refuses connections; return the seconds waited, raise on timeout."""
    start = time.monotonic()
    deadline = start + timeout
    while port_open(host, port, timeout=min(0.5, max(poll, 0.05))):
        if time.monotonic() >= deadline:
            raise RuntimeFailure(
                f"{host}:{port} still accepts connections after {timeout:g} s; "
                "something else may be listening there"
            )
        time.sleep(poll)
    return time.monotonic() - start


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now, below the kernel's ephemeral range (racy by nature; for tests
    and demos). Not one the kernel picks for bind(0): another process's bind(0) or outgoing
    connection could take it in the moment a stopped serve has left it and the next has not
    bound it yet (the likely cause of a test switch that once found its port taken, 2026-12-06)."""
    low = _ephemeral_low()
    pick = random.SystemRandom()
    for _ in range(64):
        port = pick.randrange(max(1024, low - 12288), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where /proc does not say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def connect_host(host: str) -> str:
    """The address to connect to for a serve listening on host (a wildcard means loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


# --- the deadline of one HTTP exchange -----------------------------------------------------------
#
# A read timeout restarts with every byte, so a peer that sends one byte every 2 s is never cut off
# by it, in the headers or in the body. The one bound that holds is a clock outside the read: a
# timer that shuts the connection's socket down, which ends the blocked read at once (a close()
# from another thread would not wake it). A connection registers its socket with the deadline of
# the thread that uses it (`watched_adapter`'s connection classes) before it sends.

_current = threading.local()


class Deadline:
    """A watchdog over one exchange: when time is up it shuts the connection down (`expired`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._began = time.monotonic()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ends = 0.0
        self._timer = self._arm(seconds)

    def _arm(self, seconds: float) -> threading.Timer:
        self._ends = time.monotonic() + seconds
        timer = threading.Timer(max(seconds, 0.0), self._expire)
        timer.daemon = True
        timer.start()
        return timer

    def within(self, seconds: float) -> None:
        """From now on allow at most `seconds` more (never more than the deadline already has)."""
        with self._lock:
            if self.expired or time.monotonic() + seconds >= self._ends:
                return
            self._timer.cancel()
            self._timer = self._arm(seconds)

    def age(self) -> float:
        """Seconds since the exchange began."""
        return time.monotonic() - self._began

    def watch(self, sock: socket.socket) -> None:
        """Cut this connection's socket when the time is up (at once if it already is)."""
        with self._lock:
            self._sock = sock
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            _shut(self._sock)

    def cancel(self) -> None:
        """The exchange is over: stop the watchdog and forget the connection."""
        with self._lock:
            self._timer.cancel()
            self._sock = None


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[Deadline]:
    """Every connection this thread uses inside the block is cut `seconds` from now."""
    watch = Deadline(seconds)
    previous = getattr(_current, "deadline", None)
    _current.deadline = watch
    try:
        yield watch
    finally:
        _current.deadline = previous
        watch.cancel()


def _watch_current(sock: socket.socket) -> None:
    watch: Deadline | None = getattr(_current, "deadline", None)
    if watch is not None:
        watch.watch(sock)


@functools.cache
def watched_adapter() -> type[Any]:
    """A requests transport adapter whose connections obey the thread's `deadline` (requests and
    urllib3 are imported here, on first use: the commands that never talk HTTP do not pay)."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Watched:
        # The socket, not the connection: http.client lets go of a connection's socket when the
        # answer is delimited by its close, and the response reads on. Once connected (the
        # connect timeout bounds the rest), or at once for a pooled connection, reused.
        sock: Any

        def connect(self) -> None:
            super().connect()  # type: ignore[misc]
            _watch_current(self.sock)

        def request(self, *args: Any, **kwargs: Any) -> None:
            if self.sock is not None:
                _watch_current(self.sock)
            super().request(*args, **kwargs)  # type: ignore[misc]

    class WatchedHTTPConnection(Watched, HTTPConnection):
        pass

    class WatchedHTTPSConnection(Watched, HTTPSConnection):
        pass

    class WatchedPool(HTTPConnectionPool):
        ConnectionCls = WatchedHTTPConnection

    class WatchedTlsPool(HTTPSConnectionPool):
        ConnectionCls = WatchedHTTPSConnection

    pools = {"http": WatchedPool, "https": WatchedTlsPool}

    class WatchedAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            # A SOCKS proxy brings its own pool classes; through it only the read timeout holds.
            if not proxy.lower().startswith("socks"):
                manager.pool_classes_by_scheme = pools
            return manager

    return WatchedAdapter


# --- bounded reads of an HTTP body ---------------------------------------------------------------


class Unfit(Exception):
    """What a peer sent is past a bound or not the shape asked for; the message says how, to
    follow "the server answered ..." ("with a body over 16 MiB", "without 'choices'")."""


def head(response: requests.Response, most: int) -> bytes:
    """The first `most` bytes of a body (what an error message quotes), never more."""
    got = bytearray()
    for piece in response.iter_content(min(most, 1024)):
        got += piece
        if len(got) >= most:
            break
    return bytes(got[:most])


def read_capped(response: requests.Response, most: int, piece: int = 64 << 10) -> bytearray:
    """A whole body, decoded (gzip, deflate: urllib3 inflates at most `piece` at a time), refused
    past `most` bytes as it arrives, or at once when its Content-Length says it is larger."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > most:
        raise Unfit(
            f"with a {int(declared)}-byte body (Content-Length), over the {_size(most)} an answer "
            "may have"
        )
    body = bytearray()
    for got in response.iter_content(piece):
        body += got
        if len(body) > most:
            raise Unfit(
                f"with a body over the {_size(most)} an answer may have (counted after decoding)"
            )
    return body


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def lines(
    response: requests.Response, longest: int, most: int, piece: int = 512
) -> Iterator[tuple[float, bytes]]:
    """A streamed body's lines with their arrival times (time.perf_counter()), each at most
    `longest` bytes, all together at most `most` bytes (after decoding)."""
    pending: list[bytes] = []
    waiting = total = 0
    for got in response.iter_content(piece):
        now = time.perf_counter()
        total += len(got)
        if total > most:
            raise Unfit(f"with a stream over {_size(most)}")
        # Split the new piece only: a long line arriving in small pieces costs linear time.
        *done, rest = _LINE_BREAK.split(got)
        if done:
            done[0] = b"".join([*pending, done[0]])
            pending, waiting = [], 0
        pending.append(rest)
        waiting += len(rest)
        if waiting > longest or any(len(line) > longest for line in done):
            raise Unfit(f"with a stream line over {_size(longest)}")
        for line in done:
            yield now, line
    if waiting:
        yield time.perf_counter(), b"".join(pending)


def sse_data(
    response: requests.Response, longest: int, most: int, events: int
) -> Iterator[tuple[float, bytes]]:
    """The `data:` payloads of a server-sent-event stream with their arrival times: at most
    `events` of them in at most 4x as many lines (an event is a data line and a blank one; the
    rest leaves room for comments and other fields: an endless run of blank lines costs CPU like
    events do), each line at most `longest` bytes, the whole at most `most`."""
    kind = response.headers.get("Content-Type", "")
    if kind and not kind.lower().startswith("text/event-stream"):
        shown = bytes(head(response, 200)).decode("utf-8", "replace")
        raise Unfit(f"with {kind[:60]!r}, not an event stream: {shown[:60]!r}")
    count = 0
    for seen, (now, line) in enumerate(lines(response, longest, most)):
        if seen >= 4 * events:
            raise Unfit(f"with more than {4 * events} stream lines")
        if line.startswith(b"data:"):
            count += 1
            if count > events:
                raise Unfit(f"with more than {events} stream events")
            yield now, line[len(b"data:") :].strip()


def _size(count: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


# --- typed reads of a JSON answer ----------------------------------------------------------------

_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "an integer", float: "a number", type(None): "null"}  # fmt: skip
_MISSING = object()


def json_type(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words ("an object", "null")."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def dotted(path: tuple[str | int, ...] | list[str | int]) -> str:
    """A path into a JSON value as the answer's reader writes it: 'choices[0].text'."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return repr(text[1:]) if text else "the body"


def pick(data: Any, path: tuple[str | int, ...], kind: type | tuple[type, ...]) -> Any:
    """The value at path (object keys, array indices) in parsed JSON, of `kind` (a type or a
    tuple of them; type(None) accepts null, and absence of the last key); Unfit naming the path
    otherwise."""
    node = data
    for depth, step in enumerate(path):
        fits = isinstance(node, list) if isinstance(step, int) else isinstance(node, dict)
        if not fits:
            want = "an array" if isinstance(step, int) else "an object"
            raise Unfit(f"with {dotted(path[:depth])} {json_type(node)}, not {want}")
        if isinstance(step, int):
            found = node[step] if 0 <= step < len(node) else _MISSING
        else:
            found = node.get(step, _MISSING)
        if found is _MISSING:
            if depth == len(path) - 1 and isinstance(kind, tuple) and type(None) in kind:
                return None
            raise Unfit(f"without {dotted(path[: depth + 1])}")
        node = found
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(node, kinds) or (isinstance(node, bool) and bool not in kinds):
        want = " or ".join(_JSON_TYPES.get(k, k.__name__) for k in kinds)
        raise Unfit(f"with {dotted(path)} {json_type(node)}, not {want}")
    return node


def preview(body: bytes | bytearray) -> str:
    """The start of a body, quoted on one line, for a message about it."""
    text = bytes(body[:200]).decode("utf-8", "replace").strip()
    return repr(text if len(text) <= 60 else text[:57] + "...")


def read_json(response: requests.Response, most: int, containers: int) -> dict[str, Any]:
    """A body that is one JSON object, read capped (read_capped); ValueError when it is not (a
    type that is not JSON: only its start is read; bad JSON; another value), Unfit past
    `containers` objects and arrays, which parse to >= 56 bytes each: bounded bytes alone would
    still let `[{},{},...]` take 20 times its size."""
    kind = response.headers.get("Content-Type", "")
    if kind and "json" not in kind.lower():
        raise ValueError(f"{kind[:60]}, not JSON: {preview(head(response, 200))}")
    body = read_capped(response, most)
    if body.count(b"{") + body.count(b"[") > containers:
        raise Unfit(f"with more than {containers} JSON objects and arrays")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {preview(body)}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{json_type(data)}, not a JSON object")
    return data


# --- Prometheus text ----------------------------------------------------------------------------


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
