"""lm-eval's output as paroctl judges it (pure): task bands, logged samples as stored items, the
95% lower bound of a task's metric, and two runs paired sample by sample.

The sample fields read here are those `lm_eval --log_samples` writes (0.4.13,
lm_eval/evaluator.py and loggers/evaluation_tracker.py): doc_id, filter, doc_hash, prompt_hash,
target_hash, target, filtered_resps, `metrics` (the names) and one value per metric name.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl.errors import DataError, UsageError
from paroctl.gates.stats import Interval, paired_noninferiority, wilson

DEFAULT_METRIC, DEFAULT_FILTER = "acc", "none"
BOOTSTRAP_ITERS = 2000
BOOTSTRAP_SEED = 1234
TEXT_CAP = 2000  # characters of a response or target kept per stored sample


# --- bands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskBand:
    """One task's band: the 95% lower bound of `metric` under `filter` must reach `floor`."""

    task: str
    metric: str = DEFAULT_METRIC
    filter: str = DEFAULT_FILTER
    floor: float | None = None  # None: measured and recorded, not judged


def parse_band(text: str) -> TaskBand:
    """`TASK[:METRIC[,FILTER]]=LOW` (as lm-eval names a result, "acc,none") into a band."""
    head, sep, low = text.partition("=")
    task, _, key = head.partition(":")
    metric, _, filt = key.partition(",")
    try:
        floor = float(low)
    except ValueError:
        floor = -1.0
    if not sep or not task.strip() or not 0.0 < floor <= 1.0:
        raise UsageError(
            f"--band {text[:80]!r}: expected TASK[:METRIC[,FILTER]]=LOW with 0 < LOW <= 1, "
            "e.g. arc_easy:acc_norm=0.6"
        )
    return TaskBand(
        task.strip(), metric.strip() or DEFAULT_METRIC, filt.strip() or DEFAULT_FILTER, floor
    )


def profile_bands(section: Any) -> dict[str, TaskBand]:
    """The bands of a profile's `gates.lm_eval` section (its `tasks` mapping); {} without one."""
    tasks: Mapping[str, Any] = getattr(section, "tasks", None) or {}
    return {
        name: TaskBand(
            name,
            str(getattr(band, "metric", DEFAULT_METRIC)),
            str(getattr(band, "filter", DEFAULT_FILTER)),
            getattr(band, "min_lower_bound", None),
        )
        for name, band in tasks.items()
    }


# --- lm-eval's output (pure) -----------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """What one lm-eval run wrote: the results file and every task's logged samples."""

    results: dict[str, Any]
    samples: dict[str, list[dict[str, Any]]]


def read_output(out_dir: Path) -> Output:
    """The newest results_*.json under out_dir and the samples_<task>_*.jsonl beside it."""
    found = sorted(out_dir.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise DataError(f"{out_dir}: lm-eval wrote no results_*.json")
    path = found[-1]
    stamp = path.stem.removeprefix("results_")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        samples: dict[str, list[dict[str, Any]]] = {}
        for task in results.get("configs") or {}:
            file = path.parent / f"samples_{task}_{stamp}.jsonl"
            if file.exists():
                lines = file.read_text(encoding="utf-8").splitlines()
                samples[task] = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError) as exc:
        raise DataError(f"{path.parent}: cannot read lm-eval's output ({exc})") from exc
    return Output(results, samples)


def sample_key(task: str, sample: Mapping[str, Any]) -> str:
    """The stored item key: task, filter and lm-eval's doc_id (stable across runs and builds)."""
    return f"{task}/{sample.get('filter', DEFAULT_FILTER)}/{sample['doc_id']}"


def _cap(value: Any) -> Any:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + "..."


def sample_record(task: str, sample: Mapping[str, Any]) -> dict[str, Any]:
    """One logged sample as stored: its hashes (the pairing key), target, response and scores."""
    scores = {
        name: sample[name]
        for name in sample.get("metrics") or ()
        if isinstance(sample.get(name), int | float)
    }
    return {
        "task": task,
        "doc_id": sample["doc_id"],
        "filter": sample.get("filter", DEFAULT_FILTER),
        "doc_hash": sample.get("doc_hash"),
        "prompt_hash": sample.get("prompt_hash"),
        "target_hash": sample.get("target_hash"),
        "target": _cap(sample.get("target")),
        "response": _cap(sample.get("filtered_resps")),
        "scores": scores,
    }


def sample_outcome(record: Mapping[str, Any], band: TaskBand | None) -> str:
    """correct / wrong by the band's metric (else the sample's first) where it is 0 or 1;
    "scored" for a metric that is not right-or-wrong (an F1, a perplexity)."""
    scores: Mapping[str, Any] = record["scores"]
    if band is not None and band.filter == record["filter"] and band.metric in scores:
        value = scores[band.metric]
    else:
        value = next(iter(scores.values()), None)
    if value in (0, 1):
        return "correct" if value == 1 else "wrong"
    return "scored"


# --- statistics (pure) -----------------------------------------------------------------------


def lower_bound(values: Sequence[float]) -> Interval:
    """The 95% interval of a mean: Wilson when every value is 0 or 1, else a seeded percentile
    bootstrap (BOOTSTRAP_ITERS resamples); `successes` is the rounded sum."""
    n = len(values)
    if n and all(v in (0, 1) for v in values):
        return wilson(int(sum(values)), n)
    if n == 0:
        return Interval(0, 0, 0.0, 0.0, 1.0)
    rnd = random.Random(BOOTSTRAP_SEED)
    means = sorted(sum(rnd.choices(values, k=n)) / n for _ in range(BOOTSTRAP_ITERS))
    low = means[int(0.025 * BOOTSTRAP_ITERS)]
    high = means[min(int(0.975 * BOOTSTRAP_ITERS), BOOTSTRAP_ITERS - 1)]
    return Interval(round(sum(values)), n, sum(values) / n, low, high)


