"""`paroctl report`: markdown and PNG plots comparing profiles from stored gate runs."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.option("--profile", "profiles", multiple=True, help="Profiles to include (default: all).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("paroctl-report"),
    show_default=True,
    help="Directory for report.md and the plots.",
)
def report(profiles: tuple[str, ...], out_dir: Path) -> None:
    """Write report.md + plots (decode, prefill, concurrency, GSM8K, KLD) from the latest runs,
    each with its intervals and bands."""
    from paroctl.errors import ParoctlError, UsageError
    from paroctl.profile import profiles as profiles_mod
    from paroctl.profile.schema import Profile
    from paroctl.store.report import write_report
    from paroctl.store.results import open_store

    try:
        import matplotlib  # noqa: F401  (the plots)
    except ImportError as exc:
        raise UsageError(
            "paroctl report draws its plots with matplotlib, which is not importable here; it is "
            "a paroctl dependency: reinstall paroctl (`pip install -e .` in the checkout) or "
            "`pip install matplotlib`"
        ) from exc

    def bands(name: str) -> Profile | None:
        # The timing plots draw the profile's bands; a profile deleted since its runs has none.
        try:
            return profiles_mod.load(name)
        except ParoctlError:
            return None

    with open_store() as store:
        path = write_report(store, out_dir, list(profiles) or None, bands)
    click.echo(f"wrote {path}")
    for png in sorted(out_dir.glob("*.png")):
        click.echo(f"wrote {png}")
