"""Benchmark (not a test): the time paroctl adds to a switch beyond the servers' own work.

Runs N switches alternating cpu-demo / cpu-demo-alt on the local runtime. A watcher thread polls
every 5 ms and timestamps the real events: the old server's port closing, the last process of its
group exiting, and the new server's first /health 200. It polls only while one of those is due
(from the switch's "stopping" step to the new server's first 200): a vLLM /health asks the engine
process, and 200 of them a second while the switch verifies measured 295 ms for the 1-token sanity
completion against 133 ms unpolled (`--watch always` keeps the old always-on watcher, to compare).
paroctl's overhead per switch = wall time -
(old server's shutdown: SIGTERM to port closed and every process gone) - (new server's boot:
process start to first /health 200); the detection delays = when paroctl noticed each event -
when the watcher saw it.

    PAROCTL_HOME=$(mktemp -d) python benchmarks/switch/bench_switch.py [--switches 5]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import requests

from paroctl import net, state
from paroctl.profile import profiles
from paroctl.serve.runtime.local import LocalRuntime, group_members
from paroctl.switch import switch as switch_mod


class Watcher(threading.Thread):
    """Polls /health every 5 ms while armed and records each transition's time; unless `always`,
    it disarms itself at the first 200 after a failure (the new server is up: nothing is due)."""

    def __init__(self, port: int, *, always: bool = False) -> None:
        super().__init__(daemon=True)
        self.always = always
        self.armed = threading.Event()
        self.port = port
        self.url = f"http://127.0.0.1:{port}/health"
        self.transitions: list[tuple[float, bool]] = []
        self.stop_flag = False
        self.pgid: int | None = None
        self.group_gone_at: float | None = None

    def run(self) -> None:
        last = None
        session = requests.Session()
        seen_down = False
        while not self.stop_flag:
            if not (self.always or self.armed.is_set()):
                self.armed.wait(0.05)
                continue
            # A bare connect first: a refused HTTP request costs ~1.6 ms of Python (measured: 200
            # a second took a third of a core from the booting server), a refused connect ~0.1.
            try:
                up = (
                    net.port_open("127.0.0.1", self.port, timeout=0.2)
                    and session.get(self.url, timeout=0.2).status_code == 200
                )
            except requests.RequestException:
                up = False
            if up != last:
                self.transitions.append((time.monotonic(), up))
                last = up
            seen_down = seen_down or not up
            if up and seen_down and not self.always:
                self.armed.clear()
                seen_down = False
            if (
                self.pgid is not None
                and self.group_gone_at is None
                and not group_members(self.pgid)
            ):
                self.group_gone_at = time.monotonic()
            time.sleep(0.005)

    def first(self, up: bool, after: float) -> float | None:
        return next((t for t, state in self.transitions if state == up and t >= after), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--switches", type=int, default=5)
    parser.add_argument(
        "--watch",
        choices=("due", "always"),
        default="due",
        help="poll /health only while an event is due (default), or all the time",
    )
    args = parser.parse_args()
    names = ["cpu-demo", "cpu-demo-alt"]
    port = profiles.load(names[0]).body.serve.port
    marks: dict[str, float] = {}

    def sink(event: switch_mod.Event) -> None:
        now = time.monotonic()
        if event.kind == "step" and event.message.startswith("stopping "):
            marks["stop_sent"] = now
            watcher.armed.set()
        elif event.kind == "step" and event.message.endswith(" stopped"):
            marks["stop_seen"] = now
        elif event.kind == "step" and event.message.startswith("starting "):
            marks["start_sent"] = now
        elif event.kind == "step" and event.message.endswith(" is live"):
            marks["live"] = now

    watcher = Watcher(port, always=args.watch == "always")
    deps = switch_mod.default_deps(sink)
    switch_mod.switch(profiles.load(names[1]), deps, load_profile=profiles.load)  # warm up
    watcher.armed.clear()
    watcher.start()
    rows = []
    for i in range(args.switches):
        target = profiles.load(names[i % 2])
        marks.clear()
        watcher.group_gone_at = None
        watcher.pgid = LocalRuntime().main_pid(names[(i + 1) % 2])
        t0 = time.monotonic()
        record = switch_mod.switch(target, deps, load_profile=profiles.load)
        wall = time.monotonic() - t0
        closed = watcher.first(False, marks["stop_sent"])
        healthy = watcher.first(True, marks["start_sent"])
        gone = watcher.group_gone_at
        assert closed is not None and healthy is not None and gone is not None
        shutdown = max(closed, gone) - marks["stop_sent"]
        server_boot = healthy - marks["start_sent"]
        rows.append(
            {
                "profile": record.serve.profile,
                "wall": wall,
                "shutdown": shutdown,
                "boot": server_boot,
                "overhead": wall - shutdown - server_boot,
                # the overhead's three parts: before the SIGTERM, between the old serve gone and
                # the new one started, after the new one's first 200 (verification, recording)
                "before": marks["stop_sent"] - t0,
                "between": marks["start_sent"] - max(closed, gone),
                "after": t0 + wall - healthy,
                "close_detect": marks["stop_seen"] - max(closed, gone),
                "health_detect": marks["start_sent"] + record.health_s - healthy,
            }
        )
        print(
            f"{record.serve.profile:14} wall {wall:6.2f} s  server shutdown {shutdown:5.2f} s  "
            f"server boot {server_boot:6.2f} s  paroctl {rows[-1]['overhead']:5.2f} s "
            f"({rows[-1]['before'] * 1000:.0f} + {rows[-1]['between'] * 1000:.0f} + "
            f"{rows[-1]['after'] * 1000:.0f} ms)  "
            f"stop noticed +{rows[-1]['close_detect'] * 1000:.0f} ms  "
            f"health noticed +{rows[-1]['health_detect'] * 1000:.0f} ms"
        )
    watcher.stop_flag = True
    live = state.read_live()
    if live is not None:  # leave the box as found: the last serve would hold the demo's port
        switch_mod.stop_live(live, switch_mod.default_deps())
    total = sum(r["overhead"] for r in rows)
    print(
        f"\nparoctl overhead over {len(rows)} switches: {total:.2f} s in total, "
        f"median {statistics.median(r['overhead'] for r in rows):.2f} s per switch"
    )
    print(
        f"stop (port closed, processes gone) noticed: max "
        f"{max(r['close_detect'] for r in rows) * 1000:.0f} ms; health noticed after the first "
        f"200: max {max(r['health_detect'] for r in rows) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
