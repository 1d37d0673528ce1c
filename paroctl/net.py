"""Tiny TCP probes: is a port open, wait until it is closed, pick a free one."""

from __future__ import annotations

import socket
import time

from paroctl.errors import RuntimeFailure


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
    """A TCP port the kernel says is free right now (racy by nature; fine for tests and demos)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def connect_host(host: str) -> str:
    """The address to connect to for a serve listening on host (a wildcard means loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host
