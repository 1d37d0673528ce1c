"""An interrupted switch: a journal whose paroctl is gone names a serve that live.json does not.

The rule on status/stop/switch: the stranded serve is stopped through its runtime, then the
journal (and a live.json naming that serve) is cleared; `status` reports without acting. One
exception: a switch killed after it recorded the new serve as live (live.json carries the
journal's boot id) had finished, and only its journal is dropped. `switch --resume`
(`resume` in paroctl/switch/switch.py) instead finishes the interrupted switch: a new serve
still booting or verifying is verified where it runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from paroctl import net, state
from paroctl.client import Client
from paroctl.errors import ParoctlError, RuntimeFailure, StateError
from paroctl.events import Event, EventSink
from paroctl.records import LiveRecord, ServeRef
from paroctl.serve.runtime.base import Runtime
from paroctl.switch import journal
from paroctl.switch.record import api_key_named

RuntimeFor = Callable[[str, str], Runtime]
PORT_CLOSE_MARGIN_S = 30.0


@dataclass(frozen=True)
class Stranded:
    """A journal entry and what its serve is doing right now (for `status`)."""

    entry: journal.Entry
    owner_alive: bool
    active: bool
    pid: int | None
    healthy: bool
    served_names: tuple[str, ...]
    finished: bool  # killed after recording: live.json already names the verified serve


def had_finished(entry: journal.Entry, live: LiveRecord | None) -> bool:
    """live.json carries the journal's boot id: only a serve this switch verified is written
    there (each switch has its own id), so it had finished whatever step the journal names."""
    return live is not None and live.boot_id == entry.boot_id


def inspect(runtime_for: RuntimeFor) -> Stranded | None:
    """What the journal says and what its serve does now; None when there is no journal."""
    entry = journal.read()
    if entry is None:
        return None
    alive = journal.owner_alive(entry.owner)
    done = had_finished(entry, state.read_live())
    serve = entry.serve
    if serve is None:
        return Stranded(entry, alive, False, None, False, (), done)
    runtime = runtime_for(serve.runtime, serve.scope)
    pid = runtime.main_pid(serve.profile)
    healthy, names = _probe(serve)
    return Stranded(entry, alive, pid is not None, pid, healthy, names, done)


def _probe(serve: ServeRef) -> tuple[bool, tuple[str, ...]]:
    return probe(serve.url, api_key_named(serve.profile))


def probe(url: str, key: str | None) -> tuple[bool, tuple[str, ...]]:
    """Whether a serve answers /health, and the names its /v1/models lists (one attempt each)."""
    with Client(url, retries=0, timeout_s=5, api_key=key) as client:
        try:
            healthy = client.health()
            return healthy, tuple(client.models()) if healthy else ()
        except ParoctlError:
            return False, ()


def describe(entry: journal.Entry) -> str:
    """One line naming the switch an entry records."""
    origin = entry.from_profile or "nothing"
    return (
        f"switch {origin} -> {entry.to_profile} (paroctl pid {entry.owner.pid}), "
        f"step {entry.step}{' (rolling back)' if entry.rolling_back else ''}"
    )


def plan_line(entry: journal.Entry, live: LiveRecord | None) -> str:
    """What recover() would do about entry, for --dry-run."""
    if had_finished(entry, live):
        return f"interrupted {describe(entry)}: it had finished; clear {journal.path()}"
    serve = entry.serve
    what = (
        f"stop {serve.profile} ({serve.runtime}) through its runtime, wait until "
        f"{net.connect_host(serve.host)}:{serve.port} is closed"
        if serve
        else "nothing to stop"
    )
    return f"interrupted {describe(entry)}: {what}; clear {journal.path()}"


def recover(runtime_for: RuntimeFor, events: EventSink) -> journal.Entry | None:
    """Settle an interrupted switch (call with the box lock held); return its entry, if any."""
    entry = journal.read()
    if entry is None:
        return None
    if journal.owner_alive(entry.owner) and entry.owner.pid != os.getpid():
        # We hold the lock, so a live owner is not switching; still, never act under its feet.
        raise StateError(
            f"{journal.path()} belongs to a running paroctl (pid {entry.owner.pid}) that does "
            "not hold the box lock; let it finish or stop it, then retry"
        )
    live = state.read_live()
    if had_finished(entry, live):
        events(Event("warn", f"an interrupted {describe(entry)} had finished; journal cleared"))
        journal.clear()
        return entry
    serve = entry.serve
    if serve is None:
        events(Event("warn", f"an interrupted {describe(entry)} left nothing running"))
    else:
        events(
            Event(
                "warn",
                f"an interrupted {describe(entry)} left {serve.profile} ({serve.runtime}) "
                "untracked; stopping it",
            )
        )
        stop_serve(serve, runtime_for)
    if live is not None and live_after(entry, live) is None:
        state.clear_live()  # it named the serve just stopped (killed while stopping the old)
    journal.clear()
    return entry


def live_after(entry: journal.Entry, live: LiveRecord | None) -> LiveRecord | None:
    """What live.json names once recover() settled entry: nothing if it named the stopped serve."""
    if live is None or had_finished(entry, live):
        return live
    serve = entry.serve
    return None if serve is not None and live.serve.profile == serve.profile else live


def stop_serve(serve: ServeRef, runtime_for: RuntimeFor) -> None:
    """Stop a journal's serve through its runtime; return once its port is closed and it is gone."""
    runtime = runtime_for(serve.runtime, serve.scope)
    runtime.stop(serve.profile, float(serve.grace_s))
    host = net.connect_host(serve.host)
    try:
        net.wait_port_closed(host, serve.port, timeout=serve.grace_s + PORT_CLOSE_MARGIN_S)
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"the stranded {serve.profile} was stopped but {host}:{serve.port} still answers "
            f"({exc}); find the listener (`ss -ltnp`) and stop it, then retry"
        ) from exc
    if runtime.is_active(serve.profile):
        raise RuntimeFailure(f"the stranded {serve.profile}: its port closed but it still runs")
