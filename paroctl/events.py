"""Progress events from the switch and its recovery to whatever displays them (the CLI's sink)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """Progress for the display: a boot phase reached, a protocol step, or a warning."""

    kind: str  # "step" | "phase" | "warn"
    message: str
    elapsed_s: float = 0.0


EventSink = Callable[[Event], None]
