"""Shared pieces of the timing gates: warm-up, a timed stream with its counters, capping."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from paroctl.client import BadAnswer, StreamReply
from paroctl.gates.base import GateContext, counters
from paroctl.gates.stats import (
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    Acceptance,
    acceptance,
    percentile,
    spread,
    stream_timing,
)

PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
COUNTERS = (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED, PREFIX_HITS, PREFIX_QUERIES)


def capped(points: Iterable[int], cap: int) -> list[int]:
    """Sorted unique points, each no larger than cap (the serve's max length minus headroom)."""
    return sorted({min(int(point), cap) for point in points if point > 0})


def warm_up(ctx: GateContext) -> None:
    """One short untimed request: the first request after boot pays lazy initialisation."""
    ctx.client.post(
        "/v1/completions",
        {"model": ctx.target.model, "prompt": "Hello", "max_tokens": 4, "temperature": 0.0},
    )


def timed_stream(
    ctx: GateContext,
    prompt: Sequence[int],
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
) -> tuple[StreamReply, dict[str, float], dict[str, float]]:
    """Stream one completion of exactly max_tokens (EOS ignored) with counters read around it."""
    payload: dict[str, Any] = {
        "model": ctx.target.model,
        "prompt": list(prompt),
        "max_tokens": max_tokens,
        "temperature": temperature,
        # A fixed token count: decode time must not depend on where the model happens to stop.
        "ignore_eos": True,
    }
    if seed is not None:
        payload["seed"] = seed
    before = counters(ctx.metrics(), COUNTERS)
    reply = ctx.client.stream(payload)
    if not reply.arrivals:  # nothing to time: an item error saying what the server did
        raise BadAnswer("the server ended the stream without one content chunk", reply.faults)
    after = counters(ctx.metrics(), COUNTERS)
    return reply, before, after


def stream_record(
    reply: StreamReply, before: dict[str, float], after: dict[str, float]
) -> dict[str, Any]:
    """The per-request record of a timed stream: latencies, steps, acceptance, cache hits."""
    timing = stream_timing(reply.start, reply.arrivals, reply.completion_tokens)
    acc = acceptance(before, after)
    # With speculative decoding one verify step emits several tokens: count steps, not tokens.
    steps = acc.drafts if acc is not None else max(reply.completion_tokens - 1, 0)
    decode_s = timing.e2el - timing.ttft
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "ttft_ms": timing.ttft * 1e3,
        "e2el_ms": timing.e2el * 1e3,
        "tpot_ms": None if timing.tpot is None else timing.tpot * 1e3,
        "itl_p50_ms": percentile(timing.itl, 50) * 1e3 if timing.itl else None,
        "itl_p99_ms": percentile(timing.itl, 99) * 1e3 if timing.itl else None,
        "chunks": len(reply.arrivals),
        "steps": steps,
        "ms_per_step": decode_s * 1e3 / steps if steps else None,
        "decode_tok_s": (reply.completion_tokens - 1) / decode_s if decode_s > 0 else None,
        "prefill_tok_s": reply.prompt_tokens / timing.ttft if timing.ttft > 0 else None,
        "prefix_hit_tokens": after[PREFIX_HITS] - before[PREFIX_HITS],
        "spec": None if acc is None else _acc_dict(acc),
        "faults": reply.faults,
    }


def _acc_dict(acc: Acceptance) -> dict[str, float]:
    return {
        "drafts": acc.drafts,
        "draft_tokens": acc.draft_tokens,
        "accepted": acc.accepted,
        "accepted_per_draft": acc.accepted_per_draft,
        "tokens_per_update": acc.tokens_per_update,
        "acceptance_rate": acc.acceptance_rate,
    }


def spread_of(records: Sequence[dict[str, Any]], key: str) -> dict[str, float] | None:
    """Median / min / max / relative spread of one field over repetitions (None if absent)."""
    values = [float(r[key]) for r in records if r.get(key) is not None]
    if not values:
        return None
    s = spread(values)
    return {"n": s.n, "median": s.median, "min": s.low, "max": s.high, "rel_spread": s.rel_spread}


def pooled_acceptance(records: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """Acceptance over all repetitions pooled (counter sums), or None without spec decoding."""
    specs = [r["spec"] for r in records if r.get("spec")]
    if not specs:
        return None
    zero = dict.fromkeys((SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED), 0.0)
    total = {
        SPEC_DRAFTS: sum(s["drafts"] for s in specs),
        SPEC_DRAFT_TOKENS: sum(s["draft_tokens"] for s in specs),
        SPEC_ACCEPTED: sum(s["accepted"] for s in specs),
    }
    acc = acceptance(zero, total)
    return None if acc is None else _acc_dict(acc)


@dataclass(frozen=True)
class Judgement:
    """A timing gate's verdict on its measured points, and the note its message ends with."""

    status: str  # pass | fail | unjudged | error
    note: str
    outside: tuple[int, ...] = ()
    unmeasured: tuple[int, ...] = ()


def judge(
    measured: Mapping[int, float],
    attempted: int,
    limits: Mapping[int, float] | None,
    outside: Callable[[float, float], bool],
    partial: bool = False,
) -> Judgement:
    """Judge measured points by a band: nothing measured, a failed point or a band point left
    unmeasured is never a pass (the last one only with `partial`, which judges the subset)."""
    if not measured:
        return Judgement("error", "nothing measured", (), tuple(sorted(limits or ())))
    if len(measured) < attempted:
        return Judgement("error", "some points failed")
    if not limits:
        return Judgement("unjudged", "")
    bad = tuple(
        sorted(n for n, lim in limits.items() if n in measured and outside(measured[n], lim))
    )
    missing = tuple(sorted(n for n in limits if n not in measured))
    if bad:
        return Judgement("fail", f"outside the band at {list(bad)}", bad, missing)
    if len(missing) == len(limits):
        return Judgement(
            "error", f"no band point measured (the band has {sorted(limits)})", (), missing
        )
    if missing and not partial:
        note = f"band points {list(missing)} not measured (--partial judges only the measured ones)"
        return Judgement("error", note, (), missing)
    note = f"band points {list(missing)} not measured (--partial)" if missing else ""
    return Judgement("pass", note, (), missing)


def with_note(text: str, note: str) -> str:
    """A gate message with its judgement's note appended."""
    return "; ".join(part for part in (text, note) if part)
