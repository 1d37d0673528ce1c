"""lm-eval: any lm-evaluation-harness task, run by lm-eval itself against the serve.

paroctl does not re-express the task (as the GSM8K gate does): it runs the installed lm-eval (the
`lmeval` extra pins the version) as a child process with the serve's address, served name, API
key and concurrency, through lm-eval's `local-completions` / `local-chat-completions` models, and
reads lm-eval's own output (`--log_samples`): every sample is stored as one item, every task's
metrics go into the summary, and each task with a band is judged on the 95% lower bound of its
metric (lmeval_scoring), never on the point estimate. `against` pairs the run with a stored one,
sample by sample.

A child process, not an import: lm-eval brings torch, transformers and datasets, which paroctl's
own process never loads (DESIGN.md). lm-eval's request cache (`--use_cache`, a sqlite file it
writes as each answer arrives) lives beside the run, so a `--resume` reuses what a crashed run
had received and asks only the rest.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl import env, proc, state
from paroctl.errors import ParoctlError, RuntimeFailure, UsageError
from paroctl.gates import lmeval_scoring as scoring
from paroctl.gates.base import GateContext, Outcome, Progress
from paroctl.gates.lmeval_scoring import TaskBand, TaskVerdict

NAME = "lm-eval"
PINNED = "0.4.13"  # the version the `lmeval` extra installs; a run records the one it used
NOT_INSTALLED = "lm-eval is not installed: pip install 'paroctl[lmeval]'"
# lm-eval's API models, by prompt mode: the model name and the endpoint it posts to.
MODELS = {
    "completions": ("local-completions", "/v1/completions"),
    "chat": ("local-chat-completions", "/v1/chat/completions"),
}
DEFAULT_CONCURRENCY = 8
DEFAULT_MARGIN = 0.02
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# tqdm's line for the API requests ("Requesting API:  45%|####      | 9/20 [...]").
_REQUESTS = re.compile(r"Requesting API:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_PHASE = re.compile(r"Running (\w+) requests")
# The last line of lm-eval's traceback for an unknown task (evaluate_config.process_tasks).
_NOT_FOUND = re.compile(r"^\w*Error: Tasks not found: (.+)$", re.MULTILINE)
_NEEDS_TOKENIZER = "Tokenizer is required for loglikelihood"
_CHAT_LOGLIKELIHOOD = "Loglikelihood is not supported for chat completions"


@dataclass(frozen=True)
class Plan:
    """One lm-eval invocation, derived once from the options, the band and the target."""

    tasks: tuple[str, ...]
    base_url: str
    model: str
    mode: str
    concurrency: int
    limit: int | None
    num_fewshot: int | None
    include_paths: tuple[str, ...]
    tokenizer: str | None
    max_length: int
    timeout_s: int


def model_args(plan: Plan) -> dict[str, Any]:
    """lm-eval's --model_args for the serve: where, which name, how many requests in flight.

    With a tokenizer, loglikelihood tasks work (lm-eval counts context tokens itself and sends
    token ids); without one, only generation tasks do, sent as text.
    """
    _, path = MODELS[plan.mode]
    args: dict[str, Any] = {
        "model": plan.model,
        "base_url": plan.base_url.rstrip("/") + path,
        "num_concurrent": plan.concurrency,
        "max_retries": 3,
        "max_length": plan.max_length,
        "timeout": plan.timeout_s,
    }
    if plan.tokenizer and plan.mode == "completions":
        args.update(tokenizer_backend="huggingface", tokenizer=plan.tokenizer)
        args.update(tokenized_requests=True)
    else:
        args.update(tokenizer_backend=None, tokenized_requests=False)
    return args


def argv(plan: Plan, out_dir: Path, cache: Path) -> list[str]:
    """The lm-eval command line (pure): this interpreter's lm_eval, samples logged to out_dir."""
    model, _ = MODELS[plan.mode]
    args = [sys.executable, "-m", "lm_eval", "--model", model]
    args += ["--model_args", json.dumps(model_args(plan), sort_keys=True)]
    args += ["--tasks", ",".join(plan.tasks), "--log_samples", "--output_path", str(out_dir)]
    args += ["--use_cache", str(cache)]
    if plan.mode == "chat":
        args.append("--apply_chat_template")
    if plan.limit is not None:
        args += ["--limit", str(plan.limit)]
    if plan.num_fewshot is not None:
        args += ["--num_fewshot", str(plan.num_fewshot)]
    for path in plan.include_paths:
        args += ["--include_path", path]
    return args


def installed() -> str:
    """The installed lm-eval's version; UsageError (exit 2) naming the extra when it is missing."""
    try:
        found = importlib.util.find_spec("lm_eval")
    except (ImportError, ValueError):  # a broken or blocked install is as good as none
        found = None
    if found is None:
        raise UsageError(NOT_INSTALLED)
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --- the plan from the options, the profile and the target -------------------------------------


