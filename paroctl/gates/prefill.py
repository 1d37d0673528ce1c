"""Prefill: prompt tokens/s and TTFT at several prompt lengths, every prompt unique.

Each prompt starts with a nonce naming the run and repetition: the prefix cache keys on the leading
blocks, so no prompt can be served from an earlier one (the field log's second-request trap); the
prefix-cache hit counter is read around each request to prove it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed
from paroctl.gates import data
from paroctl.gates.base import GateContext, Outcome
from paroctl.gates.prompts import corpus_ids, seeded, tokenize
from paroctl.gates.timing import (
    capped,
    judge,
    spread_of,
    stream_record,
    timed_stream,
    warm_up,
    with_note,
)

LENGTHS = (2048, 8192, 16384, 32768, 65536)
REPS = 2


def run(ctx: GateContext) -> Outcome:
    """Measure each prompt length `reps` times (1 output token); judge median tok/s by the band."""
    band = ctx.profile.body.gates.prefill if ctx.profile else None
    reps = int(ctx.opt("reps", REPS))
    seed = int(ctx.opt("seed", 0))
    lengths = capped(ctx.opt("lengths", LENGTHS), ctx.max_len() - 2)
    corpus = data.load_corpus(Path(ctx.options["corpus"]) if ctx.options.get("corpus") else None)
    ctx.progress.start("prefill", len(lengths) * reps)
    warm_up(ctx)
    points: dict[str, Any] = {}
    for length in lengths:
        records = []
        for rep in range(reps):
            key = f"len{length}-r{rep}"
            nonce = tokenize(ctx, f"[{ctx.run_id} {length} {rep}]\n", special=True)
            body = corpus_ids(
                ctx, corpus, seeded(seed, "prefill", length, rep), length - len(nonce)
            )
            try:
                reply, before, after = timed_stream(ctx, nonce + body, 1)
                record = {"len": length, "rep": rep, **stream_record(reply, before, after)}
                ctx.record(key, "ok", record)
                records.append(record)
            except RequestFailed as exc:
                ctx.record(key, "error", {"len": length, "rep": rep, "error": exc.message})
            ctx.progress.advance()
        points[str(length)] = {
            "prefill_tok_s": spread_of(records, "prefill_tok_s"),
            "ttft_ms": spread_of(records, "ttft_ms"),
            "prefix_hit_tokens": sum(r["prefix_hit_tokens"] for r in records),
        }
    partial = bool(ctx.opt("partial", False))
    return _verdict(points, band.min_tok_s if band else None, reps, partial)


def _verdict(
    points: dict[str, Any], limits: dict[int, float] | None, reps: int, partial: bool = False
) -> Outcome:
    summary: dict[str, Any] = {"reps": reps, "points": points}
    measured = {
        int(k): v["prefill_tok_s"]["median"] for k, v in points.items() if v["prefill_tok_s"]
    }
    text = ", ".join(f"{tps:.0f} tok/s @ {n}" for n, tps in sorted(measured.items()))
    headline = measured[max(measured)] if measured else None
    hits = sum(v["prefix_hit_tokens"] for v in points.values())
    summary["prefix_hit_tokens"] = hits
    if hits:
        text += f"; {hits:.0f} prompt tokens came from the prefix cache"
    verdict = judge(measured, len(points), limits, lambda tps, floor: tps < floor, partial)
    if limits:
        summary["unmeasured_band_points"] = list(verdict.unmeasured)
    return Outcome(
        verdict.status, "prefill tok/s", headline, summary, with_note(text, verdict.note)
    )
