"""KL statistics on fixed inputs: closed forms, the floor, llama.cpp's aggregates, the store keys."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from paroctl.gates import kl
from paroctl.gates.kl import TokenRow, kl_stats, mean_err, token_kl
from paroctl.gates.kld import (
    cut_chunks,
    load_reference,
    parse_prompt_logprobs,
    save_reference,
)


def row(probs: dict[int, float], token: int = 0) -> TokenRow:
    """A row from probabilities (logprobs taken here), the actual token's included."""
    return TokenRow({t: math.log(p) for t, p in probs.items()}, token, math.log(probs[token]))


def test_identical_distributions_give_zero() -> None:
    same = row({0: 0.5, 1: 0.3, 2: 0.15})
    assert token_kl(same, same) == pytest.approx(0.0, abs=1e-15)
    stats = kl_stats([same] * 3, [same] * 3)
    assert (stats.kl.mean, stats.kl.stderr, stats.kl_max) == pytest.approx((0.0, 0.0, 0.0))
    assert stats.same_top.mean == 1.0 and stats.delta_p.mean == 0.0


def test_two_point_closed_form() -> None:
    # Both sides list the whole (two-token) vocabulary: no rest mass, the plain binary KL.
    p, q = 0.8, 0.6
    want = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    assert token_kl(row({0: p, 1: 1 - p}), row({0: q, 1: 1 - q})) == pytest.approx(want, rel=1e-12)
    # KL is not symmetric; the reverse direction is its own closed form.
    back = q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))
    assert token_kl(row({0: q, 1: 1 - q}), row({0: p, 1: 1 - p})) == pytest.approx(back)


def test_rest_bucket_is_a_third_outcome() -> None:
    # Top-1 each: {token 0, rest}. p = (0.7, 0.3), q = (0.4, 0.6).
    want = 0.7 * math.log(0.7 / 0.4) + 0.3 * math.log(0.3 / 0.6)
    assert token_kl(row({0: 0.7}), row({0: 0.4})) == pytest.approx(want, rel=1e-12)


def test_missing_candidate_token_gets_the_bounded_floor() -> None:
    # Reference top-2 {0: .6, 1: .3}; the candidate lists {0: .5, 2: .45}: token 1 is unlisted.
    # Floor = min(q_min 0.45, unlisted mass 0.05 / 1 missing) = 0.05; q_rest = 1 - .5 - .05.
    ref, cand = row({0: 0.6, 1: 0.3}), row({0: 0.5, 2: 0.45})
    p, q = (0.6, 0.3, 0.1), (0.5, 0.05, 0.45)
    want = sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))
    assert token_kl(ref, cand) == pytest.approx(want, rel=1e-12)
    # The smallest listed probability bounds it when the candidate leaves more mass unlisted.
    cand = row({0: 0.5, 2: 0.02})  # unlisted 0.48 -> floor min(0.02, 0.48) = 0.02
    q = (0.5, 0.02, 0.48)
    want = sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))
    assert token_kl(ref, cand) == pytest.approx(want, rel=1e-12)


def test_kl_is_never_negative_and_finite_when_candidate_lists_everything_elsewhere() -> None:
    ref = row({0: 0.9, 1: 0.05})
    cand = row({2: 0.6, 3: 0.4}, token=2)  # all candidate mass on tokens the reference ranks low
    value = token_kl(ref, cand)
    assert math.isfinite(value) and value > 10  # the FLOOR: ~ln(1/1e-10) scale, not inf


def test_same_top_and_delta_p_as_llama_cpp() -> None:
    refs = [row({0: 0.6, 1: 0.4}, token=1), row({0: 0.9, 1: 0.1}, token=0)]
    cands = [row({0: 0.3, 1: 0.7}, token=1), row({0: 0.8, 1: 0.2}, token=0)]
    stats = kl_stats(refs, cands)
    # Δp is the actual next token's probability change: +0.3 and -0.1.
    assert stats.delta_p.mean == pytest.approx(0.1)
    assert stats.delta_p.stderr == pytest.approx(math.sqrt(((0.2**2) * 2) / 1 / 2))
    assert stats.delta_p_rms.mean == pytest.approx(math.sqrt((0.09 + 0.01) / 2))
    assert stats.delta_p_max_abs == pytest.approx(0.3)
    # The reference's top token: 0 both times -> 0.3 - 0.6 and 0.8 - 0.9.
    assert stats.delta_p_top.mean == pytest.approx(-0.2)
    assert stats.same_top.mean == 0.5
    assert stats.same_top.stderr == pytest.approx(math.sqrt(0.25 / 1))


