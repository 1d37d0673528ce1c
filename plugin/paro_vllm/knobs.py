"""The plugin's knobs: the registry (knobs.yaml, package data) and the env, read in ONE place.

Only PARO_* variables are read, only here. An empty value is an error (`VAR=` is set-but-empty,
not unset: seed log 2026-08-31 "MEASUREMENT TRAP"), as is an unregistered PARO_* name (a typo
would otherwise silently run the default).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

PREFIX = "PARO_"


class KnobError(ValueError):
    """A PARO_* variable that is unregistered, empty or outside its allowed values."""


@dataclass(frozen=True)
class Knob:
    """One registry entry."""

    name: str
    type: str
    default: str
    values: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    graph: bool = False
    doc: str = ""

    def problem(self, value: str) -> str | None:
        """Why value is not allowed for this knob, or None."""
        if value == "":
            return "empty value (VAR= is set-but-empty, not unset); unset it for the default"
        if self.type == "bool" and value not in ("0", "1"):
            return f"expected '0' or '1', got {value!r}"
        if self.type == "enum" and value not in self.values:
            return f"expected one of {', '.join(self.values)}; got {value!r}"
        if self.type == "int":
            if not re.fullmatch(r"-?\d+", value):
                return f"expected an integer, got {value!r}"
            n = int(value)
            if (self.min is not None and n < self.min) or (self.max is not None and n > self.max):
                return f"expected an integer in [{self.min}, {self.max}], got {n}"
        return None


def _knob(name: str, raw: Mapping[str, Any]) -> Knob:
    return Knob(
        name=name,
        type=str(raw["type"]),
        default=str(raw["default"]),
        values=tuple(str(v) for v in raw.get("values", ())),
        min=raw.get("min"),
        max=raw.get("max"),
        graph=bool(raw.get("graph", False)),
        doc=str(raw.get("doc", "")),
    )


@functools.cache
def registry() -> dict[str, Knob]:
    """The knob registry shipped in the package (knobs.yaml), parsed once per process."""
    import yaml

    text = resources.files("paro_vllm").joinpath("knobs.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    return {name: _knob(name, raw) for name, raw in data["knobs"].items()}


def read_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every registered knob's value (env or default); KnobError lists all problems.

    `environ` defaults to the process environment; tests pass a mapping instead.
    """
    env = os.environ if environ is None else environ
    knobs = registry()
    problems = [
        f"{name}: not a registered paro-vllm knob (see paro_vllm/knobs.yaml)"
        for name in sorted(env)
        if name.startswith(PREFIX) and name not in knobs
    ]
    values: dict[str, str] = {}
    for name, knob in knobs.items():
        value = env.get(name, knob.default)
        why = knob.problem(value)
        if why:
            problems.append(f"{name}: {why}")
        values[name] = value
    if problems:
        raise KnobError("paro-vllm: bad knob environment:\n  " + "\n  ".join(problems))
    return values
