"""`paroctl gate NAME|suite`: gates against the live serve; exit 0 pass, 1 failed, 2 cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from paroctl.errors import GateFailed, ParoctlError, RuntimeFailure

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

    from paroctl.gates import GateResult

GATE_NAMES = ("sanity", "gsm8k", "decode", "prefill", "concurrency", "greedy", "kld", "suite")


def _ints(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from exc


class _Bar:
    """Gate progress as a rich bar with ETA on stderr."""

    def __init__(self, progress: RichProgress) -> None:
        self._progress = progress
        self._task: Any = None

    def start(self, description: str, total: int, completed: int = 0) -> None:
        """Begin a phase."""
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(description, total=total, completed=completed)

    def advance(self, steps: int = 1) -> None:
        """Mark steps done."""
        if self._task is not None:
            self._progress.advance(self._task, steps)


def _run_one(name: str, options: dict[str, Any], resume: str | None) -> GateResult:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from paroctl.gates import run_gate

    console = Console(stderr=True)
    if not console.is_terminal:
        # A log file or a test runner gets the result lines only, not bar redraws.
        return run_gate(name, options, resume=resume)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as progress:
        return run_gate(name, options, progress=_Bar(progress), resume=resume)


def _line(result: GateResult) -> str:
    return f"{result.gate}: {result.status.upper()} — {result.message} (run {result.run_id})"


@click.command("gate")
@click.argument("name", type=click.Choice(GATE_NAMES))
@click.option("--limit", type=int, help="gsm8k: questions to ask (default: the profile's band).")
@click.option("--concurrency", type=int, help="gsm8k: requests in flight (default 8 or the band).")
@click.option(
    "--data",
    type=click.Path(path_type=Path),
    help="gsm8k: a GSM8K directory (test.jsonl, train.jsonl) or test file.",
)
@click.option(
    "--corpus",
    type=click.Path(path_type=Path),
    help="WikiText-2 wiki.test.raw (or its directory) for the timing gates' prompts; "
    "kld: wikitext2 (default) or a text FILE.",
)
@click.option("--mode", type=click.Choice(["chat", "completions"]), help="gsm8k: prompt mode.")
@click.option(
    "--metric",
    type=click.Choice(["strict-match", "flexible-extract"]),
    help="gsm8k: judged metric.",
)
@click.option("--seed", type=int, help="Seed of the corpus slices (default 0).")
@click.option("--contexts", help="decode: context lengths, e.g. 25,8192,32768.")
@click.option("--lengths", help="prefill: prompt lengths, e.g. 2048,8192,16384.")
@click.option("--streams", help="concurrency: stream counts, e.g. 1,2,4,8,16.")
@click.option("--reps", type=int, help="decode/prefill: repetitions per point.")
@click.option("--gen", type=int, help="decode/concurrency/greedy: tokens to generate.")
@click.option("--temperature", type=float, help="decode: sampling temperature (default greedy).")
@click.option("--against", help="greedy: a run id of another build to compare hashes with.")
@click.option("--reference", help="kld: the reference profile (default: gates.kld.reference).")
@click.option("--chunks", type=int, help="kld: corpus chunks to score (default 96).")
@click.option("--chunk-tokens", type=int, help="kld: tokens per chunk (default 128).")
@click.option("--top-k", type=int, help="kld: prompt logprobs per position (default: the band's).")
@click.option("--resume", "resume", metavar="RUN_ID", help="Finish a run that crashed.")
def gate(name: str, resume: str | None, **raw: Any) -> None:
    """Run a gate (or the suite) against the live serve and record the result."""
    options = dict(raw)
    for key, parse in (("contexts", _ints), ("lengths", _ints), ("streams", _ints)):
        options[key] = parse(options[key])
    for key in ("data", "corpus"):
        if options[key] is not None:
            options[key] = str(options[key])
    if name != "suite":
        _report(_run_one(name, options, resume))
        return
    if resume:
        raise click.UsageError("--resume takes one gate's run id, not the suite")
    members = _suite_members()
    failed: list[str] = []
    for member in members:
        try:
            result = _run_one(member, options, None)
        except ParoctlError as exc:
            raise RuntimeFailure(f"suite stopped at {member}: {exc.message}") from exc
        click.echo(_line(result))
        if result.status == "error":
            raise RuntimeFailure(f"suite stopped at {member}: it could not run")
        if result.failed:
            failed.append(member)
    if failed:
        raise GateFailed(f"suite: {', '.join(failed)} outside the band")
    click.echo(f"suite: PASS ({len(members)} gates)")


def _suite_members() -> tuple[str, ...]:
    """The live profile's suite list (gates.suite), else the default order."""
    from paroctl import profiles, state
    from paroctl.gates import SUITE

    live = state.read_live()
    if not live:
        return SUITE
    try:
        return profiles.load(live["profile"]).body.gates.suite
    except ParoctlError:
        return SUITE


def _report(result: GateResult) -> None:
    click.echo(_line(result))
    if result.status == "fail":
        raise GateFailed(f"{result.gate} failed: {result.message}")
    if result.status == "error":
        raise RuntimeFailure(f"{result.gate} could not run: {result.message}")