def _section(ctx: GateContext) -> Any:
    # The profile's `gates.lm_eval` (None where the profile, or its schema, has none).
    return getattr(ctx.profile.body.gates, "lm_eval", None) if ctx.profile else None


def bands_of(ctx: GateContext) -> dict[str, TaskBand]:
    """The profile's task bands, overridden task by task by the run's own `bands` option."""
    given = [scoring.parse_band(str(text)) for text in ctx.opt("bands", [])]
    return {**scoring.profile_bands(_section(ctx)), **{band.task: band for band in given}}


def _tasks(ctx: GateContext, bands: dict[str, TaskBand]) -> tuple[str, ...]:
    named = ctx.opt("tasks", None)
    tasks = [t.strip() for t in (named or list(bands)) if str(t).strip()]
    if not tasks:
        raise UsageError(
            "lm-eval: no tasks to run; name them with --tasks (e.g. --tasks arc_easy,hellaswag) "
            "or in the profile's gates.lm_eval.tasks"
        )
    bad = [t for t in tasks if not re.fullmatch(r"[A-Za-z0-9_.\-]+", t)]
    if bad:
        raise UsageError(f"--tasks: {bad[0][:60]!r} is not an lm-eval task name")
    return tuple(dict.fromkeys(tasks))


def _tokenizer(ctx: GateContext) -> str | None:
    """--tokenizer, else the served model's own directory when it holds a tokenizer (the live
    serve on this box); None for an endpoint: generation tasks only, unless --tokenizer."""
    given = ctx.opt("tokenizer", None)
    if given:
        return str(given)
    if ctx.profile is None or ctx.target.external:
        return None
    from paroctl.serve.plan import layout

    try:
        model_dir = Path(layout(ctx.profile).model_dir)
    except ParoctlError:
        return None
    return str(model_dir) if any((model_dir / f).is_file() for f in TOKENIZER_FILES) else None


def plan_of(ctx: GateContext, bands: dict[str, TaskBand]) -> Plan:
    """The invocation: options first, then the profile's gates.lm_eval, then defaults."""
    section = _section(ctx)
    gsm8k = ctx.profile.body.gates.gsm8k if ctx.profile else None
    concurrency = ctx.opt(
        "concurrency",
        getattr(section, "concurrency", None) or (gsm8k.concurrency if gsm8k else None),
    )
    limit = ctx.opt("limit", getattr(section, "limit", None))
    fewshot = ctx.opt("num_fewshot", getattr(section, "num_fewshot", None))
    return Plan(
        tasks=_tasks(ctx, bands),
        base_url=ctx.target.base_url,
        model=ctx.target.model,
        mode=str(ctx.opt("mode", "completions")),
        concurrency=int(concurrency or DEFAULT_CONCURRENCY),
        limit=None if limit is None else int(limit),
        num_fewshot=None if fewshot is None else int(fewshot),
        include_paths=tuple(str(p) for p in ctx.opt("include_path", [])),
        tokenizer=_tokenizer(ctx),
        max_length=ctx.max_len(),
        timeout_s=int(ctx.opt("timeout_s", 600)),
    )


# --- running lm-eval -------------------------------------------------------------------------


class _Follow:
    """Turns lm-eval's output lines into progress: one phase per request kind, done/total."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._phase = "requests"
        self._total: int | None = None
        self._done = 0

    def __call__(self, line: str) -> None:
        if phase := _PHASE.search(line):
            self._phase, self._total = phase.group(1), None
        found = _REQUESTS.search(line)
        if not found:
            return
        done, total = int(found.group(1)), int(found.group(2))
        if total != self._total:
            self._progress.start(f"lm-eval {self._phase}", total, completed=done)
            self._total, self._done = total, done
        elif done > self._done:
            self._progress.advance(done - self._done)
            self._done = done


def _child_env(ctx: GateContext) -> dict[str, str]:
    # lm-eval's local models send OPENAI_API_KEY as the bearer token: the key goes through the
    # environment, never argv (any user's `ps` reads argv) nor the stored options.
    return {**env.environ(), **ctx.client.bearer_env()}


def run_lm_eval(ctx: GateContext, plan: Plan, work: Path) -> scoring.Output:
    """Run lm-eval into work/output (its request cache in work/requests); read what it wrote."""
    out = work / "output"
    out.mkdir(parents=True, exist_ok=True)
    # lm-eval takes a while to import and build its requests before its first count shows.
    ctx.progress.start("lm-eval starting", 1)
    try:
        proc.stream(argv(plan, out, work / "requests"), _Follow(ctx.progress), env=_child_env(ctx))
    except RuntimeFailure as exc:
        raise _explain(exc, plan) from exc
    return scoring.read_output(out)


def _explain(exc: RuntimeFailure, plan: Plan) -> ParoctlError:
    """lm-eval's failure as the operator's cause (a task name, a tokenizer), else its last lines."""
    tasks = ",".join(plan.tasks)
    if _CHAT_LOGLIKELIHOOD in exc.message:
        return UsageError(
            f"lm-eval: a task in {tasks} scores by loglikelihood, which the chat API cannot "
            "serve: use --mode completions"
        )
    if _NEEDS_TOKENIZER in exc.message:
        return UsageError(
            f"lm-eval: a task in {tasks} scores by loglikelihood and needs the served model's "
            "tokenizer: pass --tokenizer DIR (the model directory)"
        )
    missing = _NOT_FOUND.search(exc.message)
    if missing:
        return UsageError(
            f"lm-eval does not know task(s) {missing.group(1).strip()[:200]}; check --tasks, "
            "or point --include-path at the folder holding your task YAML"
        )
    return RuntimeFailure(f"lm-eval failed: {exc.message}")


# --- the gate --------------------------------------------------------------------------------


def run(ctx: GateContext) -> Outcome:
    """Run the tasks through lm-eval; store every sample; judge each banded task's lower bound."""
    version = installed()
    bands = bands_of(ctx)
    plan = plan_of(ctx, bands)
    if ctx.opt("against", None):
        _other_run(ctx, str(ctx.opt("against", "")))  # a typo is refused before the long run
    output = run_lm_eval(ctx, plan, state.home() / "lm-eval" / ctx.run_id)
    return record_output(ctx, plan, output, bands, version)


