"""Progress events from the switch and its recovery to whatever displays them (the CLI's sink)."""

from __future__ import annotations

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
