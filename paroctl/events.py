"""Progress events from the switch and its recovery to whatever displays them (the CLI's sink),
and gate progress as lines at a bounded rate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Progress for the display: a boot phase reached, a protocol step, a changed count (a
    terminal shows phases and counts on its one live line; a log gets one line per change), or
    a warning."""

    kind: str  # "step" | "phase" | "progress" | "warn"
    message: str
    elapsed_s: float = 0.0


EventSink = Callable[[Event], None]


def _duration(seconds: float) -> str:
    """12 s, 3m 05s, 1h 02m: short enough for a log line."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


class ProgressLines:
    """Gate progress as text lines for a display without a live line (systemd's journal, CI, a
    pipe) or for the switch's event sink: one line when a phase starts, then at most one per
    interval_s, and one when it completes; each with done/total, elapsed time and ETA."""

    def __init__(
        self,
        emit: Callable[[str], None],
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self._emit = emit
        self._say = say or emit
        self._interval_s = interval_s
        self._clock = clock
        self._description = ""
        self._total = self._done = self._resumed = 0
        self._started = self._shown = 0.0

    def start(self, description: str, total: int, completed: int = 0) -> None:
        """Begin a phase of `total` steps, `completed` of them done before (a resume)."""
        self._description, self._total = description, total
        self._done = self._resumed = completed
        self._started = self._shown = self._clock()
        self._emit(self.line())

    def advance(self, steps: int = 1) -> None:
        """Mark steps done; say so when the interval has passed or the phase is complete."""
        self._done += steps
        now = self._clock()
        if self._done >= self._total or now - self._shown >= self._interval_s:
            self._shown = now
            self._emit(self.line())

    def note(self, message: str) -> None:
        """Say something the operator must know now."""
        self._say(message)

    def line(self) -> str:
        """`gsm8k: 40/200 (20%), 1m 12s elapsed, ETA 4m 48s`."""
        elapsed = self._clock() - self._started
        text = f"{self._description}: {self._done}/{self._total}"
        if self._total:
            text += f" ({self._done / self._total:.0%})"
        text += f", {_duration(elapsed)} elapsed"
        fresh = self._done - self._resumed  # a resume's earlier items took no time in this run
        if fresh > 0 and self._done < self._total:
            text += f", ETA {_duration(elapsed / fresh * (self._total - self._done))}"
        return text
