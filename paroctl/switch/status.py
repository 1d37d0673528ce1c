"""What serves now, for `paroctl status`: the live record checked against what answers, a switch's
journal, serves running untracked, the last gate results. Reads only; the CLI prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paroctl import state
from paroctl.client import Client
from paroctl.errors import ParoctlError
from paroctl.records import CpuDecision, LiveRecord
from paroctl.store import results
from paroctl.switch import adopt, recovery
from paroctl.switch.record import api_key_named

REQUEST_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
GATE_ROWS = 5


@dataclass(frozen=True)
class CpuView:
    """The CPU decision a serve booted with, as status shows it."""

    dtype: str
    dtype_why: str
    cores: int
    engine_cores: int  # the cores not reserved for paroctl and the API server
    kv_gib: str | float


@dataclass(frozen=True)
class LiveView:
    """The live record and what its address answers now."""

    record: LiveRecord
    key_problem: str | None  # the API key could not be read: asked without it
    healthy: bool
    names: tuple[str, ...]  # what /v1/models lists
    requests: tuple[float, float] | None  # running, waiting (None: not answering)
    cpu: CpuView | None

    @property
    def names_match(self) -> bool:
        """Whether /v1/models lists exactly the record's served names."""
        return sorted(self.names) == sorted(self.record.serve.served_names)


@dataclass(frozen=True)
class GateRows:
    """The live profile's last gate results, or why the store could not be read."""

    rows: tuple[Mapping[str, Any], ...]
    problem: str | None = None


@dataclass(frozen=True)
class Status:
    """Everything `paroctl status` shows: an unfinished switch, the live serve or the serves
    running without a record, and the live profile's last gate results."""

    stranded: recovery.Stranded | None
    live: LiveView | None
    untracked: tuple[adopt.Found, ...]
    gates: GateRows | None


def status(runtime_for: recovery.RuntimeFor) -> Status:
    """Read the box's state and ask the serves it names (one attempt each)."""
    stranded = recovery.inspect(runtime_for)
    live = state.read_live()
    if live is None:
        found = () if stranded is not None else tuple(adopt.discover(runtime_for))
        return Status(stranded, None, found, None)
    return Status(stranded, probe_live(live), (), gate_rows(live.serve.profile))


def probe_live(live: LiveRecord) -> LiveView:
    """Ask the live serve's address: health, served names, requests in flight."""
    try:
        key, key_problem = api_key_named(live.serve.profile), None
    except ParoctlError as exc:  # status still reports health and /metrics without the key
        key, key_problem = None, exc.message
    with Client(live.serve.url, retries=0, timeout_s=5, api_key=key) as client:
        try:
            healthy = client.health()
            names = client.models() if healthy else []
        except ParoctlError:
            healthy, names = False, []
        try:  # a serve without /metrics still answers: it only has no request counts
            metrics = client.gauges(*REQUEST_GAUGES) if healthy else None
        except ParoctlError:
            metrics = None
    requests = None if metrics is None else (metrics[REQUEST_GAUGES[0]], metrics[REQUEST_GAUGES[1]])
    return LiveView(live, key_problem, healthy, tuple(names), requests, cpu_view(live.cpu))


def cpu_view(decision: CpuDecision | None) -> CpuView | None:
    """The CPU decision a record carries, as status shows it; None without one."""
    if decision is None:
        return None
    return CpuView(
        decision.dtype, decision.dtype_why, decision.cores, decision.engine_cores, decision.kv_gib
    )


def gate_rows(profile: str) -> GateRows:
    """The profile's last gate results (the store unreadable is said, not raised)."""
    try:
        rows = results.open_store().last_gate_results(profile, limit=GATE_ROWS)
    except ParoctlError as exc:  # status still shows the serve when the store is unreadable
        return GateRows((), exc.message)
    return GateRows(tuple(rows))
