"""The dispatch settings a `benchmarks.kernels.decode --h2 gvrows` run supports.

Reads the run's JSON (no GPU needed) and says, with the cells that decided each:

- `prologue.GIVENS_ROWS`: the records prologue's rows a program. A rows value qualifies where
  the int4 mma op on it is nowhere slower than on one program for all rows (rows 0) by more
  than NOISE; of those, the one with the lowest geometric mean time ratio to rows 0 serves, and
  only if that mean gains more than NOISE (else 0 stays: a change must pay for itself).
- `gemv_mma.MMA_BLOCKS_ALL_MIN_M` (large layers) and `MMA_BLOCKS_MIN_M` (layers of at most
  `MMA_BLOCKS_MAX_WEIGHTS` weights: o_proj): the first measured M from which the blocks prologue
  beats the records (at the chosen rows) by more than NOISE on the class's summed op time, at
  every larger measured M too (a tie keeps the records: they read a few bytes a pair, the blocks a
  dense 128 x 128 block a group, which a real serve's weight stream competes with). The threshold
  sits one past the last measured M the records won (the smallest measured M where the blocks win
  from the start); where the records win at the largest measured M, the blocks never serve
  (MMA_TILE_MAX_M + 1).

Usage: python -m benchmarks.kernels.decide_gvrows RUN.json [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.kernels.common import SHAPES

# A setting changes only on a gain past this (and a rows value that loses more than this on any
# cell is out): the spread of two same-run timings of one op in this bench, 1-3% in the runs of
# 2026-12-01..05 (docs/notebook/kernels-2026-11-29-to-12-06.md).
NOISE = 0.03
RECORDS = "int4 mma records rows {}"
BLOCKS = "int4 mma blocks prologue"


@dataclass
class Decision:
    """The settings, and per setting the evidence lines that decided it."""

    givens_rows: int
    blocks_all_min_m: int
    blocks_min_m: int
    why: dict[str, list[str]] = field(default_factory=dict)


class DecideError(ValueError):
    """The run's JSON lacks what a decision needs (named in the message)."""


def _times(rows: Iterable[Any]) -> dict[tuple[str, int, str], float]:
    out = {}
    for i, r in enumerate(rows):
        try:
            out[(str(r["shape"]), int(r["m"]), str(r["variant"]))] = float(r["us"])
        except (KeyError, TypeError, ValueError) as e:
            raise DecideError(f"h2[{i}]: not a bench row (shape, m, variant, us): {e!r}") from None
    return out


def _cells(t: Mapping[tuple[str, int, str], float], variant: str) -> list[tuple[str, int]]:
    return sorted({(s, m) for (s, m, v) in t if v == variant}, key=lambda c: (c[0], c[1]))


def _weights(shape: str) -> int:
    for name, n, k, _ in SHAPES:
        if name == shape:
            return n * k
    raise DecideError(f"shape {shape!r} is not in paro_kernels.SHAPES")


def _pick_rows(t: Mapping[tuple[str, int, str], float], choices: Iterable[int],
               why: list[str]) -> int:  # fmt: skip
    base = _cells(t, RECORDS.format(0))
    if not base:
        raise DecideError(f"no {RECORDS.format(0)!r} rows: not a `--h2 gvrows` run")
    best, best_mean = 0, 1.0
    for r in choices:
        if r == 0:
            continue
        ratios = []
        for s, m in base:
            us = t.get((s, m, RECORDS.format(r)))
            if us is None:
                raise DecideError(f"{RECORDS.format(r)!r} missing at {s} M={m}")
            ratios.append((us / t[(s, m, RECORDS.format(0))], s, m))
        worst = max(ratios)
        mean = math.exp(sum(math.log(q) for q, _, _ in ratios) / len(ratios))
        verdict = "out" if worst[0] > 1 + NOISE else "qualifies"
        why.append(f"rows {r}: geomean {mean:.3f}x rows 0 over {len(ratios)} cells, worst "
                   f"{worst[0]:.3f}x at {worst[1]} M={worst[2]}: {verdict}")  # fmt: skip
        if verdict == "qualifies" and mean < best_mean:
            best, best_mean = r, mean
    if best and best_mean > 1 - NOISE:
        why.append(f"rows {best} gains {1 - best_mean:.1%}, within noise ({NOISE:.0%}): keep 0")
        return 0
    return best


