"""`paroctl gate NAME|suite`: gates against the live serve or an endpoint; exit 0/1/2.

One click command per gate, each with only its own options (range-checked by click, so a bad
value is refused before anything connects), plus the target options every gate shares.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from paroctl.cli.gate_lmeval import GateCli, lm_eval_command
from paroctl.errors import GateFailed, ParoctlError, RuntimeFailure

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

    from paroctl.gates import Endpoint, GateResult

# The profile's own bounds (profiles.MAX_TOKENS, the stream cap), not imported: --help stays light.
MAX_TOKENS = 2**24
MAX_STREAMS = 1024
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


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


def _http_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"expected an http:// or https:// address, got {value[:60]!r}")
    return value


PATH = click.Path(path_type=Path)
# Off a terminal, one progress line per this many seconds (and one per phase start and end).
LOG_INTERVAL_S = 30.0
CORPUS_HELP = "WikiText-2 wiki.test.raw (or its directory) the prompts are cut from."
# Every gate option once; each gate's command takes the subset GATE_OPTIONS names.
OPTIONS: dict[str, Decorator] = {
    "limit": click.option(
        "--limit", type=click.IntRange(1, 100_000), help="Questions to ask (default: the band's)."
    ),
    "concurrency": click.option(
        "--concurrency",
        type=click.IntRange(1, MAX_STREAMS),
        help="Requests in flight (default 8 or the band's).",
    ),
    "data": click.option(
        "--data", type=PATH, help="A GSM8K directory (test.jsonl, train.jsonl) or test file."
    ),
    "corpus": click.option("--corpus", type=PATH, help=CORPUS_HELP),
    "kld_corpus": click.option(
        "--corpus", help="wikitext2 (default) or a text FILE to score logprobs on."
    ),
    "mode": click.option(
        "--mode", type=click.Choice(["chat", "completions"]), help="Prompt mode (default chat)."
    ),
    "metric": click.option(
        "--metric",
        type=click.Choice(["strict-match", "flexible-extract"]),
        help="The judged metric (default: the band's).",
    ),
    "seed": click.option(
        "--seed", type=click.IntRange(0, 2**32 - 1), help="Seed of the corpus slices (default 0)."
    ),
    "contexts": click.option(
        "--contexts", type=IntList(MAX_TOKENS), help="Context lengths, e.g. 25,8192,32768."
    ),
    "lengths": click.option(
        "--lengths", type=IntList(MAX_TOKENS), help="Prompt lengths, e.g. 2048,8192,16384."
    ),
    "streams": click.option(
        "--streams", type=IntList(MAX_STREAMS), help="Stream counts, e.g. 1,2,4,8,16."
    ),
    "partial": click.option(
        "--partial",
        is_flag=True,
        default=None,
        help="Judge only the band points measured (else a subset of the band cannot pass).",
    ),
    "max_tokens": click.option(
        "--max-tokens",
        type=click.IntRange(1, 65536),
        help="Tokens an answer may take (default lm-eval's max_gen_toks, 256).",
    ),
    "reps": click.option("--reps", type=click.IntRange(1, 1000), help="Repetitions per point."),
    "gen": click.option("--gen", type=click.IntRange(1, 65536), help="Tokens to generate."),
    "temperature": click.option(
        "--temperature",
        type=click.FloatRange(0.0, 10.0),
        callback=_finite,
        help="Sampling temperature (default greedy).",
    ),
    "against": click.option("--against", help="A run id of another build to compare hashes with."),
    "reference": click.option(
        "--reference", help="The reference profile (default: gates.kld.reference)."
    ),
    "chunks": click.option(
        "--chunks", type=click.IntRange(1, 100_000), help="Corpus chunks to score (default 96)."
    ),
    "chunk_tokens": click.option(
        "--chunk-tokens", type=click.IntRange(2, MAX_TOKENS), help="Tokens per chunk (default 128)."
    ),
    "top_k": click.option(
        "--top-k",
        type=click.IntRange(1, 2**20),
        help="Prompt logprobs per position (default: the band's).",
    ),
}
GATE_OPTIONS: dict[str, tuple[str, ...]] = {
    "sanity": ("corpus", "seed"),
    "gsm8k": ("limit", "concurrency", "data", "mode", "metric", "max_tokens"),
    "decode": ("contexts", "gen", "reps", "temperature", "seed", "corpus", "partial"),
    "prefill": ("lengths", "reps", "seed", "corpus", "partial"),
    "concurrency": ("streams", "gen", "seed", "corpus", "partial"),
    "greedy": ("gen", "seed", "corpus", "against"),
    "kld": ("reference", "kld_corpus", "chunks", "chunk_tokens", "top_k"),
}
# The suite passes its options to every member; kld's --corpus would clash with the timing gates'.
SUITE_OPTIONS = tuple(
    dict.fromkeys(o for opts in GATE_OPTIONS.values() for o in opts if o != "kld_corpus")
)
HELP = {
    "sanity": "Known-answer chat and completion checks, and a long-context recall.",
    "gsm8k": "GSM8K 5-shot, scored as lm-eval scores it; judged on the Wilson lower bound.",
    "decode": "Decode speed (ms per step) at each context length.",
    "prefill": "Prefill throughput (tokens/s) at each prompt length.",
    "concurrency": "Aggregate decode throughput at each number of concurrent streams.",
    "greedy": "Greedy output hashes, self-consistency, and agreement with another build's run.",
    "kld": "Top-K prompt-logprob KL against a same-stack reference profile.",
}


def _target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options every gate takes: which serve to gate, and how to authenticate."""
    for decorator in reversed(
        [
            click.option(
                "--url",
                callback=_http_url,
                help="Gate this OpenAI-compatible endpoint instead of the live serve "
                "(needs --model; recorded with provenance 'external').",
            ),
            click.option("--model", help="With --url: the served model name to gate."),
            click.option(
                "--api-key-file",
                type=PATH,
                help="A file holding the API key (else PAROCTL_API_KEY), sent as a bearer token.",
            ),
            click.option(
                "--bands",
                metavar="PROFILE",
                help="With --url: judge by this profile's gate bands (else unjudged).",
            ),
        ]
    ):
        func = decorator(func)
    return func


