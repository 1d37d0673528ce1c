"""`paroctl repair`: move damaged state files (live pointer, journal, results store) aside."""

from __future__ import annotations

import click


@click.command(name="repair")
@click.option("--dry-run", is_flag=True, help="Say what is damaged; move nothing.")
def repair(dry_run: bool) -> None:
    """Check PAROCTL_HOME's state files; move each damaged one aside (kept, with a timestamp)."""
    from paroctl import repair as repair_mod

    for line in repair_mod.repair(dry_run=dry_run):
        click.echo(line)
