"""Pure KL-divergence statistics over top-K prompt logprobs, as llama.cpp's KL mode reports them.

llama.cpp (`perplexity --kl-divergence`) sees both full-vocabulary distributions; a served model
only returns its top-K logprobs per position, so the per-token KL is taken over the reference's
top-K tokens plus one rest-of-vocabulary bucket (see `token_kl` for the exact formula). That is
the KL of the two distributions coarse-grained onto K+1 outcomes: never negative, and a lower
bound on the full-vocabulary KL whenever the candidate's probabilities are known exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from paroctl.gates.stats import percentile

# Smallest probability a bucket may get: keeps ln() finite when a candidate lists (nearly) all of
# its mass in tokens the reference does not rank, without moving any realistic KL.
FLOOR = 1e-10


@dataclass(frozen=True)
class TokenRow:
    """One scored position: the top-K logprobs (token id -> logprob) and the actual next token."""

    top: Mapping[int, float]
    token: int
    token_logprob: float

    @property
    def top_token(self) -> int:
        """The most probable listed token (ties: the smaller id, so both sides agree)."""
        return min(self.top, key=lambda tok: (-self.top[tok], tok))


def token_kl(ref: TokenRow, cand: TokenRow) -> float:
    """KL(ref || cand) in nats over the reference's top-K set S plus a rest bucket.

    With p_i = exp(ref logprob), i in S, and p_rest = max(1 - sum_S p_i, 0):
      q_i = exp(cand logprob_i) when i is in the candidate's top-K; otherwise the floor
      q_i = min(q_min, R / m), where q_min is the candidate's smallest listed probability (an upper
      bound for any unlisted token), R = max(1 - sum of the candidate's listed q, FLOOR) the mass
      the candidate leaves unlisted, and m the number of S tokens missing from its top-K (so the
      floors never claim more mass than the candidate has left);
      q_rest = max(1 - sum_S q_i, 0).
    Both vectors are then renormalized to sum 1 (absorbing the logprobs' float rounding), and
    KL = sum over S and rest of p * (ln p - ln max(q, FLOOR)), terms with p = 0 contributing 0.
    """
    if not ref.top or not cand.top:
        raise ValueError("a row without top-K logprobs has no KL")
    cand_q = {tok: math.exp(lp) for tok, lp in cand.top.items()}
    q_min = min(cand_q.values())
    unlisted = max(1.0 - sum(cand_q.values()), FLOOR)
    missing = sum(1 for tok in ref.top if tok not in cand_q)
    floor = min(q_min, unlisted / missing) if missing else 0.0
    p = [math.exp(lp) for lp in ref.top.values()]
    q = [cand_q.get(tok, floor) for tok in ref.top]
    p.append(max(1.0 - sum(p), 0.0))
    q.append(max(1.0 - sum(q), 0.0))
    p_sum, q_sum = sum(p), sum(q)
    return math.fsum(
        pi / p_sum * (math.log(pi / p_sum) - math.log(max(qi, FLOOR) / q_sum))
        for pi, qi in zip(p, q, strict=True)
        if pi > 0.0
    )


def delta_p(ref: TokenRow, cand: TokenRow) -> float:
    """llama.cpp's Δp: candidate minus reference probability of the actual next token."""
    return math.exp(cand.token_logprob) - math.exp(ref.token_logprob)


def delta_p_top(ref: TokenRow, cand: TokenRow) -> float:
    """Δp of the reference's top token (unlisted by the candidate: its smallest listed)."""
    top = ref.top_token
    cand_lp = cand.top.get(top, min(cand.top.values()))
    return math.exp(cand_lp) - math.exp(ref.top[top])


@dataclass(frozen=True)
class MeanErr:
    """A mean with its standard error (llama.cpp's "x ± y")."""

    mean: float
    stderr: float


def mean_err(values: Sequence[float]) -> MeanErr:
    """Mean and standard error of the mean (sample variance, n - 1), as llama.cpp computes them."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return MeanErr(mean, 0.0)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return MeanErr(mean, math.sqrt(var / n))


@dataclass(frozen=True)
class KlStats:
    """What llama.cpp's KL mode prints, over top-K rows (KL in nats, probabilities as 0..1)."""

    n: int
    kl: MeanErr
    kl_median: float
    kl_p90: float
    kl_p99: float
    kl_max: float
    same_top: MeanErr  # fraction of positions whose top tokens agree
    delta_p: MeanErr  # actual next token (llama.cpp's Δp)
    delta_p_rms: MeanErr
    delta_p_median: float
    delta_p_p01: float
    delta_p_p99: float
    delta_p_max_abs: float
    delta_p_top: MeanErr  # the reference's top token

    def as_dict(self) -> dict[str, float]:
        """Flat JSON-able numbers for the results store."""
        flat: dict[str, float] = {"n": self.n}
        for name, value in vars(self).items():
            if isinstance(value, MeanErr):
                flat[name] = value.mean
                flat[f"{name}_stderr"] = value.stderr
            elif name != "n":
                flat[name] = value
        return flat


def kl_stats(refs: Sequence[TokenRow], cands: Sequence[TokenRow]) -> KlStats:
    """KL, same-top and Δp statistics over aligned positions (the same token ids on both sides)."""
    if len(refs) != len(cands):
        raise ValueError(f"{len(refs)} reference rows against {len(cands)} candidate rows")
    if not refs:
        raise ValueError("no positions")
    for index, (ref, cand) in enumerate(zip(refs, cands, strict=True)):
        if ref.token != cand.token:
            raise ValueError(f"position {index}: token {ref.token} vs {cand.token}: not aligned")
    kls = [token_kl(r, c) for r, c in zip(refs, cands, strict=True)]
    same = [1.0 if r.top_token == c.top_token else 0.0 for r, c in zip(refs, cands, strict=True)]
    dps = [delta_p(r, c) for r, c in zip(refs, cands, strict=True)]
    rms = math.sqrt(math.fsum(d * d for d in dps) / len(dps))
    return KlStats(
        n=len(kls),
        kl=mean_err(kls),
        kl_median=percentile(kls, 50),
        kl_p90=percentile(kls, 90),
        kl_p99=percentile(kls, 99),
        kl_max=max(kls),
        same_top=_proportion(same),
        delta_p=mean_err(dps),
        delta_p_rms=MeanErr(rms, _rms_stderr(dps, rms)),
        delta_p_median=percentile(dps, 50),
        delta_p_p01=percentile(dps, 1),
        delta_p_p99=percentile(dps, 99),
        delta_p_max_abs=max(abs(d) for d in dps),
        delta_p_top=mean_err([delta_p_top(r, c) for r, c in zip(refs, cands, strict=True)]),
    )


def _proportion(hits: Sequence[float]) -> MeanErr:
    # llama.cpp: sqrt(p (1 - p) / (n - 1)).
    n = len(hits)
    p = math.fsum(hits) / n
    return MeanErr(p, math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0)


def _rms_stderr(values: Sequence[float], rms: float) -> float:
    # llama.cpp's delta method: the error of mean(d^2), propagated through the square root.
    n = len(values)
    if n < 2 or rms == 0.0:
        return 0.0
    sq = [v * v for v in values]
    return mean_err(sq).stderr / (2 * rms)