def _endpoint(
    url: str | None, model: str | None, key_file: Path | None, bands: str | None
) -> Endpoint | None:
    from paroctl.gates import Endpoint, api_key

    if (url is None) != (model is None):
        raise click.UsageError("--url and --model go together")
    if url is None or model is None:
        if bands:
            raise click.UsageError("--bands is for --url; the live serve is judged by its profile")
        return None
    return Endpoint(url, model, api_key(key_file), bands)


def _live_key(endpoint: Endpoint | None, key_file: Path | None) -> str | None:
    """The API key for the live serve (an endpoint carries its own)."""
    from paroctl import state
    from paroctl.gates import api_key
    from paroctl.switch.record import api_key_named

    if endpoint:
        return None
    live = state.read_live()
    # Else the key the live serve's profile gives vLLM (its secrets file), as the switch sends.
    return api_key(key_file) or api_key_named(live.serve.profile if live else None)


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

    def note(self, message: str) -> None:
        """Print a line above the bar."""
        self._progress.console.print(message, markup=False, highlight=False)


def _run_one(
    name: str,
    options: dict[str, Any],
    resume: str | None,
    endpoint: Endpoint | None,
    key: str | None = None,
) -> GateResult:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from paroctl.cli.serve import interrupt_on_signals
    from paroctl.events import ProgressLines
    from paroctl.gates import run_gate
    from paroctl.switch import promote

    # On this box a KLD reference the store lacks is collected by switching; never on an endpoint.
    run = promote.run_kld if name == "kld" and endpoint is None else _bind(run_gate, name)
    console = Console(stderr=True)
    if not console.is_terminal:
        # A log (systemd, CI, a pipe) gets a progress line at a bounded rate, not bar redraws.
        lines = ProgressLines(lambda line: click.echo(line, err=True), interval_s=LOG_INTERVAL_S)
        with interrupt_on_signals():
            return run(options, progress=lines, resume=resume, endpoint=endpoint, key=key)
    with (
        interrupt_on_signals(),
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as progress,
    ):
        return run(options, progress=_Bar(progress), resume=resume, endpoint=endpoint, key=key)


