"""`paroctl gate lm-eval`: any lm-evaluation-harness task, run by lm-eval, as a gate; exit 0/1/2.

paroctl.cli.gate registers the command and hands it what every gate command shares (the target
options, the endpoint and key, the progress display, the report): this module never imports
paroctl.cli.gate, so the two stay one direction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from paroctl.gates import Endpoint, GateResult

NAME = "lm-eval"
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
DIR = click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path)


@dataclass(frozen=True)
class GateCli:
    """What every gate command shares, supplied by paroctl.cli.gate."""

    target_options: Decorator
    endpoint: Callable[[str | None, str | None, Path | None, str | None], Endpoint | None]
    live_key: Callable[[Endpoint | None, Path | None], str | None]
    run_one: Callable[[str, dict[str, Any], str | None, Endpoint | None, str | None], GateResult]
    report: Callable[[GateResult], None]


def _tasks(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    tasks = [part.strip() for part in value.split(",") if part.strip()]
    if not tasks:
        raise click.BadParameter("expected comma-separated task names, e.g. arc_easy,hellaswag")
    return tasks


def _bands(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    from paroctl.errors import UsageError
    from paroctl.gates.lmeval_scoring import parse_band

    for text in value:
        try:
            parse_band(text)
        except UsageError as exc:
            raise click.BadParameter(exc.message.removeprefix(f"--band {text[:80]!r}: ")) from exc
    return list(value)


OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--tasks",
        callback=_tasks,
        metavar="TASK[,TASK...]",
        help="lm-eval task (or group) names, e.g. arc_easy,hellaswag (default: the tasks of "
        "the profile's gates.lm_eval).",
    ),
    click.option(
        "--limit", type=click.IntRange(1, 100_000), help="Samples per task (default: all)."
    ),
    click.option(
        "--concurrency",
        type=click.IntRange(1, 1024),
        help="Requests in flight (default: the profile's lm_eval or gsm8k band, else 8).",
    ),
    click.option(
        "--num-fewshot", type=click.IntRange(0, 64), help="Few-shot examples (default: the task's)."
    ),
    click.option(
        "--mode",
        type=click.Choice(["completions", "chat"]),
        help="Prompt through /v1/completions (default; loglikelihood tasks need it) or the "
        "chat template.",
    ),
    click.option(
        "--include-path",
        type=DIR,
        multiple=True,
        help="A folder of your own task YAMLs (lm-eval's --include_path); repeatable.",
    ),
    click.option(
        "--tokenizer",
        type=DIR,
        help="The served model's tokenizer folder, for loglikelihood tasks (default: the live "
        "profile's model directory).",
    ),
    click.option(
        "--band",
        "task_bands",
        multiple=True,
        callback=_bands,
        metavar="TASK[:METRIC[,FILTER]]=LOW",
        help="Judge TASK: the 95% lower bound of METRIC (default acc, filter none) must reach "
        "LOW; overrides the profile's band; repeatable.",
    ),
    click.option("--against", metavar="RUN_ID", help="Pair with this lm-eval run, per sample."),
    click.option(
        "--margin",
        type=click.FloatRange(0.0, 1.0),
        help="With --against: the accuracy a task may give up (default 0.02).",
    ),
    click.option("--resume", metavar="RUN_ID", help="Finish a run that crashed."),
)


def _stored(raw: dict[str, Any]) -> dict[str, Any]:
    """The options as the run stores them: plain JSON, paths absolute (a resume may run
    elsewhere), nothing empty."""
    options = dict(raw)
    options["include_path"] = [str(path) for path in options.get("include_path") or ()]
    if isinstance(options.get("tokenizer"), Path):
        options["tokenizer"] = str(options["tokenizer"])
    return {key: value for key, value in options.items() if value not in (None, [], ())}


def lm_eval_command(shared: GateCli) -> click.Command:
    """The `lm-eval` gate command, built on the options and helpers every gate shares."""

    def command(
        resume: str | None,
        url: str | None,
        model: str | None,
        api_key_file: Path | None,
        bands: str | None,
        task_bands: list[str],
        **raw: Any,
    ) -> None:
        """Any lm-evaluation-harness task, run by lm-eval against the serve; every sample
        stored; each banded task judged on its 95% lower bound.

        Needs the lmeval extra: pip install 'paroctl[lmeval]'.
        """
        from paroctl.gates.lmeval import installed

        installed()  # before anything connects: without lm-eval nothing can be measured
        # `--bands PROFILE` (every gate's) judges an endpoint; `--band` (this gate's) one task.
        endpoint = shared.endpoint(url, model, api_key_file, bands)
        key = shared.live_key(endpoint, api_key_file)
        options = _stored({**raw, "bands": task_bands})
        shared.report(shared.run_one(NAME, options, resume, endpoint, key))

    decorated: Callable[..., Any] = command
    for option in reversed(OPTIONS):
        decorated = option(decorated)
    return click.command(NAME)(shared.target_options(decorated))
