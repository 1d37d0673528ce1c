"""`paroctl gate lm-eval` end to end: the installed lm-eval runs a local task against the real
vLLM CPU serve (SmolLM2-135M), paroctl stores its samples, judges the band, pairs two runs.

The task (tests/data/lmeval) is local: no Hugging Face hub here or in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from paroctl.gates.stats import wilson
from paroctl.store.results import open_store

if TYPE_CHECKING:
    from ..conftest import CpuServe

pytestmark = pytest.mark.e2e

TASKS = Path(__file__).resolve().parents[2] / "data" / "lmeval"


def _gate(*args: str) -> Any:
    from paroctl.cli.main import cli

    return CliRunner().invoke(cli, ["gate", "lm-eval", "--include-path", str(TASKS), *args])


def _run(run_id: str) -> dict[str, Any]:
    with open_store() as store:
        run = store.run(run_id)
        assert run is not None
        return {**run, "items": store.items(run_id)}


def test_lm_eval_runs_a_task_stores_samples_judges_and_pairs(live: CpuServe) -> None:
    first = _gate(
        "--tasks", "paroctl_facts_mc,paroctl_facts_gen", "--limit", "4",
        "--band", "paroctl_facts_mc=0.3",
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    assert "lm-eval: PASS — paroctl_facts_mc acc " in first.output
    with open_store() as store:
        (run_a,) = store.runs(gate="lm-eval")
    run = _run(run_a["run_id"])
    # Provenance, as every gate records it; lm-eval's own version beside it.
    assert (run["profile"], run["profile_hash"], run["boot_id"]) == (
        "cpu-demo",
        "e2e-hash",
        "e2e-boot",
    )
    summary = run["summary"]
    assert summary["lm_eval_version"] == "0.4.13"
    # The served name and the served model's own tokenizer (the profile's model directory).
    assert summary["tokenizer"] == live.spec.argv[live.spec.argv.index("--model") + 1]
    assert summary["n-samples"]["paroctl_facts_mc"] == {"original": 12, "effective": 4}
    # Every sample stored: 4 per task, scored as lm-eval scored them.
    keys = sorted(item["key"] for item in run["items"])
    assert keys == [f"paroctl_facts_gen/first-word/{d}" for d in range(4)] + [
        f"paroctl_facts_mc/none/{d}" for d in range(4)
    ]
    mc = [item for item in run["items"] if item["task"] == "paroctl_facts_mc"]
    right = sum(item["scores"]["acc"] for item in mc)
    assert summary["results"]["paroctl_facts_mc"]["acc,none"] == right / 4
    assert {item["outcome"] for item in mc} <= {"correct", "wrong"}
    assert all(len(item["prompt_hash"]) == 64 for item in run["items"])
    # Judged on the Wilson lower bound of what was stored, not on the point estimate. The band
    # holds in any serve dtype: on the bf16 CPU serve (2026-12-06) the right choice led the best
    # wrong one by 8.5-15.8 nats on docs 0-5 (tests/data/lmeval/output).
    judged = summary["judged"]["paroctl_facts_mc"]
    assert judged["low"] == wilson(int(right), 4).low >= 0.3
    assert judged["status"] == "pass" and run["status"] == "pass"

    # The same task again, paired per sample with the first run; a floor of 0.9 that no 4
    # samples can prove (even 4/4 has a 95% lower bound of 51%): the gate fails, exit 1.
    second = _gate(
        "--tasks", "paroctl_facts_mc", "--limit", "4", "--band", "paroctl_facts_mc=0.9",
        "--against", run_a["run_id"],
    )  # fmt: skip
    assert second.exit_code == 1, second.output
    assert "lower bound is below 90.00%" in second.output
    with open_store() as store:
        run_b = next(r for r in store.runs(gate="lm-eval") if r["run_id"] != run_a["run_id"])
    paired = run_b["summary"]["paired"]
    assert paired["against"] == run_a["run_id"]
    # Greedy scoring of the same prompts on the same serve: no sample changed its answer.
    mc_pair = paired["tasks"]["paroctl_facts_mc"]
    assert (mc_pair["n"], mc_pair["old_only"], mc_pair["new_only"]) == (4, 0, 0)
    assert mc_pair["verdict"] == "pass"
    assert f"paroctl_facts_mc paired with {run_a['run_id']}: 0 right only before" in second.output
