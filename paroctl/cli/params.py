"""Click parameter types more than one command group needs."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.FloatRange):
    """click.FloatRange that also refuses nan and +-inf: FloatRange lets nan through (every
    comparison with it is false), and `switch --timeout nan` then waited forever."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number, or a usage error (exit 2) naming the option."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"expected a finite number, got {value!r}", param, ctx)
        return number
