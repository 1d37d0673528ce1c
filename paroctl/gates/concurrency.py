"""Concurrency: aggregate decode tokens/s with 1, 2, 4, 8, 16 streams in flight at once."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed, StreamReply
from paroctl.gates import data
from paroctl.gates.base import FanOut, GateContext, Outcome
from paroctl.gates.prompts import corpus_ids, seeded, tokenize
from paroctl.gates.stats import stream_timing
from paroctl.gates.timing import capped, judge, spread_of, warm_up, with_note

STREAMS = (1, 2, 4, 8, 16)
GEN = 128
PROMPT_TOKENS = 128


def aggregate_tok_s(replies: list[StreamReply]) -> float:
    """Output tokens of all streams over the wall time from the first start to the last chunk."""
    start = min(r.start for r in replies)
    end = max(r.arrivals[-1] for r in replies)
    return sum(r.completion_tokens for r in replies) / (end - start)


def _stream(ctx: GateContext, gen: int, barrier: threading.Barrier, prompt: list[int]) -> Any:
    payload = {
        "model": ctx.target.model,
        "prompt": prompt,
        "max_tokens": gen,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    barrier.wait()  # all streams leave together: the point is N in flight at once
    return ctx.client.stream(payload)


def run(ctx: GateContext) -> Outcome:
    """For each stream count, run that many unique prompts at once; judge aggregate tok/s."""
    band = ctx.profile.body.gates.concurrency if ctx.profile else None
    gen = int(ctx.opt("gen", GEN))
    seed = int(ctx.opt("seed", 0))
    streams = capped(ctx.opt("streams", STREAMS), 1024)
    length = min(PROMPT_TOKENS, ctx.max_len() - gen - 16)
    corpus = data.load_corpus(Path(ctx.options["corpus"]) if ctx.options.get("corpus") else None)
    ctx.progress.start("concurrency", len(streams))
    warm_up(ctx)
    points: dict[str, Any] = {}
    for n in streams:
        prompts = []
        for i in range(n):
            # Unique per run and stream: no stream may ride on another's prefix-cache blocks.
            nonce = tokenize(ctx, f"[{ctx.run_id} {n} {i}]\n", special=True)
            prompts.append(nonce + corpus_ids(ctx, corpus, seeded(seed, "conc", n, i), length))
        barrier = threading.Barrier(n)
        replies, errors = [], []
        with FanOut(functools.partial(_stream, ctx, gen, barrier), prompts, n) as streams_done:
            for done in streams_done:
                if done.answer is not None and not done.answer.arrivals:
                    errors.append("the server ended a stream without one content chunk")
                elif done.answer is not None:
                    replies.append(done.answer)
                elif isinstance(done.error, RequestFailed):
                    errors.append(done.error.message)
                else:
                    raise done.error or AssertionError("a stream without reply or error")
        record: dict[str, Any] = {"streams": n, "errors": errors}
        if replies and not errors:
            per = [stream_timing(r.start, r.arrivals, r.completion_tokens) for r in replies]
            record.update(
                aggregate_tok_s=aggregate_tok_s(replies),
                completion_tokens=sum(r.completion_tokens for r in replies),
                faults=[f for r in replies for f in r.faults],
            )
            per_stream = [{"ttft_ms": t.ttft * 1e3, "tpot_ms": (t.tpot or 0) * 1e3} for t in per]
            record["ttft_ms"] = spread_of(per_stream, "ttft_ms")
            record["tpot_ms"] = spread_of(per_stream, "tpot_ms")
        ctx.record(f"n{n}", "ok" if not errors else "error", record)
        points[str(n)] = record
        ctx.progress.advance()
    partial = bool(ctx.opt("partial", False))
    return _verdict(points, band.min_aggregate_tok_s if band else None, gen, partial)


def _verdict(
    points: dict[str, Any], limits: dict[int, float] | None, gen: int, partial: bool = False
) -> Outcome:
    measured = {int(k): v["aggregate_tok_s"] for k, v in points.items() if "aggregate_tok_s" in v}
    summary: dict[str, Any] = {"gen": gen, "points": points}
    text = ", ".join(f"{tps:.1f} tok/s @ {n}" for n, tps in sorted(measured.items()))
    headline = measured[max(measured)] if measured else None
    verdict = judge(measured, len(points), limits, lambda tps, floor: tps < floor, partial)
    if limits:
        summary["unmeasured_band_points"] = list(verdict.unmeasured)
    return Outcome(
        verdict.status, "aggregate tok/s", headline, summary, with_note(text, verdict.note)
    )
