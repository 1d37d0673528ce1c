"""Benchmark aid (not a test): where paroctl's own time in a switch goes.

Runs benchmarks/switch/bench_switch.py unchanged, with the switch's helpers wrapped in timers, then
prints each helper's cumulative time and call count over the warm-up and the timed switches.
Waits on the servers (verify._wait_healthy, local.stop) show as large totals; the rest is paroctl's.

    PAROCTL_HOME=$(mktemp -d) python benchmarks/switch/switch_timeline.py [--switches 3]
"""

from __future__ import annotations

import collections
import functools
import sys
import time
from pathlib import Path
from typing import Any

from paroctl import net, state
from paroctl.image import provenance
from paroctl.serve import cpu
from paroctl.serve.runtime import local
from paroctl.switch import journal, record, recovery, verify
from paroctl.switch import switch as switch_mod

TOTAL_S: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.defaultdict[str, int] = collections.defaultdict(int)
SWITCH_HELPERS = (
    "_drain", "_wait_gpu_memory", "_prepare", "_preflight", "previous_profile", "_untracked",
    "_still_serving",
)  # fmt: skip
# verify.py calls these through its own globals, so they are wrapped there.
VERIFY_HELPERS = ("_wait_healthy", "_check_identity", "_check_markers", "_sanity")


def timed(owner: Any, name: str, label: str) -> None:
    """Replace owner.name by a wrapper adding its wall time under label."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTAL_S[label] += time.monotonic() - start
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    for name in SWITCH_HELPERS:
        timed(switch_mod, name, f"switch.{name}")
    for name in VERIFY_HELPERS:
        timed(verify, name, f"verify.{name}")
    timed(record.Deps, "keep", "record.Deps.keep")  # the boot record into the results store
    for owner, names in (
        (recovery, ("recover",)),
        (cpu, ("plan_for", "log_problems")),
        (provenance, ("check_profile_image", "check_boot_provenance", "check_boot_source")),
        (state, ("write_live", "clear_live", "read_live")),
        (net, ("wait_port_closed", "port_open")),
    ):
        for name in names:
            timed(owner, name, f"{owner.__name__.rsplit('.', 1)[-1]}.{name}")
    for name in ("step", "begin", "clear"):
        timed(journal.Journal, name, f"journal.{name}")
    for name in ("start", "stop", "is_active", "main_pid"):
        timed(local.LocalRuntime, name, f"local.{name}")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_switch

    bench_switch.main()
    print("\ncumulative over the warm-up and the switches (s, calls):")
    for label, seconds in sorted(TOTAL_S.items(), key=lambda kv: -kv[1]):
        print(f"  {seconds:8.3f}  {CALLS[label]:5d}  {label}")


if __name__ == "__main__":
    main()
