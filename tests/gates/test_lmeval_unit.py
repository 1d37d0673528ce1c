"""The lm-eval gate without a serve: bands and their lower bounds, lm-eval's real output stored
sample by sample, two runs paired, the command line, and a missing lm-eval.

tests/data/lmeval/output/ is what lm-eval 0.4.13 wrote (`--log_samples`) when this gate ran
paroctl_facts_mc and paroctl_facts_gen (--limit 6) against the SmolLM2-135M CPU serve.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paroctl.client import Client
from paroctl.errors import DataError, RuntimeFailure, UsageError
from paroctl.gates import lmeval as gate
from paroctl.gates import lmeval_scoring as scoring
from paroctl.gates.base import GateContext, Target
from paroctl.gates.stats import wilson
from paroctl.profile import profiles
from paroctl.profile.profiles import Profile
from paroctl.profile.schema import Gates
from paroctl.store.results import Provenance, open_store

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "lmeval"
OUTPUT = DATA / "output"


def _cli(*args: str) -> Any:
    from paroctl.cli.main import cli

    return CliRunner().invoke(cli, ["gate", "lm-eval", *args])


# --- bands and bounds -----------------------------------------------------------------------


def test_band_text_names_task_metric_and_filter() -> None:
    assert scoring.parse_band("arc_easy=0.6") == scoring.TaskBand("arc_easy", "acc", "none", 0.6)
    assert scoring.parse_band("hellaswag:acc_norm=0.3") == scoring.TaskBand(
        "hellaswag", "acc_norm", "none", 0.3
    )
    assert scoring.parse_band("gsm8k:exact_match,strict-match=0.25") == scoring.TaskBand(
        "gsm8k", "exact_match", "strict-match", 0.25
    )
    for bad in ("arc_easy", "arc_easy=", "=0.5", "arc_easy=1.5", "arc_easy=0", "arc_easy=nan"):
        with pytest.raises(UsageError, match=r"expected TASK\[:METRIC\[,FILTER\]\]=LOW"):
            scoring.parse_band(bad)


def test_binary_samples_get_the_wilson_bound_never_the_point_estimate() -> None:
    items = [_item("t", "none", {"acc": 1.0}, doc) for doc in range(5)]
    verdict = scoring.judge(items, scoring.TaskBand("t", "acc", "none", 0.9))
    # 5/5 right is a point estimate of 100%, above 0.9; the 95% lower bound is 56.6%: below.
    assert verdict.interval == wilson(5, 5)
    assert verdict.interval.point == 1.0 and verdict.status == "fail"
    assert scoring.judge(items, scoring.TaskBand("t", "acc", "none", 0.5)).status == "pass"
    assert scoring.judge(items, scoring.TaskBand("t", "acc", "none")).status == "unjudged"


def test_graded_samples_get_a_seeded_bootstrap_bound() -> None:
    values = [0.2, 0.9, 0.5, 0.7, 1.0, 0.4, 0.6, 0.8]
    first, again = scoring.lower_bound(values), scoring.lower_bound(values)
    assert first == again  # seeded: the same samples always give the same verdict
    assert first.point == pytest.approx(sum(values) / len(values))
    assert first.low < first.point < first.high
    assert 0.2 < first.low < 0.6 and 0.6 < first.high < 0.9


def test_a_band_on_a_metric_lm_eval_did_not_report_is_refused() -> None:
    items = [_item("t", "none", {"acc": 1.0}, 0)]
    with pytest.raises(UsageError, match=r"band t:acc_norm,none: .* \(it has acc,none\)"):
        scoring.judge(items, scoring.TaskBand("t", "acc_norm", "none", 0.5))


# --- lm-eval's output, stored sample by sample -----------------------------------------------


def test_real_output_is_read_with_every_task_s_samples() -> None:
    output = scoring.read_output(OUTPUT)
    assert sorted(output.samples) == ["paroctl_facts_gen", "paroctl_facts_mc"]
    assert [len(s) for s in output.samples.values()] == [6, 6]
    metrics = scoring.task_metrics(output.results)
    assert metrics["paroctl_facts_mc"]["acc,none"] == 1.0
    assert set(metrics["paroctl_facts_gen"]) == {
        "exact_match,first-word",
        "exact_match_stderr,first-word",
    }


def test_an_output_folder_without_results_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="lm-eval wrote no results"):
        scoring.read_output(tmp_path)


def test_every_sample_is_stored_with_hashes_scores_and_a_verdict(tmp_path: Path) -> None:
    ctx = _context(tmp_path, {"bands": ["paroctl_facts_mc=0.5"]})
    plan = gate.plan_of(ctx, gate.bands_of(ctx))
    outcome = gate.record_output(ctx, plan, scoring.read_output(OUTPUT), gate.bands_of(ctx), "x")
    items = ctx.store.items(ctx.run_id)
    assert len(items) == 12 == outcome.summary["samples"]
    mc = next(i for i in items if i["key"] == "paroctl_facts_mc/none/0")
    assert mc["outcome"] == "correct" and mc["scores"] == {"acc": 1.0}
    assert len(mc["prompt_hash"]) == 64 and mc["doc_id"] == 0
    gen = {i["key"]: i for i in items if i["task"] == "paroctl_facts_gen"}
    assert gen["paroctl_facts_gen/first-word/0"]["target"] == "cold"
    assert [i["outcome"] for i in gen.values()].count("correct") == 4  # 4 of 6, as lm-eval said
    assert outcome.status == "pass"
    assert outcome.summary["judged"]["paroctl_facts_mc"]["low"] == wilson(6, 6).low
    assert outcome.summary["results"]["paroctl_facts_gen"]["exact_match,first-word"] == 4 / 6
    assert outcome.message.startswith("paroctl_facts_mc acc 100.00% (n=6), 95% CI [60.97%, 100")
    assert outcome.summary["versions"] == {"paroctl_facts_gen": 1.0, "paroctl_facts_mc": 1.0}


def test_without_a_band_the_run_is_recorded_unjudged(tmp_path: Path) -> None:
    ctx = _context(tmp_path, {})
    plan = gate.plan_of(ctx, {})
    outcome = gate.record_output(ctx, plan, scoring.read_output(OUTPUT), {}, "x")
    assert outcome.status == "unjudged" and outcome.summary["judged"] == {}
    assert outcome.message.startswith("12 samples over 2 task(s), no band")


@pytest.mark.skipif(
    "lm_eval" not in Gates.model_fields,
    reason="the profile schema has no gates.lm_eval section yet (paroctl/profile/schema.py)",
)
def test_the_profile_s_bands_name_the_tasks_and_judge_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "profiles"
    directory.mkdir()
    (directory / "_cpu.yaml").write_text((REPO / "profiles" / "_cpu.yaml").read_text())
    bands = {
        "paroctl_facts_mc": {"min_lower_bound": 0.5},
        "paroctl_facts_gen": {
            "metric": "exact_match",
            "filter": "first-word",
            "min_lower_bound": 0.6,
        },
    }
    demo = {
        "extends": "_cpu",
        "description": "lm-eval bands",
        "model": {"path": "SmolLM2-135M-Instruct", "served_names": ["served-name"]},
        "gates": {"lm_eval": {"tasks": bands, "limit": 6, "concurrency": 3}},
    }
    (directory / "banded.yaml").write_text(json.dumps(demo))
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", str(directory))
    ctx = _context(tmp_path, {}, profile=profiles.load("banded"))
    plan = gate.plan_of(ctx, gate.bands_of(ctx))
    assert (plan.tasks, plan.limit, plan.concurrency) == (tuple(bands), 6, 3)
    outcome = gate.record_output(ctx, plan, scoring.read_output(OUTPUT), gate.bands_of(ctx), "x")
    judged = outcome.summary["judged"]
    assert judged["paroctl_facts_mc"]["status"] == "pass"
    # 4 of 6 is 67%, above 0.6; its Wilson lower bound (30%) is not.
    assert judged["paroctl_facts_gen"]["mean"] == 4 / 6 and judged["paroctl_facts_gen"]["low"] < 0.6
    assert judged["paroctl_facts_gen"]["status"] == "fail" and outcome.status == "fail"


# --- two runs paired ---------------------------------------------------------------------------


def test_two_runs_pair_sample_by_sample_on_the_same_prompts() -> None:
    band = scoring.TaskBand("t", "acc", "none")
    before = [_item("t", "none", {"acc": 1.0}, doc) for doc in range(20)]
    now = [_item("t", "none", {"acc": 0.0 if doc < 6 else 1.0}, doc) for doc in range(20)]
    now.append(_item("t", "none", {"acc": 1.0}, 20))  # asked only now: not paired
    now[19] = {**now[19], "prompt_hash": "other"}  # asked differently: not paired
    result = scoring.paired(before, now, band, margin=0.02)
    assert (result["n"], result["old_only"], result["new_only"]) == (19, 6, 0)
    assert result["p_value"] == pytest.approx(2 / 2**6)
    assert result["verdict"] == "fail"
    same = scoring.paired(before, before, band, margin=0.02)
    assert (same["n"], same["old_only"], same["new_only"], same["verdict"]) == (20, 0, 0, "pass")


def test_a_run_against_a_worse_one_fails_on_the_paired_test(tmp_path: Path) -> None:
    output = scoring.read_output(OUTPUT)
    ctx = _context(tmp_path, {})
    gate.record_output(ctx, gate.plan_of(ctx, {}), output, {}, "x")
    worse = _flipped(output, "paroctl_facts_mc")
    second = _context(tmp_path, {"against": ctx.run_id[:20], "margin": 0.0})
    outcome = gate.record_output(second, gate.plan_of(second, {}), worse, {}, "x")
    paired = outcome.summary["paired"]
    assert paired["against"] == ctx.run_id
    mc = paired["tasks"]["paroctl_facts_mc"]
    assert (mc["metric"], mc["n"], mc["old_only"], mc["new_only"]) == ("acc", 6, 6, 0)
    assert mc["verdict"] == "fail" and outcome.status == "fail"
    assert paired["tasks"]["paroctl_facts_gen"]["verdict"] == "pass"
    assert "paroctl_facts_mc paired with" in outcome.message


def test_results_compare_gets_every_task_metric_and_bound(tmp_path: Path) -> None:
    ctx = _context(tmp_path, {"bands": ["paroctl_facts_mc=0.5"]})
    bands = gate.bands_of(ctx)
    outcome = gate.record_output(
        ctx, gate.plan_of(ctx, bands), scoring.read_output(OUTPUT), bands, "x"
    )
    assert scoring.comparable_numbers(outcome.summary) == {
        "paroctl_facts_gen exact_match,first-word": 4 / 6,
        "paroctl_facts_mc acc,none": 1.0,
        "paroctl_facts_mc acc low": wilson(6, 6).low,
    }


def test_against_a_missing_run_or_another_gate_s_is_refused(tmp_path: Path) -> None:
    ctx = _context(tmp_path, {})
    with pytest.raises(UsageError, match="--against nope: no such run"):
        gate._other_run(ctx, "nope")
    provenance = Provenance("external", None, {}, None, None, None, "test", None)
    ctx.store.start_run("r-gsm8k", "gsm8k", provenance, {})
    with pytest.raises(UsageError, match="--against r-gsm8k is a gsm8k run, not lm-eval"):
        gate._other_run(ctx, "r-gsm8k")


# --- the command line ------------------------------------------------------------------------


def test_the_command_line_carries_the_serve_never_the_key(tmp_path: Path) -> None:
    ctx = _context(tmp_path, {"tasks": ["arc_easy"], "limit": 3, "concurrency": 2})
    plan = gate.plan_of(ctx, {})
    args = gate.argv(plan, tmp_path / "out", tmp_path / "cache")
    assert args[:5] == [sys.executable, "-m", "lm_eval", "--model", "local-completions"]
    model_args = json.loads(args[args.index("--model_args") + 1])
    assert model_args["base_url"] == "http://127.0.0.1:9/v1/completions"
    assert (model_args["model"], model_args["num_concurrent"]) == ("served-name", 2)
    assert model_args["tokenizer_backend"] is None  # an endpoint with no --tokenizer
    assert args[args.index("--limit") + 1] == "3"
    assert "--use_cache" in args and "--log_samples" in args
    assert "sk-secret" not in " ".join(args)
    assert gate._child_env(ctx)["OPENAI_API_KEY"] == "sk-secret"
    chat = gate.plan_of(_context(tmp_path, {"tasks": ["t"], "mode": "chat"}), {})
    chat_args = gate.argv(chat, tmp_path, tmp_path)
    assert "--apply_chat_template" in chat_args and "local-chat-completions" in chat_args


def test_lm_eval_s_own_progress_lines_drive_the_progress_display() -> None:
    seen: list[tuple[str, ...]] = []

    class Record:
        def start(self, description: str, total: int, completed: int = 0) -> None:
            seen.append(("start", description, str(total), str(completed)))

        def advance(self, steps: int = 1) -> None:
            seen.append(("advance", str(steps)))

    follow = gate._Follow(Record())
    for line in (
        "2026-12-06:11:18:02 INFO [evaluator:589] Running loglikelihood requests",
        "Requesting API:   0%|          | 0/24 [00:00<?, ?it/s]",
        "Requesting API:  50%|#####     | 12/24 [00:05<00:05, 2.1it/s]",
        "Requesting API: 100%|##########| 24/24 [00:12<00:00, 2.0it/s]",
        "2026-12-06:11:18:15 INFO [evaluator:589] Running generate_until requests",
        "Requesting API: 100%|##########| 6/6 [00:05<00:00, 1.1it/s]",
    ):
        follow(line)
    assert seen == [
        ("start", "lm-eval loglikelihood", "24", "0"),
        ("advance", "12"),
        ("advance", "12"),
        ("start", "lm-eval generate_until", "6", "6"),
    ]


def test_lm_eval_s_failures_are_told_as_their_cause() -> None:
    plan = gate.Plan(("t",), "http://h", "m", "completions", 1, None, None, (), None, 2048, 60)
    loglik = RuntimeFailure("... AssertionError: Tokenizer is required for loglikelihood tasks")
    assert "pass --tokenizer DIR" in gate._explain(loglik, plan).message
    chat = RuntimeFailure(  # lm-eval 0.4.13's own words for a loglikelihood task in chat mode
        "NotImplementedError: Loglikelihood is not supported for chat completions. Consider ..."
    )
    assert gate._explain(chat, plan).message.endswith("cannot serve: use --mode completions")
    # lm-eval 0.4.13's own last lines for an unknown task (its source line is in the traceback).
    unknown = RuntimeFailure(
        '    raise ValueError(f"Tasks not found: {missing}")\n'
        "ValueError: Tasks not found: no_such_task_xyz"
    )
    told = gate._explain(unknown, plan)
    assert isinstance(told, UsageError)
    assert told.message.startswith("lm-eval does not know task(s) no_such_task_xyz; check --tasks")
    assert isinstance(gate._explain(RuntimeFailure("boom"), plan), RuntimeFailure)


def test_missing_lm_eval_exits_2_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules is Python's own "this module cannot be imported" (as after a failed or
    # absent install): find_spec and import both refuse it.
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    result = _cli("--tasks", "arc_easy")
    assert result.exit_code == 2, result.output
    assert "lm-eval is not installed: pip install 'paroctl[lmeval]'" in result.output
    with open_store() as store:
        assert store.runs() == []  # refused before a run was opened or anything connected


def test_a_bad_band_is_refused_before_anything_connects() -> None:
    result = _cli("--tasks", "arc_easy", "--band", "arc_easy:acc")
    assert result.exit_code == 2
    assert "expected TASK[:METRIC[,FILTER]]=LOW" in result.output


# --- helpers ---------------------------------------------------------------------------------


def _item(task: str, filt: str, scores: dict[str, float], doc: int) -> dict[str, Any]:
    return {
        "key": f"{task}/{filt}/{doc}",
        "task": task,
        "filter": filt,
        "doc_id": doc,
        "prompt_hash": f"p{doc}",
        "scores": scores,
    }


def _flipped(output: scoring.Output, task: str) -> scoring.Output:
    """The same output with every sample of `task` scored wrong (a build that lost the task)."""
    samples = {
        name: [{**s, **{m: 0.0 for m in s["metrics"]}} if name == task else s for s in rows]
        for name, rows in output.samples.items()
    }
    return scoring.Output(output.results, samples)


def _context(
    tmp_path: Path, options: dict[str, Any], profile: Profile | None = None
) -> GateContext:
    """A gate context on a real results store, for an endpoint that is never called."""
    store = open_store(tmp_path / "results.db")
    target = Target("http://127.0.0.1:9", "served-name", ("served-name",), 2048, None, None)
    run_id = f"run-{len(store.runs())}-lm-eval"
    provenance = Provenance("external", None, {}, None, None, None, "test", None)
    if profile is None:
        options = {"tasks": ["paroctl_facts_mc", "paroctl_facts_gen"], **options}
    store.start_run(run_id, "lm-eval", provenance, options)
    return GateContext(
        target=target,
        client=Client(target.base_url, api_key="sk-secret"),
        store=store,
        run_id=run_id,
        options=dict(options),
        profile=profile,
    )
