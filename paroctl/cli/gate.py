"""`paroctl gate NAME|suite`: gates against the live serve; exit 0 pass, 1 failed, 2 cannot run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from paroctl.errors import GateFailed, ParoctlError, RuntimeFailure

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

    from paroctl.gates import GateResult

GATE_NAMES = ("sanity", "gsm8k", "decode", "prefill", "concurrency", "greedy", "kld", "suite")
# The profile's own bounds (profiles.MAX_TOKENS, the stream cap), not imported: --help stays light.
MAX_TOKENS = 2**24
MAX_STREAMS = 1024


class IntList(click.ParamType[list[int]]):
    """Comma-separated integers, each in 1..most: `--contexts 0` fails here, before connecting."""

    name = "N[,N...]"

    def __init__(self, most: int) -> None:
        self.most = most

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> list[int]:
        """Parse and range-check the list; a usage error (exit 2) names the bad part."""
        if isinstance(value, list):
            return value
        text = str(value)
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts or not all(part.isascii() and part.isdigit() for part in parts):
            self.fail(f"expected comma-separated integers, got {text[:40]!r}", param, ctx)
        numbers = [int(part) for part in parts if len(part) < 12] if parts else []
        bad = [n for n in numbers if not 1 <= n <= self.most]
        if bad or len(numbers) < len(parts):
            shown = bad[0] if bad else "a number that long"
            self.fail(f"{shown} is not in the range 1<=x<={self.most}", param, ctx)
        return numbers


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    # FloatRange lets NaN through (every comparison with it is false).
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"expected a finite number, got {value}")
    return value


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
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    help="gsm8k: questions to ask (default: the profile's band).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, MAX_STREAMS),
    help="gsm8k: requests in flight (default 8 or the band).",
)
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
@click.option(
    "--seed", type=click.IntRange(0, 2**32 - 1), help="Seed of the corpus slices (default 0)."
)
@click.option(
    "--contexts", type=IntList(MAX_TOKENS), help="decode: context lengths, e.g. 25,8192,32768."
)
@click.option(
    "--lengths", type=IntList(MAX_TOKENS), help="prefill: prompt lengths, e.g. 2048,8192,16384."
)
@click.option(
    "--streams", type=IntList(MAX_STREAMS), help="concurrency: stream counts, e.g. 1,2,4,8,16."
)
@click.option(
    "--partial",
    is_flag=True,
    default=None,
    help="decode/prefill/concurrency: judge only the band points measured (else a subset of the "
    "band cannot pass).",
)
@click.option("--reps", type=click.IntRange(1, 1000), help="decode/prefill: repetitions per point.")
@click.option(
    "--gen", type=click.IntRange(1, 65536), help="decode/concurrency/greedy: tokens to generate."
)
@click.option(
    "--temperature",
    type=click.FloatRange(0.0, 10.0),
    callback=_finite,
    help="decode: sampling temperature (default greedy).",
)
@click.option("--against", help="greedy: a run id of another build to compare hashes with.")
@click.option("--reference", help="kld: the reference profile (default: gates.kld.reference).")
@click.option(
    "--chunks", type=click.IntRange(1, 100_000), help="kld: corpus chunks to score (default 96)."
)
@click.option(
    "--chunk-tokens",
    type=click.IntRange(2, MAX_TOKENS),
    help="kld: tokens per chunk (default 128).",
)
@click.option(
    "--top-k",
    type=click.IntRange(1, 2**20),
    help="kld: prompt logprobs per position (default: the band's).",
)
@click.option("--resume", "resume", metavar="RUN_ID", help="Finish a run that crashed.")
def gate(name: str, resume: str | None, **raw: Any) -> None:
    """Run a gate (or the suite) against the live serve and record the result."""
    options = dict(raw)
    for key in ("data", "corpus"):
        if options[key] is not None:
            options[key] = str(options[key])
    if name != "suite":
        _report(_run_one(name, options, resume))
        return
    if resume:
        raise click.UsageError("--resume takes one gate's run id, not the suite")
    members = _suite_members()
    if not members:
        raise RuntimeFailure("suite: no gates to run (gates.suite is empty); nothing measured")
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
