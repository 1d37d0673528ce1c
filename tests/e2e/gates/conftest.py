"""Fixtures for gate e2e tests: a live record pointing at the CPU serve, data, a fault proxy."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from paroctl import state
from paroctl.records import LiveRecord

if TYPE_CHECKING:
    from ..conftest import CpuServe

REPO = Path(__file__).resolve().parents[3]
SHARED_DATA = REPO / "tests" / "data"  # the repository's copy (tests/data/README.md)


@pytest.fixture
def gate_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository's GSM8K and WikiText-2 copies, selected via PAROCTL_DATA_DIR."""
    monkeypatch.setenv("PAROCTL_DATA_DIR", str(SHARED_DATA))
    return SHARED_DATA


def write_live(host: str, port: int, served: list[str], profile: str = "cpu-demo") -> None:
    """Point the live record at an address, as the switch would."""
    state.write_live(
        LiveRecord.from_dict(
            {
                "profile": profile,
                "hash": "e2e-hash",
                "host": host,
                "port": port,
                "served_names": served,
                "boot_id": "e2e-boot",
                "since": time.time(),
                "first_boot": False,
                "kv_tokens": 0,
                "image": None,
                "knobs": {},
                "cache_dir": None,
            }
        )
    )


@pytest.fixture
def point_live() -> Callable[[str, int, list[str]], None]:
    """A function that points the live record at an address (for stale / proxied tests)."""
    return write_live


@pytest.fixture
def live(live_cpu_serve: CpuServe, gate_data: Path) -> CpuServe:
    """The session's CPU serve, recorded as live for profile cpu-demo."""
    spec = live_cpu_serve.spec
    write_live(spec.host, spec.port, [live_cpu_serve.served_name])
    return live_cpu_serve


@pytest.fixture
def unbanded_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profiles dir whose cpu-demo has no gate bands: every gate runs and reports, unjudged.

    The shipped cpu-demo GSM8K band needs one right answer; SmolLM2-135M gets ~0-3% right, so at
    the few questions a test can afford it would fail by chance, not by a broken serve.
    """
    directory = tmp_path / "profiles"
    directory.mkdir()
    (directory / "_cpu.yaml").write_text((REPO / "profiles" / "_cpu.yaml").read_text())
    demo = yaml.safe_load((REPO / "profiles" / "cpu-demo.yaml").read_text())
    demo.pop("gates", None)
    (directory / "cpu-demo.yaml").write_text(yaml.safe_dump(demo))
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", str(directory))
    return directory


class FaultProxy:
    """A real TCP proxy that injects one planned fault into each new completions connection.

    Faults: drop (close after reading the request), reset (RST), 503 (an HTTP error, then close),
    stall (say nothing for stall_s, then close), slow (wait slow_s, then serve normally). Once the
    plan is used up every connection is piped through untouched.
    """

    def __init__(
        self, upstream: tuple[str, int], plan: list[str], stall_s: float = 5, slow_s: float = 1
    ) -> None:
        self.upstream = upstream
        self.plan = list(plan)
        self.stall_s = stall_s
        self.slow_s = slow_s
        self.injected: Counter[str] = Counter()
        self.heads: list[bytes] = []  # the first request head of every connection
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            head += chunk
        method, path = head.split(b" ", 2)[:2]
        with self._lock:
            self.heads.append(head.split(b"\r\n\r\n")[0])
        fault = None
        if method == b"POST" and b"completions" in path:
            with self._lock:
                if self.plan:
                    fault = self.plan.pop(0)
                    self.injected[fault] += 1
        if fault == "drop":
            conn.close()
            return
        if fault == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        if fault == "503":
            conn.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            conn.close()
            return
        if fault == "stall":
            time.sleep(self.stall_s)
            conn.close()
            return
        if fault == "slow":
            time.sleep(self.slow_s)
        upstream = socket.create_connection(self.upstream)
        upstream.sendall(head)
        threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()
        _pipe(conn, upstream)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def fault_proxy(live_cpu_serve: CpuServe) -> Iterator[type[FaultProxy]]:
    """The FaultProxy class, bound to the live serve by the test; every instance is closed after."""
    made: list[FaultProxy] = []

    class Bound(FaultProxy):
        def __init__(self, plan: list[str], **kwargs: float) -> None:
            super().__init__((live_cpu_serve.spec.host, live_cpu_serve.spec.port), plan, **kwargs)
            made.append(self)

    yield Bound
    for proxy in made:
        proxy.close()
