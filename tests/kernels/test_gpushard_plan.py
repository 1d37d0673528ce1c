"""The GPU suite's shard planner (benchmarks/gpu/shard_plan.py), on recorded JUnit times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLANNER = "benchmarks/gpu/shard_plan.py"


def _xml(path: Path, cases: dict[str, float], failed: tuple[str, ...] = ()) -> None:
    rows = "".join(
        f'<testcase classname="tests.kernels.test_x_gpu" name="{name}" time="{t}">'
        + ('<failure message="x"/>' if name in failed else "")
        + "</testcase>"
        for name, t in cases.items()
    )
    path.write_text(f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')


def test_shards_balance_the_recorded_times_longest_first(tmp_path: Path, script: Any) -> None:
    g = script(PLANNER)
    times = {f"test_a[{i}]": float(t) for i, t in enumerate([10, 20, 30, 40, 50, 60, 90, 5, 200])}
    _xml(tmp_path / "gpu-2026-12-05-h200-run17-shard1.xml", times, ("test_a[3]",))
    # an older run with other times is ignored: the newest by date and run number counts
    # (the committed runs say pass<N>, later ones run<N>: both count)
    _xml(tmp_path / "gpu-2026-12-05-h200-run9-shard1.xml", dict.fromkeys(times, 1.0))
    rec, failed = g.recorded([str(tmp_path / "gpu-*-shard*.xml")])
    node = "tests/kernels/test_x_gpu.py::"
    assert rec[node + "test_a[8]"] == 200.0 and failed == {node + "test_a[3]"}
    ids = [node + n for n in times] + [node + "test_a[new]", node + "test_b[x]"]
    est = g.estimate(ids, rec)
    assert est[node + "test_a[new]"] == 40.0  # an unrecorded case: its function's median
    assert est[node + "test_b[x]"] == 40.0  # an unrecorded function: the run's median
    shards = g.plan(ids, est, 2)
    assert sorted(i for s in shards for i in s) == sorted(ids)  # every id once
    totals = [sum(est[i] for i in s) for s in shards]
    assert max(totals) - min(totals) <= max(est.values()) and max(totals) >= 200
    for s in shards:
        assert [est[i] for i in s] == sorted((est[i] for i in s), reverse=True)
    assert g.plan(list(reversed(ids)), est, 2) == shards  # the same split whatever the order
    # the old split (every other sorted id, in order) starts the 200 s case last: a longer tail
    old = g.old_split(ids, 2)
    assert max(g.makespan(s, est, 2) for s in shards) < max(g.makespan(s, est, 2) for s in old)
    # last run's failure heads shard 1, and counts toward its time
    again = g.plan(ids, est, 2, failed)
    assert again[0][0] == node + "test_a[3]" and sorted(i for s in again for i in s) == sorted(ids)
    totals = [sum(est[i] for i in s) for s in again]
    assert max(totals) - min(totals) <= max(est.values())


def test_a_rerun_shard_clears_the_failures_it_passed(tmp_path: Path, script: Any) -> None:
    g = script(PLANNER)
    first = {"test_a[0]": 5.0, "test_a[1]": 6.0, "test_a[2]": 7.0}
    _xml(
        tmp_path / "gpu-2026-12-05-h100-run21-shard1.xml",
        first,
        ("test_a[0]", "test_a[1]"),
    )
    # shard 2 re-ran test_a[1] (passed, faster) and a test shard 1 did not reach
    _xml(
        tmp_path / "gpu-2026-12-05-h100-run21-shard2.xml",
        {"test_a[1]": 2.0, "test_b": 3.0},
    )
    # the case a run cut by its limit was stopped in has no class name: not an id
    cut = tmp_path / "gpu-2026-12-05-h100-run21-shard3.xml"
    cut.write_text(
        '<testsuites><testsuite name="pytest"><testcase time="0.001"/></testsuite></testsuites>'
    )
    rec, failed = g.recorded([str(tmp_path / "gpu-*-shard*.xml")])
    node = "tests/kernels/test_x_gpu.py::"
    assert failed == {node + "test_a[0]"}
    assert rec == {node + "test_a[0]": 5.0, node + "test_a[1]": 2.0, node + "test_a[2]": 7.0,
                   node + "test_b": 3.0}  # fmt: skip


def test_shard_out_of_range_is_refused(tmp_path: Path, script: Any) -> None:
    g = script(PLANNER)
    ids = tmp_path / "ids"
    ids.write_text("tests/kernels/test_x_gpu.py::test_a[0]\n")
    assert g.main([str(ids), "3", "2", "--xml", str(tmp_path / "none*.xml")]) == 2
    assert g.main([str(ids), "1", "1", "--xml", str(tmp_path / "none*.xml")]) == 0


def test_the_default_reads_the_committed_run(script: Any) -> None:
    """The planner's default finds the GPU suite's recorded run beside the tests' other data."""
    g = script(PLANNER)
    root = Path(__file__).resolve().parents[2]
    rec, _ = g.recorded([str(root / g.DEFAULT_XML)])
    assert len(rec) > 500  # the H100 run of 2026-12-05: 609 tests in two shards
