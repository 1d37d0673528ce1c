"""The one adapter for running subprocesses: argv lists only, captured output, timeouts."""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import selectors
import shlex
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
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


# pip and tqdm redraw their progress in place after a bare CR: each redraw is a line too.
_LINE_BREAK = re.compile(r"[\r\n]")


class _Lines:
    """Turns a child's byte chunks into lines (at LF or CR), keeping the last _TAIL_CHARS."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._kept: deque[str] = deque()
        self._kept_chars = 0

    def feed(self, chunk: bytes, final: bool = False) -> None:
        """Split what arrived into lines; a trailing partial line waits for more unless final."""
        *lines, self._pending = _LINE_BREAK.split(
            self._pending + self._decoder.decode(chunk, final)
        )
        if final:
            lines.append(self._pending)
            self._pending = ""
        for line in lines:
            if line.strip():
                self._keep(line.rstrip())
                self._on_line(line.rstrip())

    def _keep(self, line: str) -> None:
        self._kept.append(line)
        self._kept_chars += len(line) + 1
        # Drop the oldest line only while the rest still fill the tail: _tail() then cuts exactly.
        while self._kept_chars - len(self._kept[0]) - 1 >= _TAIL_CHARS:
            self._kept_chars -= len(self._kept.popleft()) + 1

    def tail(self) -> str:
        """The last lines seen, shortened like proc.run's error detail."""
        return _tail("\n".join(self._kept).strip() or "(no output)")


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    # The child leads its own process group: pip's build backends and the like go with it.
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    if child.stdout is not None:
        child.stdout.close()


def stream(
    argv: Sequence[str | Path],
    on_line: Callable[[str], None],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run argv, calling on_line for each non-empty line of its merged stdout+stderr as it comes
    (a carriage return ends a line too); raise RuntimeFailure with its last output on failure."""
    args = [str(part) for part in argv]
    if not args:
        raise RuntimeFailure("internal error: empty command line")
    try:
        child = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise RuntimeFailure(f"command not found: {args[0]} (running `{describe(args)}`)") from exc
    lines = _Lines(on_line)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        finished = _pump(child, lines, deadline)
    finally:
        _kill_group(child)  # a no-op after a clean exit; on any error (Ctrl-C too) the child dies
    if not finished:
        raise RuntimeFailure(
            f"`{describe(args)}` did not finish within {timeout:g} s; its last output:\n"
            f"{lines.tail()}"
        )
    if child.returncode != 0:
        raise RuntimeFailure(
            f"`{describe(args)}` failed with exit code {child.returncode}:\n{lines.tail()}"
        )


def _pump(child: subprocess.Popen[bytes], lines: _Lines, deadline: float | None) -> bool:
    """Feed the child's output to lines until it closes; False when the deadline came first."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if not selector.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            lines.feed(chunk)
    lines.feed(b"", final=True)
    # End of output: the child is exiting; it still has to do so within the deadline.
    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    try:
        child.wait(left)
    except subprocess.TimeoutExpired:
        return False
    return True
