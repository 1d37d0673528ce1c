"""Pure statistics for the gates: intervals, spreads, stream latencies, spec-decode acceptance."""

from __future__ import annotations

import hashlib
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054  # the two-sided 95% normal quantile


@dataclass(frozen=True)
class Interval:
    """A proportion with its Wilson score interval."""

    successes: int
    n: int
    point: float
    low: float
    high: float


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    """Wilson score interval for successes/n (well-behaved at 0, n and small n)."""
    if n <= 0:
        return Interval(successes, n, 0.0, 0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Clamp float dust: at p=0 the low bound is exactly 0, at p=1 the high bound exactly 1.
    return Interval(successes, n, p, max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Spread:
    """Median and spread of repeated measurements."""

    n: int
    median: float
    low: float
    high: float
    rel_spread: float  # (max - min) / median: what "same-build spread ~10%" means in the log


def spread(values: Sequence[float]) -> Spread:
    """Median, min, max and relative spread of repeated measurements."""
    if not values:
        raise ValueError("no values")
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return Spread(len(values), med, lo, hi, (hi - lo) / med if med else 0.0)


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default method), 0 <= pct <= 100."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


# --- streaming latencies, as vLLM's serving benchmark defines them -------------------------------
# vllm/benchmarks/serve.py (calculate_metrics) and the endpoint request functions:
#   TTFT = arrival of the first content chunk - request start;
#   ITL  = the gaps between successive content chunks (one entry per chunk after the first, so a
#          chunk carrying several speculative tokens counts once);
#   TPOT = (E2E latency - TTFT) / (output tokens - 1), only for requests with > 1 output token;
#   E2EL = arrival of the last chunk - request start.


@dataclass(frozen=True)
class StreamTiming:
    """One streamed request's latencies (seconds) and token count."""

    ttft: float
    e2el: float
    itl: tuple[float, ...]
    output_tokens: int
    tpot: float | None


def stream_timing(start: float, arrivals: Sequence[float], output_tokens: int) -> StreamTiming:
    """TTFT, ITL, TPOT and E2EL from the request start and the content chunks' arrival times."""
    if not arrivals:
        raise ValueError("a stream with no content chunks has no timing")
    ttft = arrivals[0] - start
    e2el = arrivals[-1] - start
    itl = tuple(b - a for a, b in itertools.pairwise(arrivals))
    tpot = (e2el - ttft) / (output_tokens - 1) if output_tokens > 1 else None
    return StreamTiming(ttft, e2el, itl, output_tokens, tpot)


# --- speculative decoding acceptance from /metrics counter deltas --------------------------------

SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


@dataclass(frozen=True)
class Acceptance:
    """Speculative decoding over a window: drafts, proposed and accepted tokens, and ratios."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_draft: float  # the log's "acc/draft"
    tokens_per_update: float  # accepted + the target's own token, per verify step
    acceptance_rate: float  # accepted / proposed


def acceptance(before: Mapping[str, float], after: Mapping[str, float]) -> Acceptance | None:
    """Acceptance from counter values read before and after a window; None without drafts."""
    drafts = after.get(SPEC_DRAFTS, 0.0) - before.get(SPEC_DRAFTS, 0.0)
    if drafts <= 0:
        return None
    proposed = after.get(SPEC_DRAFT_TOKENS, 0.0) - before.get(SPEC_DRAFT_TOKENS, 0.0)
    accepted = after.get(SPEC_ACCEPTED, 0.0) - before.get(SPEC_ACCEPTED, 0.0)
    per_draft = accepted / drafts
    return Acceptance(
        drafts=drafts,
        draft_tokens=proposed,
        accepted=accepted,
        accepted_per_draft=per_draft,
        tokens_per_update=1.0 + per_draft,
        acceptance_rate=accepted / proposed if proposed > 0 else 0.0,
    )


# --- greedy text identity ------------------------------------------------------------------------


def text_hash(text: str) -> str:
    """A short, stable fingerprint of generated text (8 hex digits, as in the field log)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


SAME = "same"
DIFFERS_FROM_OTHER = "differs-from-other"
UNSTABLE = "unstable"


def classify_greedy(mine: Sequence[str], other: Sequence[str]) -> str:
    """Compare one prompt's hashes across two builds, with each build's self-consistency control.

    same: the builds share an output; differs-from-other: each build is self-consistent and they
    disagree (a real difference); unstable: they share nothing and at least one build disagrees
    with itself, so the difference may be the scheduler's, not the build's.
    """
    if set(mine) & set(other):
        return SAME
    if len(set(mine)) == 1 and len(set(other)) == 1:
        return DIFFERS_FROM_OTHER
    return UNSTABLE


@dataclass(frozen=True)
class Paired:
    """Two builds on the same items: discordant counts, McNemar's exact p, the verdict."""

    n: int  # items both answered
    old_only: int  # right before, wrong now
    new_only: int  # wrong before, right now
    p_value: float  # two-sided exact McNemar
    loss: float  # (old_only - new_only) / n: the accuracy given up
    verdict: str  # pass | fail | inconclusive


def mcnemar_exact(old_only: int, new_only: int) -> float:
    """Two-sided exact McNemar p-value: 2 P(X <= min) for X ~ Bin(discordant, 1/2), capped at 1."""
    if old_only < 0 or new_only < 0:
        raise ValueError(f"negative counts {old_only}, {new_only}")
    total = old_only + new_only
    if total == 0:
        return 1.0
    low = min(old_only, new_only)
    tail = sum(math.comb(total, k) for k in range(low + 1)) / 2**total
    return float(min(1.0, 2 * tail))


def paired_noninferiority(
    old: Mapping[str, bool], new: Mapping[str, bool], margin: float, alpha: float = 0.05
) -> Paired:
    """Judge the new build against the old on the items both answered.

    pass: it gives up at most `margin` accuracy; fail: it gives up more and McNemar says the
    difference is real (p < alpha); inconclusive: it gives up more, but the items cannot tell.
    """
    keys = sorted(set(old) & set(new))
    old_only = sum(1 for k in keys if old[k] and not new[k])
    new_only = sum(1 for k in keys if new[k] and not old[k])
    p = mcnemar_exact(old_only, new_only)
    loss = (old_only - new_only) / len(keys) if keys else 0.0
    if not keys:
        verdict = "inconclusive"
    elif loss <= margin:
        verdict = "pass"
    else:
        verdict = "fail" if p < alpha else "inconclusive"
    return Paired(len(keys), old_only, new_only, p, loss, verdict)