def record_output(
    ctx: GateContext,
    plan: Plan,
    output: scoring.Output,
    bands: dict[str, TaskBand],
    version: str,
) -> Outcome:
    """Store every sample of lm-eval's output as an item; summarise, pair and judge the run."""
    items = []
    for task, samples in sorted(output.samples.items()):
        for sample in samples:
            record = scoring.sample_record(task, sample)
            key = scoring.sample_key(task, sample)
            ctx.record(key, scoring.sample_outcome(record, bands.get(task)), record)
            items.append({"key": key, **record})
    summary: dict[str, Any] = {
        "lm_eval_version": version,
        "pinned": PINNED,
        "mode": plan.mode,
        "tasks": list(plan.tasks),
        "limit": plan.limit,
        "num_fewshot": plan.num_fewshot,
        "concurrency": plan.concurrency,
        "tokenizer": plan.tokenizer,
        "samples": len(items),
        "results": scoring.task_metrics(output.results),
        **{k: output.results.get(k) for k in ("versions", "n-shot", "n-samples", "task_hashes")},
    }
    if not items:
        return Outcome("error", "samples", 0.0, summary, "lm-eval scored no sample")
    verdicts = [scoring.judge(items, band) for task, band in bands.items() if task in plan.tasks]
    summary["judged"] = {v.band.task: v.as_dict() for v in verdicts}
    against = ctx.opt("against", None)
    if against:
        summary["paired"] = _paired(ctx, str(against), items, bands)
    return _verdict(verdicts, summary)


def _other_run(ctx: GateContext, against: str) -> dict[str, Any]:
    other = ctx.store.run(against)
    if other is None:
        raise UsageError(f"--against {against}: no such run; see `paroctl results list`")
    if other["gate"] != NAME:
        raise UsageError(f"--against {other['run_id']} is a {other['gate']} run, not {NAME}")
    return other


def _paired(
    ctx: GateContext, against: str, items: list[dict[str, Any]], bands: dict[str, TaskBand]
) -> dict[str, Any]:
    other = _other_run(ctx, against)
    margin = float(ctx.opt("margin", getattr(_section(ctx), "margin", None) or DEFAULT_MARGIN))
    tasks = scoring.paired_runs(ctx.store.items(other["run_id"]), items, bands, margin)
    return {"against": other["run_id"], "tasks": tasks}


def _verdict(verdicts: list[TaskVerdict], summary: dict[str, Any]) -> Outcome:
    paired = (summary.get("paired") or {}).get("tasks") or {}
    worse = [task for task, p in paired.items() if p["verdict"] == "fail"]
    parts = [v.text() for v in verdicts]
    for task, p in paired.items():
        parts.append(
            f"{task} paired with {summary['paired']['against']}: {p['old_only']} right only "
            f"before, {p['new_only']} right only now of {p['n']}, McNemar p {p['p_value']:.3g}, "
            f"loss {p['loss']:+.1%} ({p['verdict']})"
        )
    if not verdicts:
        first_task = next(iter(summary["results"]), "")
        metrics = summary["results"].get(first_task, {})
        name = next((k for k in metrics if "_stderr" not in k), "")
        parts.insert(
            0, f"{summary['samples']} samples over {len(summary['tasks'])} task(s), no band"
        )
        headline_name, headline = f"{first_task} {name}".strip(), metrics.get(name)
    else:
        headline_name = f"{verdicts[0].band.task} {verdicts[0].band.metric}"
        headline = verdicts[0].interval.point
    if any(v.status == "fail" for v in verdicts) or worse:
        status = "fail"
    elif verdicts and all(v.status == "pass" for v in verdicts):
        status = "pass"
    else:
        status = "unjudged"
    return Outcome(status, headline_name, headline, summary, "; ".join(parts))
