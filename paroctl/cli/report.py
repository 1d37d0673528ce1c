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
    """Write report.md + plots (decode, prefill, concurrency, GSM8K) from the latest runs."""
    from paroctl.errors import UsageError
    from paroctl.store.report import write_report
    from paroctl.store.results import open_store

    try:
        import matplotlib  # noqa: F401  (the plots; an optional extra of the README's install)
    except ImportError as exc:
        raise UsageError(
            "paroctl report draws its plots with matplotlib, which is not installed; "
            "pip install 'paroctl[report]'"
        ) from exc

    with open_store() as store:
        path = write_report(store, out_dir, list(profiles) or None)
    click.echo(f"wrote {path}")
    for png in sorted(out_dir.glob("*.png")):
        click.echo(f"wrote {png}")
