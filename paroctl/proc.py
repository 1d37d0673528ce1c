"""The one adapter for running subprocesses: argv lists only, captured output, timeouts."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from paroctl.errors import RuntimeFailure

# How much of a failed command's output goes into the error message: enough to see the cause
# (pip and python put it last) without flooding the terminal.
_TAIL_CHARS = 2000


@dataclass(frozen=True)
class Completed:
    """The outcome of one finished command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def describe(argv: Sequence[str | Path]) -> str:
    """The exact shell-quoted command line for argv, for --dry-run output and error messages."""
    return shlex.join(str(part) for part in argv)


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL_CHARS else "..." + text[-_TAIL_CHARS:]


def run(
    argv: Sequence[str | Path],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    input_text: str | None = None,
) -> Completed:
    """Run argv to completion, capturing output; raise RuntimeFailure naming it on failure."""
    args = [str(part) for part in argv]
    if not args:
        raise RuntimeFailure("internal error: empty command line")
    try:
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            input=input_text,
            # Without an explicit stdin a child would inherit the operator's terminal and could hang
            # waiting on it (pip prompts, for one).
            stdin=None if input_text is not None else subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        raise RuntimeFailure(f"command not found: {args[0]} (running `{describe(args)}`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise RuntimeFailure(f"`{describe(args)}` did not finish within {timeout:g} s") from exc
    result = Completed(tuple(args), done.returncode, done.stdout or "", done.stderr or "")
    if check and result.returncode != 0:
        detail = _tail((result.stderr.strip() or result.stdout.strip()) or "(no output)")
        raise RuntimeFailure(
            f"`{describe(args)}` failed with exit code {result.returncode}:\n{detail}"
        )
    return result
