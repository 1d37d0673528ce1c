"""`paroctl unit render|diff|install`."""

from __future__ import annotations

from pathlib import Path

import click

FORMAT_CHOICES = click.Choice(["service", "quadlet", "env", "all"])


@click.group(name="unit")
def unit() -> None:
    """Render and install systemd units, Quadlet files and env-forwarding lists."""


@unit.command(name="render")
@click.argument("name")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the files into this directory instead of printing them.",
)
@click.option("--format", "fmt", type=FORMAT_CHOICES, default="all", show_default=True)
def unit_render(name: str, out: Path | None, fmt: str) -> None:
    """Render a profile's artefacts to stdout or to --out (a CPU profile as this machine would
    serve it: `unit install` writes exactly these)."""
    from paroctl import state
    from paroctl.profile import profiles
    from paroctl.serve import render as render_mod
    from paroctl.serve.plan import plan_for

    plan = plan_for(profiles.load(name))
    artefacts = (
        render_mod.artefacts(plan) if fmt == "all" else [render_mod.artefact(plan, fmt)]  # type: ignore[arg-type]
    )
    for artefact in artefacts:
        if out is None:
            click.echo(f"# --- {artefact.filename}")
            click.echo(artefact.content, nl=False)
        else:
            state.atomic_write(out / artefact.filename, artefact.content)
            click.echo(str(out / artefact.filename))


@unit.command(name="diff")
@click.argument("name")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["service", "quadlet"]),
    default="service",
    show_default=True,
)
def unit_diff(name: str, fmt: str) -> None:
    """Show how the installed files differ from what the profile renders now; exit 1 when they
    differ or are missing (as diff does), so cron and CI can catch drift."""
    from paroctl.profile import profiles
    from paroctl.serve import render
    from paroctl.serve.plan import plan_for
    from paroctl.serve.runtime import systemd

    install = systemd.plan_install(plan_for(profiles.load(name)), fmt, reload=False)  # type: ignore[arg-type]
    text = render.installed_diff((path, content) for path, content, _mode in install.files)
    if not text:
        click.echo(f"{name}: installed files match the profile")
        return
    click.echo(text, nl=not text.endswith("\n"))
    raise click.exceptions.Exit(1)


@unit.command(name="install")
@click.argument("name")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["service", "quadlet"]),
    default="service",
    show_default=True,
)
@click.option("--dry-run", is_flag=True, help="Print the files and commands; change nothing.")
@click.option("--no-reload", is_flag=True, help="Write the files but skip systemctl daemon-reload.")
def unit_install(name: str, fmt: str, dry_run: bool, no_reload: bool) -> None:
    """Write a profile's unit and env file, then daemon-reload (after checking its secrets file)."""
    from paroctl.errors import StateError
    from paroctl.profile import profiles, secrets
    from paroctl.profile.profiles import expand
    from paroctl.serve.plan import plan_for
    from paroctl.serve.runtime import systemd

    prof = profiles.load(name)
    plan = systemd.plan_install(plan_for(prof), fmt, reload=not no_reload)  # type: ignore[arg-type]
    container = prof.body.container
    if container.secrets_env_file:
        problems = secrets.file_problems(expand(container.secrets_env_file), container.secret_names)
        if problems:
            raise StateError(
                "the secrets file is not ready (systemd would start the serve without them):\n"
                + "\n".join(f"  {p}" for p in problems)
            )
    for line in plan.describe():
        click.echo(line)
    if not dry_run:
        systemd.install_apply(plan)
        click.echo(f"installed {prof.unit_name}")