def metric_values(items: Iterable[Mapping[str, Any]], band: TaskBand) -> list[float]:
    """The per-sample values of a band's metric under its filter, over one task's items."""
    return [
        float(item["scores"][band.metric])
        for item in items
        if item.get("task") == band.task
        and item.get("filter") == band.filter
        and isinstance(item.get("scores", {}).get(band.metric), int | float)
    ]


def correct_by_sample(items: Iterable[Mapping[str, Any]], band: TaskBand) -> dict[str, bool]:
    """Per sample of a band's task and filter: whether its 0/1 metric says right.

    The key carries the prompt hash, so two runs pair only on samples asked the same way.
    """
    out: dict[str, bool] = {}
    for item in items:
        value = item.get("scores", {}).get(band.metric)
        if item.get("task") == band.task and item.get("filter") == band.filter and value in (0, 1):
            out[f"{item['key']}@{item.get('prompt_hash')}"] = value == 1
    return out


def paired(
    before: Iterable[Mapping[str, Any]],
    now: Iterable[Mapping[str, Any]],
    band: TaskBand,
    margin: float,
) -> dict[str, Any]:
    """McNemar on one task's samples both runs scored (same key, same prompt): what changed."""
    result = paired_noninferiority(
        correct_by_sample(before, band), correct_by_sample(now, band), margin
    )
    return {
        "n": result.n,
        "old_only": result.old_only,
        "new_only": result.new_only,
        "p_value": result.p_value,
        "loss": result.loss,
        "margin": margin,
        "verdict": result.verdict,
    }


def pairing_band(items: Sequence[Mapping[str, Any]], task: str, band: TaskBand | None) -> TaskBand:
    """What two runs of a task are paired on: its band's metric, else its first 0/1 metric."""
    if band is not None:
        return band
    for item in items:
        if item.get("task") != task:
            continue
        for name, value in sorted((item.get("scores") or {}).items()):
            if value in (0, 1):
                return TaskBand(task, name, str(item.get("filter", DEFAULT_FILTER)))
    return TaskBand(task)


def paired_runs(
    before: Sequence[Mapping[str, Any]],
    now: Sequence[Mapping[str, Any]],
    bands: Mapping[str, TaskBand],
    margin: float,
) -> dict[str, dict[str, Any]]:
    """Every task both runs scored, paired sample by sample (McNemar), keyed by task."""
    tasks = sorted({str(i.get("task")) for i in before} & {str(i.get("task")) for i in now})
    out = {}
    for task in tasks:
        band = pairing_band(now, task, bands.get(task))
        out[task] = {
            "metric": band.metric,
            "filter": band.filter,
            **paired(before, now, band, margin),
        }
    return out


# --- the verdict (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class TaskVerdict:
    """One banded task judged: its interval and whether the lower bound reaches the floor."""

    band: TaskBand
    interval: Interval
    status: str  # pass | fail | unjudged

    def as_dict(self) -> dict[str, Any]:
        """The summary's record of this task's judgement."""
        iv = self.interval
        return {
            "metric": self.band.metric,
            "filter": self.band.filter,
            "n": iv.n,
            "mean": iv.point,
            "low": iv.low,
            "high": iv.high,
            "min_lower_bound": self.band.floor,
            "status": self.status,
        }

    def text(self) -> str:
        """One line: task metric mean [low, high] and how it stands against the floor."""
        iv, band = self.interval, self.band
        line = (
            f"{band.task} {band.metric} {iv.point:.2%} (n={iv.n}), "
            f"95% CI [{iv.low:.2%}, {iv.high:.2%}]"
        )
        if band.floor is not None:
            word = "clears" if self.status == "pass" else "is below"
            line += f", lower bound {word} {band.floor:.2%}"
        return line


def judge(items: Sequence[Mapping[str, Any]], band: TaskBand) -> TaskVerdict:
    """A task's band against its stored samples; UsageError when it has no such metric."""
    values = metric_values(items, band)
    if not values:
        have = sorted(
            {
                f"{name},{item.get('filter')}"
                for item in items
                if item.get("task") == band.task
                for name in item.get("scores") or {}
            }
        )
        raise UsageError(
            f"band {band.task}:{band.metric},{band.filter}: lm-eval scored no sample of that "
            f"metric (it has {', '.join(have) or 'no samples of ' + band.task})"
        )
    interval = lower_bound(values)
    if band.floor is None:
        return TaskVerdict(band, interval, "unjudged")
    return TaskVerdict(band, interval, "pass" if interval.low >= band.floor else "fail")


def task_metrics(results: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """lm-eval's aggregated numbers per task ("acc,none": 0.5, "acc_stderr,none": ...)."""
    return {
        str(task): {
            str(key): float(value)
            for key, value in row.items()
            if "," in str(key) and isinstance(value, int | float) and not isinstance(value, bool)
        }
        for task, row in (results.get("results") or {}).items()
    }


def comparable_numbers(summary: Mapping[str, Any]) -> dict[str, float]:
    """An lm-eval run's numbers for `results compare`: each task metric and judged lower bound."""
    out: dict[str, float] = {}
    for task, metrics in (summary.get("results") or {}).items():
        out.update(
            {f"{task} {key}": value for key, value in metrics.items() if "_stderr" not in key}
        )
    for task, judged in (summary.get("judged") or {}).items():
        out[f"{task} {judged['metric']} low"] = judged["low"]
    return out