def test_aggregates_and_percentiles() -> None:
    values = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert mean_err(values).mean == 2.0
    assert mean_err(values).stderr == pytest.approx(math.sqrt(2.5 / 5))
    # Fixed per-token KLs through kl_stats: two-point rows with q chosen for known values.
    refs = [row({0: 0.5, 1: 0.5})] * 4
    cands = [row({0: q, 1: 1 - q}) for q in (0.5, 0.4, 0.3, 0.2)]
    kls = [0.5 * math.log(0.5 / q) + 0.5 * math.log(0.5 / (1 - q)) for q in (0.5, 0.4, 0.3, 0.2)]
    stats = kl_stats(refs, cands)
    assert stats.kl.mean == pytest.approx(sum(kls) / 4)
    assert stats.kl_median == pytest.approx((kls[1] + kls[2]) / 2)
    assert stats.kl_max == pytest.approx(kls[3])
    assert stats.kl_p90 == pytest.approx(kls[2] + 0.7 * (kls[3] - kls[2]))
    flat = stats.as_dict()
    assert flat["n"] == 4 and flat["kl"] == stats.kl.mean and "kl_stderr" in flat


def test_misaligned_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="not aligned"):
        kl_stats([row({0: 1.0}, 0)], [row({1: 1.0}, 1)])
    with pytest.raises(ValueError, match="1 reference rows against 2"):
        kl_stats([row({0: 1.0})], [row({0: 1.0})] * 2)


def test_floor_constant_is_tiny() -> None:
    assert 0 < kl.FLOOR < 1e-8


def test_prompt_logprobs_parsed_with_rank_cut() -> None:
    chunk = [5, 7, 9]
    entry = {
        "7": {"logprob": -0.1, "rank": 1},
        "3": {"logprob": -2.5, "rank": 2},
        "9": {"logprob": -3.0, "rank": 3},
    }
    reply = {
        "choices": [
            {"prompt_logprobs": [None, entry, {**entry, "9": {"logprob": -4.0, "rank": 40}}]}
        ]
    }
    rows = parse_prompt_logprobs(reply, chunk, top_k=2)
    assert rows[0] == TokenRow({7: -0.1, 3: -2.5}, 7, -0.1)
    assert rows[1].token == 9 and rows[1].token_logprob == -4.0 and 9 not in rows[1].top


def test_chunks_are_cut_exactly() -> None:
    assert cut_chunks(list(range(10)), 3, 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(Exception, match="fewer than 4 x 3"):
        cut_chunks(list(range(10)), 4, 3)


def _key(**over: object) -> dict[str, object]:
    key: dict[str, object] = {
        "format": 1,
        "reference": "bf16-ref",
        "profile_hash": "abc",
        "image": "img:1",
        "server_version": "0.9.3",
        "corpus": "wikitext2",
        "corpus_sha": "c",
        "tokens_sha": "t",
        "chunks": 8,
        "chunk_tokens": 128,
        "top_k": 20,
    }
    return {**key, **over}


def test_stored_reference_reused_only_when_every_key_matches(tmp_path: Path) -> None:
    rows = [[row({0: 0.6, 1: 0.3}), row({1: 0.9}, token=1)]]
    assert load_reference(_key(), tmp_path) == (None, "collected: no stored reference for bf16-ref")
    save_reference(_key(), rows, tmp_path)
    loaded, why = load_reference(_key(), tmp_path)
    assert why == "reused the stored reference"
    assert loaded is not None and loaded[0][0].top == pytest.approx(rows[0][0].top)
    for change in ({"top_k": 256}, {"profile_hash": "def"}, {"server_version": "0.5.8"}):
        loaded, why = load_reference(_key(**change), tmp_path)
        ((name, value),) = change.items()
        assert loaded is None
        assert (
            why
            == f"collected: the stored reference differs in {name} {_key()[name]!r} -> {value!r}"
        )
