"""`paroctl`: the root group; subcommand modules load lazily so --help stays light."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from paroctl import __version__

# noun -> "module:attribute"; modules import only when their noun is used.
SUBCOMMANDS = {
    "profile": "paroctl.cli.profile:profile",
    "unit": "paroctl.cli.unit:unit",
    "demo": "paroctl.cli.demo:demo",
    "switch": "paroctl.cli.serve:switch_cmd",
    "status": "paroctl.cli.serve:status_cmd",
    "stop": "paroctl.cli.serve:stop_cmd",
    "logs": "paroctl.cli.serve:logs_cmd",
    "gate": "paroctl.cli.gate:gate",
    "results": "paroctl.cli.results:results",
    "report": "paroctl.cli.report:report",
    "image": "paroctl.cli.image:image",
}


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when it is invoked or listed in help."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        from paroctl.errors import EXIT_INTERRUPTED, ParoctlError

        try:
            return super().invoke(ctx)
        except ParoctlError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP where a command maps them
            click.echo(f"\ninterrupted{f' ({exc})' if str(exc) else ''}", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="paroctl")
def cli() -> None:
    """Run quantized LLM variants on one inference box: profiles, units, switch, gates."""


if __name__ == "__main__":
    cli()