def _first_blocks_m(t: Mapping[tuple[str, int, str], float], rows: int, shapes: set[str],
                    never: int, why: list[str]) -> int:  # fmt: skip
    recs = RECORDS.format(rows)
    ms = sorted({m for (s, m) in _cells(t, BLOCKS) if s in shapes})
    if not ms:
        raise DecideError(f"no {BLOCKS!r} rows on {sorted(shapes)}")
    first = never
    for m in reversed(ms):
        cells = [s for s in sorted(shapes) if (s, m, BLOCKS) in t and (s, m, recs) in t]
        if not cells:
            raise DecideError(f"no {recs!r} row beside {BLOCKS!r} at M={m} on {sorted(shapes)}")
        r_us = sum(t[(s, m, recs)] for s in cells)
        b_us = sum(t[(s, m, BLOCKS)] for s in cells)
        blocks = b_us < r_us * (1 - NOISE)
        why.append(f"M={m} {'+'.join(cells)}: records rows {rows} {r_us:.2f} us, blocks "
                   f"{b_us:.2f} us: {'blocks' if blocks else 'records'}")  # fmt: skip
        if not blocks:
            break
        first = m
    else:
        return first  # the blocks won at every measured M: from the smallest measured
    if first == never:
        return never
    return ms[ms.index(first) - 1] + 1


def decide(run: Any) -> Decision:
    """The settings a gvrows run's rows (`run["h2"]`) support (module doc: the rules)."""
    from paro_kernels.triton import gemv_mma

    never = gemv_mma.MMA_TILE_MAX_M + 1
    if not isinstance(run, dict) or not isinstance(run.get("h2"), list):
        raise DecideError("no 'h2' list: not a `benchmarks.kernels.decode --h2` run's JSON")
    t = _times(run["h2"])
    prefix = RECORDS.format("")
    rows_choices = sorted({int(v[len(prefix) :]) for (_, _, v) in t if v.startswith(prefix)})
    why: dict[str, list[str]] = {"GIVENS_ROWS": [], "MMA_BLOCKS_ALL_MIN_M": [],
                                 "MMA_BLOCKS_MIN_M": []}  # fmt: skip
    rows = _pick_rows(t, rows_choices, why["GIVENS_ROWS"])
    shapes = {s for (s, _, v) in t if v == BLOCKS}
    small = {s for s in shapes if _weights(s) <= gemv_mma.MMA_BLOCKS_MAX_WEIGHTS}
    all_min, min_m = never, never
    if shapes - small:
        all_min = _first_blocks_m(t, rows, shapes - small, never, why["MMA_BLOCKS_ALL_MIN_M"])
    if small:
        min_m = _first_blocks_m(t, rows, small, never, why["MMA_BLOCKS_MIN_M"])
    return Decision(rows, all_min, min(min_m, all_min), why)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a `benchmarks.kernels.decode --h2 gvrows` JSON")
    ap.add_argument("--json", action="store_true", help="print the decision as JSON")
    args = ap.parse_args(argv)
    try:
        with open(args.run, encoding="utf-8") as f:
            run = json.load(f)
        d = decide(run)
    except (OSError, ValueError) as e:  # JSONDecodeError and DecideError are ValueErrors
        print(f"decide_gvrows: {args.run}: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(d.__dict__, indent=1))
        return 0
    print(f"run: {run.get('device', '?')}, {run.get('command', '?')}")
    for key, value in (("GIVENS_ROWS", d.givens_rows), ("MMA_BLOCKS_ALL_MIN_M", d.blocks_all_min_m),
                       ("MMA_BLOCKS_MIN_M", d.blocks_min_m)):  # fmt: skip
        print(f"{key} = {value}")
        for line in d.why[key]:
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
