"""Decode: ms per step and tokens/s at several context lengths, from seeded corpus prompts.

Every repetition of a context length sends the same prompt (a fixed WikiText-2 slice chosen by
--seed), greedy unless --temperature is given (then seeded per request): the field log's trap was a
bench that sampled at 0.7 from a prompt cut at a time-seeded offset, so no two runs were comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed
from paroctl.gates import data
from paroctl.gates.base import GateContext, Outcome
from paroctl.gates.prompts import corpus_ids, seeded
from paroctl.gates.timing import (
    capped,
    judge,
    pooled_acceptance,
    spread_of,
    stream_record,
    timed_stream,
    warm_up,
    with_note,
)

CONTEXTS = (25, 8192, 32768)
GEN = 128
REPS = 3


def run(ctx: GateContext) -> Outcome:
    """Measure each context length `reps` times, single stream; judge median ms/step by the band."""
    band = ctx.profile.body.gates.decode if ctx.profile else None
    gen = int(ctx.opt("gen", GEN))
    reps = int(ctx.opt("reps", REPS))
    seed = int(ctx.opt("seed", 0))
    temperature = float(ctx.opt("temperature", 0.0))
    contexts = capped(ctx.opt("contexts", CONTEXTS), ctx.max_len() - gen - 1)
    corpus = data.load_corpus(Path(ctx.options["corpus"]) if ctx.options.get("corpus") else None)
    ctx.progress.start("decode", len(contexts) * reps)
    warm_up(ctx)
    points: dict[str, Any] = {}
    for length in contexts:
        prompt = corpus_ids(ctx, corpus, seeded(seed, "decode", length), length)
        records = []
        for rep in range(reps):
            key = f"ctx{length}-r{rep}"
            try:
                reply, before, after = timed_stream(
                    ctx, prompt, gen, temperature, seed=seed + rep if temperature > 0 else None
                )
                record = {"ctx": length, "rep": rep, **stream_record(reply, before, after)}
                ctx.record(key, "ok", record)
                records.append(record)
            except RequestFailed as exc:
                ctx.record(key, "error", {"ctx": length, "rep": rep, "error": exc.message})
            ctx.progress.advance()
        points[str(length)] = {
            "ms_per_step": spread_of(records, "ms_per_step"),
            "decode_tok_s": spread_of(records, "decode_tok_s"),
            "ttft_ms": spread_of(records, "ttft_ms"),
            "tpot_ms": spread_of(records, "tpot_ms"),
            "itl_p50_ms": spread_of(records, "itl_p50_ms"),
            "acceptance": pooled_acceptance(records),
        }
    limits = band.max_ms_per_step if band else None
    partial = bool(ctx.opt("partial", False))
    return _verdict(points, limits, gen, reps, temperature, partial)


def _verdict(
    points: dict[str, Any],
    limits: dict[int, float] | None,
    gen: int,
    reps: int,
    temp: float,
    partial: bool = False,
) -> Outcome:
    summary: dict[str, Any] = {"gen": gen, "reps": reps, "temperature": temp, "points": points}
    measured = {int(k): v["ms_per_step"]["median"] for k, v in points.items() if v["ms_per_step"]}
    parts = [f"{ms:.2f} ms/step @ {length}" for length, ms in sorted(measured.items())]
    headline = measured[min(measured)] if measured else None
    verdict = judge(measured, len(points), limits, lambda ms, limit: ms > limit, partial)
    if limits:
        summary["unmeasured_band_points"] = list(verdict.unmeasured)
    text = with_note(", ".join(parts), verdict.note)
    return Outcome(verdict.status, "ms/step", headline, summary, text)
