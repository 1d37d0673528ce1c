"""`paroctl profile list|show|validate`."""

from __future__ import annotations

import click


@click.group(name="profile")
def profile() -> None:
    """Inspect and validate served-variant profiles."""


@profile.command(name="list")
def profile_list() -> None:
    """List the profiles with their served names and runtime."""
    from paroctl.errors import ProfileError
    from paroctl.profile import profiles

    names = profiles.list_names()
    width = max((len(n) for n in names), default=4)
    for name in names:
        try:
            prof = profiles.load(name)
        except ProfileError:
            click.echo(f"{name:<{width}}  INVALID (run `paroctl profile validate {name}`)")
            continue
        body = prof.body
        where = (
            body.runtime.kind
            if body.runtime.engine == "none"
            else (f"{body.runtime.kind}/{body.runtime.engine}")
        )
        click.echo(
            f"{name:<{width}}  {body.box.name:<6} {where:<15} {', '.join(body.model.served_names)}"
        )


@profile.command(name="show")
@click.argument("name")
def profile_show(name: str) -> None:
    """Print a profile fully resolved: inheritance applied, every knob, derived paths."""
    import yaml

    from paroctl.profile import profiles, secrets
    from paroctl.serve.plan import ServePlan

    prof = profiles.load(name)
    where = ServePlan.of(prof).layout
    doc = {
        "name": prof.name,
        "file": str(prof.path),
        "hash": prof.hash,
        **prof.body.model_dump(mode="json", exclude={"knobs", "env"}),
        # load() refuses secrets in env; redact anyway, so no future path can print one.
        "env": secrets.redact(prof.env),
        "knobs": secrets.redact(prof.knobs),
        "derived": {
            "cache_dir": where.cache_dir,
            "env_file": where.env_file,
            "model_dir": where.model_dir,
        },
    }
    click.echo(yaml.safe_dump(doc, sort_keys=False, width=100), nl=False)


@profile.command(name="validate")
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Validate every profile.")
def profile_validate(names: tuple[str, ...], all_: bool) -> None:
    """Validate profiles completely; report every problem; exit 2 on any."""
    from paroctl.errors import ProfileError
    from paroctl.profile import profiles

    if all_ == bool(names):
        raise click.UsageError("give profile names or --all (not both)")
    problems: list[str] = []
    for name in profiles.list_names() if all_ else names:
        try:
            prof = profiles.load(name)
        except ProfileError as exc:
            problems.extend(exc.problems)
            continue
        click.echo(f"ok  {prof.name}  {prof.hash}")
    if problems:
        raise ProfileError(problems)
