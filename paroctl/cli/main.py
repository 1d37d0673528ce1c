"""`paroctl`: the root group; subcommand modules load lazily so --help stays light."""

from __future__ import annotations

import importlib
import os
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
    "adopt": "paroctl.cli.serve:adopt_cmd",
    "logs": "paroctl.cli.serve:logs_cmd",
    "gate": "paroctl.cli.gate:gate",
    "results": "paroctl.cli.results:results",
    "report": "paroctl.cli.report:report",
    "repair": "paroctl.cli.repair:repair",
    "image": "paroctl.cli.image:image",
    "k8s": "paroctl.cli.k8s:k8s",
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
        """Run the subcommand under the one exit-code contract: 0 ok, 1 gate failed, 2 cannot
        run (a crash included), 130 interrupted."""
        from paroctl.errors import EXIT_INTERRUPTED, ParoctlError

        try:
            return super().invoke(ctx)
        except ParoctlError as exc:
            click.echo(f"Error: {exc.message}", err=True)
            sys.exit(exc.exit_code)
        except (click.ClickException, click.exceptions.Exit):
            raise  # usage errors (2) and --help/--version exits keep click's own handling
        except BrokenPipeError:
            # The reader went away (`paroctl profile list | head`): not a crash, nothing to log.
            # stdout goes to /dev/null so the interpreter's final flush cannot raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)
        except (KeyboardInterrupt, click.Abort) as exc:
            # Ctrl-C, or SIGTERM/SIGHUP where a command maps them (the switch). Context managers
            # and finally blocks have run on the way here (locks, journals, the rollback).
            why = f" ({exc})" if str(exc) else ""
            click.echo(f"Interrupted{why}.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except OSError as exc:
            # A file or directory the command needed (a bad --out, a full disk, a home that is
            # a file): the path and the system's reason, not a crash report. Without a path
            # (a socket, a timeout) it is unexpected: the crash report below.
            sys.exit(_crashed(exc) if exc.filename is None else _os_error(exc))
        except Exception as exc:
            sys.exit(_crashed(exc))


EXIT_BROKEN_PIPE = 2  # the output could not be delivered: "could not run", quietly


def _os_error(exc: OSError) -> int:
    """One line naming the path(s) and the system's reason; exit 2 (cannot run)."""
    import traceback

    from paroctl import state
    from paroctl.errors import EXIT_CANNOT_RUN

    if state.debug():
        click.echo(traceback.format_exc(), err=True, nl=False)
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    click.echo(f"Error: {paths}: {exc.strerror or exc}", err=True)
    return EXIT_CANNOT_RUN


def _crashed(exc: Exception) -> int:
    """Report an unexpected exception in one line, its traceback logged; exit 2 (cannot run)."""
    import traceback

    from paroctl import state
    from paroctl.errors import EXIT_CANNOT_RUN
    from paroctl.profile.checks import clip

    text = traceback.format_exc()
    if state.debug():
        click.echo(text, err=True, nl=False)
    where = state.write_crash_log(text)
    logged = f"traceback in {where}" if where else "the traceback could not be written"
    detail = clip(" ".join(str(exc).split()), 200)  # one line, whatever the exception holds
    click.echo(
        f"Error: paroctl crashed: {type(exc).__name__}: {detail} ({logged}; "
        "PAROCTL_DEBUG=1 prints it). Please report it.",
        err=True,
    )
    return EXIT_CANNOT_RUN


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="paroctl")
def cli() -> None:
    """Run quantized LLM variants on one inference box: profiles, units, switch, gates."""


if __name__ == "__main__":
    cli()
