"""`python -m paroctl`: the same CLI as the `paroctl` script."""

from paroctl.cli.main import cli

if __name__ == "__main__":
    cli(prog_name="paroctl")