def _bind(run_gate: Callable[..., GateResult], name: str) -> Callable[..., GateResult]:
    return lambda options, **kwargs: run_gate(name, options, **kwargs)


def _line(result: GateResult) -> str:
    return f"{result.gate}: {result.status.upper()} — {result.message} (run {result.run_id})"


def _options(raw: dict[str, Any]) -> dict[str, Any]:
    options = dict(raw)
    for key in ("data", "corpus"):
        if isinstance(options.get(key), Path):
            options[key] = str(options[key])
    return options


def _gate_command(name: str) -> click.Command:
    def command(
        resume: str | None,
        url: str | None,
        model: str | None,
        api_key_file: Path | None,
        bands: str | None,
        **raw: Any,
    ) -> None:
        endpoint = _endpoint(url, model, api_key_file, bands)
        key = _live_key(endpoint, api_key_file)
        _report(_run_one(name, _options(raw), resume, endpoint, key))

    command.__doc__ = HELP[name]
    decorated: Callable[..., Any] = command
    for option in reversed(GATE_OPTIONS[name]):
        decorated = OPTIONS[option](decorated)
    decorated = click.option("--resume", metavar="RUN_ID", help="Finish a run that crashed.")(
        decorated
    )
    return click.command(name)(_target_options(decorated))


@click.group("gate")
def gate() -> None:
    """Run a gate (or the suite) against the live serve or an endpoint; record the result.

    Exit 0 when it passes (or is not judged), 1 when the model is outside its band, 2 when the
    gate could not run.
    """


for _name in GATE_OPTIONS:
    gate.add_command(_gate_command(_name))


def _suite(url: str | None, model: str | None, api_key_file: Path | None, bands: str | None,
           **raw: Any) -> None:  # fmt: skip
    """The profile's gate suite (gates.suite), cheapest first; each option goes to every member."""
    endpoint = _endpoint(url, model, api_key_file, bands)
    key = _live_key(endpoint, api_key_file)
    members = _suite_members(endpoint)
    if not members:
        raise RuntimeFailure("suite: no gates to run (gates.suite is empty); nothing measured")
    options = _options(raw)
    failed: list[str] = []
    for member in members:
        mine = {k: v for k, v in options.items() if k in GATE_OPTIONS[member]}
        try:
            result = _run_one(member, mine, None, endpoint, key)
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


def _suite_command() -> click.Command:
    decorated: Callable[..., Any] = _suite
    for option in reversed(SUITE_OPTIONS):
        decorated = OPTIONS[option](decorated)
    return click.command("suite")(_target_options(decorated))


gate.add_command(_suite_command())


def _suite_members(endpoint: Endpoint | None) -> tuple[str, ...]:
    """The judging profile's suite list (gates.suite), else the default order."""
    from paroctl import state
    from paroctl.gates import SUITE
    from paroctl.profile import profiles

    live = None if endpoint else state.read_live()
    name = endpoint.bands if endpoint else (live.serve.profile if live else None)
    if not name:
        return SUITE
    try:
        return profiles.load(str(name)).body.gates.suite
    except ParoctlError:
        return SUITE


def _report(result: GateResult) -> None:
    click.echo(_line(result))
    if result.status == "fail":
        raise GateFailed(f"{result.gate} failed: {result.message}")
    if result.status == "error":
        raise RuntimeFailure(f"{result.gate} could not run: {result.message}")


gate.add_command(lm_eval_command(GateCli(_target_options, _endpoint, _live_key, _run_one, _report)))
