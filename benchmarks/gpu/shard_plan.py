"""Split the GPU suite's test ids into N shards of about equal device time, longest first.

`shard.sh` used to take every N-th id of the sorted collection and run it in that order. On the
H200 (2026-12-05, 671 tests, 16 workers) those shards ended on a tail: one worker still running a
200 s test after the others were done. Here each id gets the time it took in the last committed run
(`tests/kernels/data/gpu-*-shard*.xml`, JUnit; an id not in it: its test function's median there,
else the run's median), the ids go to shards longest first, each to the shard with the least time
so far, and each shard lists its ids longest first, so xdist's load scheduling starts the long
tests first and fills the end with short ones. The ids that failed in that run go first, at the
head of shard 1: a run cut short still re-checks them.

Usage: python benchmarks/gpu/shard_plan.py IDS K N [--workers W] [--xml GLOB ...]
prints shard K's ids (one a line); with --simulate, the planned and the old split's makespans on
W workers instead (list scheduling by the recorded times: an estimate, not a measurement).
"""

from __future__ import annotations

import argparse
import glob
import heapq
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_XML = "tests/kernels/data/gpu-*-shard*.xml"


def _node_id(case: ET.Element) -> str:
    path = case.get("classname", "").replace(".", "/") + ".py"
    return f"{path}::{case.get('name')}"


def _run_key(path: str) -> tuple[str, int]:
    """(date, run) of a JUnit file named gpu-<date>-...-run<N>-shard<K>.xml (else run 0):
    the newest date wins, and within a day the highest run number."""
    name = Path(path).name
    date = re.search(r"\d{4}-\d\d-\d\d", name)
    run = re.search(r"run(\d+)-shard", name)
    return (date.group(0) if date else "", int(run.group(1)) if run else 0)


def recorded(patterns: list[str]) -> tuple[dict[str, float], set[str]]:
    """Each test id's time in the newest run the patterns match (by the file names' date and
    run number), and the ids that failed or errored there. The run's files are read in name
    order and an id's last case counts: a re-run shard (shard2 re-running shard1's failures)
    clears a failure it passed."""
    files = sorted({f for p in patterns for f in glob.glob(p)})
    if not files:
        return {}, set()
    newest = max(_run_key(f) for f in files)
    times, failed = {}, set()
    for f in files:
        if _run_key(f) == newest:
            for case in ET.parse(f).getroot().iter("testcase"):
                if case.get("classname") is None:  # the case a cut run was stopped in
                    continue
                node = _node_id(case)
                times[node] = float(case.get("time", 0))
                if case.find("failure") is not None or case.find("error") is not None:
                    failed.add(node)
                else:
                    failed.discard(node)
    return times, failed


def _function(node: str) -> str:
    return node.split("[", 1)[0]


def estimate(ids: list[str], times: dict[str, float]) -> dict[str, float]:
    """Each id's expected time: its own, else its function's median, else the run's median."""
    by_fn: dict[str, list[float]] = {}
    for node, t in times.items():
        by_fn.setdefault(_function(node), []).append(t)
    overall = statistics.median(times.values()) if times else 1.0
    median = {fn: statistics.median(ts) for fn, ts in by_fn.items()}
    return {i: times.get(i, median.get(_function(i), overall)) for i in ids}


def plan(
    ids: list[str], est: dict[str, float], n: int, first: set[str] = frozenset()
) -> list[list[str]]:
    """N shards of about equal total time (longest first to the lightest), each longest first;
    the ids in `first` (last run's failures) head shard 1, so that a cut run re-checks them."""
    head = sorted((i for i in ids if i in first), key=lambda i: (-est[i], i))
    order = sorted((i for i in ids if i not in first), key=lambda i: (-est[i], i))
    heap = [(sum(est[i] for i in head), 0)] + [(0.0, k) for k in range(1, n)]
    heapq.heapify(heap)
    shards: list[list[str]] = [list(head)] + [[] for _ in range(1, n)]
    for i in order:
        total, k = heapq.heappop(heap)
        shards[k].append(i)
        heapq.heappush(heap, (total + est[i], k))
    return shards


def old_split(ids: list[str], n: int) -> list[list[str]]:
    """The split before this planner: every N-th id of the sorted ids, in that order."""
    ordered = sorted(ids)
    return [ordered[k::n] for k in range(n)]


def makespan(shard: list[str], est: dict[str, float], workers: int) -> float:
    """List scheduling of the shard's ids in order onto `workers` (xdist's load, roughly)."""
    free = [0.0] * workers
    for i in shard:
        heapq.heapreplace(free, free[0] + est[i])
    return max(free)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("ids", type=Path)
    ap.add_argument("k", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--xml", action="append", default=None)
    ap.add_argument("--simulate", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.k <= args.n:
        print(f"shard_plan: shard {args.k} of {args.n}: K must be 1..N", file=sys.stderr)
        return 2
    ids = [line.strip() for line in args.ids.read_text().splitlines() if "::" in line]
    times, failed = recorded(args.xml or [DEFAULT_XML])
    est = estimate(ids, times)
    shards = plan(ids, est, args.n, failed)
    if args.simulate:
        for name, split in (("planned", shards), ("old", old_split(ids, args.n))):
            spans = [makespan(s, est, args.workers) for s in split]
            parts = [f"{len(s)} tests {t:.0f} s" for s, t in zip(split, spans, strict=True)]
            print(f"{name}: {' / '.join(parts)}, {sum(spans):.0f} s in all")
        return 0
    print("\n".join(shards[args.k - 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
