"""Pure functions of the gates on fixed inputs: extraction, Wilson, latencies, acceptance, hashes."""

from __future__ import annotations

import pytest

from paroctl.gates import gsm8k
from paroctl.gates.data import Question
from paroctl.gates.stats import (
    DIFFERS_FROM_OTHER,
    SAME,
    SPEC_ACCEPTED,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    UNSTABLE,
    acceptance,
    classify_greedy,
    percentile,
    spread,
    stream_timing,
    text_hash,
    wilson,
)

# Real reference answers from the GSM8K test split (questions 0, 2, 17).
JANET = (
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer\u2019s market.\n#### 18"
)
FLIP = (
    "The cost of the house and repairs came out to 80,000+50,000=$<<80000+50000=130000>>130,000\n"
    "He increased the value of the house by 80,000*1.5=<<80000*1.5=120000>>120,000\n"
    "So the new value of the house is 120,000+80,000=$<<120000+80000=200000>>200,000\n"
    "So he made a profit of 200,000-130,000=$<<200000-130000=70000>>70,000\n#### 70000"
)


@pytest.mark.parametrize(
    ("response", "strict", "flexible"),
    [
        (JANET, "18", "18"),
        (FLIP, "70000", "70000"),
        # Model-style answers: the strict filter needs '#### ', the flexible one takes the last number.
        ("She makes 9 * 2 = $18 every day.", None, "$18"),
        ("The answer is 1,250.", None, "1,250."),
        ("#### 42\nQuestion: next one has 7", "42", "7"),
        ("I do not know.", None, None),
        ("", None, None),
        ("#### -3.5", "-3.5", "-3.5"),
        ("costs $5 and then 6", None, "6"),
    ],
)
def test_extraction_matches_lm_eval_filters(
    response: str, strict: str | None, flexible: str | None
) -> None:
    assert gsm8k.strict_match(response) == strict
    assert gsm8k.flexible_extract(response) == flexible


@pytest.mark.parametrize(
    ("extracted", "correct"),
    [("18", True), ("$18", True), ("18.", True), ("1,8", True), ("18.0", False), ("81", False)],
)
def test_exact_match_normalisation(extracted: str, correct: bool) -> None:
    assert gsm8k.is_correct(extracted, JANET) is correct
    assert gsm8k.is_correct(None, JANET) is False


def test_score_of_a_real_answer_and_a_wrong_one() -> None:
    assert gsm8k.score(FLIP, FLIP) == {
        "strict": "70000",
        "flexible": "70000",
        "strict_correct": True,
        "flexible_correct": True,
    }
    wrong = gsm8k.score("So he made $70,000 profit.\n#### 7000", FLIP)
    assert wrong["strict_correct"] is False
    assert wrong["flexible"] == "7000"


def test_completion_prompt_is_lm_eval_format() -> None:
    shots = [Question(0, "Q1?", "A1\n#### 1"), Question(1, "Q2?", "A2\n#### 2")]
    assert gsm8k.completion_prompt("Q?", shots) == (
        "Question: Q1?\nAnswer: A1\n#### 1\n\nQuestion: Q2?\nAnswer: A2\n#### 2\n\nQuestion: Q?\nAnswer:"
    )
    messages = gsm8k.chat_messages("Q?", shots)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[-1]["content"] == "Question: Q?\nAnswer:"


def test_fewshot_is_one_seeded_stream_in_document_order() -> None:
    import random

    # lm-eval's sampler: one Random(1234), k=5 drawn per test document, in order.
    rnd = random.Random(1234)
    expected = [rnd.sample(range(100), 5) for _ in range(4)]
    assert gsm8k.fewshot_indices(100, 4) == expected


def test_tally_counts_errors_truncated_invalid_separately() -> None:
    items = [
        {"outcome": "correct", "strict": "1", "flexible": "1", "strict_correct": True,
         "flexible_correct": True, "finish_reason": "stop"},
        {"outcome": "truncated", "strict": None, "flexible": "5", "strict_correct": False,
         "flexible_correct": False, "finish_reason": "length"},
        {"outcome": "invalid", "strict": None, "flexible": None, "strict_correct": False,
         "flexible_correct": False, "finish_reason": "stop"},
        {"outcome": "error", "error": "gave up"},
    ]  # fmt: skip
    t = gsm8k.tally(items, "flexible-extract")
    assert (t.n, t.answered, t.errors, t.truncated, t.invalid) == (4, 3, 1, 1, 1)
    assert t.correct == {"strict-match": 1, "flexible-extract": 1}
    assert gsm8k.tally(items, "strict-match").invalid == 2


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # statsmodels proportion_confint(k, n, method="wilson")
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (0, 8, 0.0, 0.3244),
        (490, 500, 0.9636, 0.9891),
    ],
)
def test_wilson_known_values(k: int, n: int, low: float, high: float) -> None:
    iv = wilson(k, n)
    assert iv.low == pytest.approx(low, abs=1e-4)
    assert iv.high == pytest.approx(high, abs=1e-4)
    assert iv.point == k / n


def test_wilson_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        wilson(11, 10)
    assert wilson(0, 0).high == 1.0


def test_stream_timing_as_vllm_bench_defines_it() -> None:
    # Request at t=10.0; chunks at 10.5 (first token), 10.6, 10.8, 11.1; five output tokens
    # (the last chunk carried two speculative tokens).
    timing = stream_timing(10.0, [10.5, 10.6, 10.8, 11.1], output_tokens=5)
    assert timing.ttft == pytest.approx(0.5)
    assert timing.e2el == pytest.approx(1.1)
    assert timing.itl == pytest.approx((0.1, 0.2, 0.3))
    assert timing.tpot == pytest.approx(0.6 / 4)
    assert stream_timing(0.0, [0.2], output_tokens=1).tpot is None
    with pytest.raises(ValueError):
        stream_timing(0.0, [], 0)


def test_acceptance_from_counter_deltas() -> None:
    before = {SPEC_DRAFTS: 100.0, SPEC_DRAFT_TOKENS: 700.0, SPEC_ACCEPTED: 300.0}
    after = {SPEC_DRAFTS: 150.0, SPEC_DRAFT_TOKENS: 1050.0, SPEC_ACCEPTED: 451.1}
    acc = acceptance(before, after)
    assert acc is not None
    # The field log's row: acc/draft 3.022 <-> tokens per update 4.022.
    assert acc.accepted_per_draft == pytest.approx(3.022)
    assert acc.tokens_per_update == pytest.approx(4.022)
    assert acc.acceptance_rate == pytest.approx(151.1 / 350)
    assert acceptance(before, before) is None
    assert acceptance({}, {}) is None


def test_spread_and_percentile() -> None:
    s = spread([24.0, 26.0, 25.0])
    assert (s.median, s.low, s.high) == (25.0, 24.0, 26.0)
    assert s.rel_spread == pytest.approx(0.08)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == pytest.approx(3.97)


def test_greedy_hash_comparison_with_self_consistency_control() -> None:
    # The field log's table (2026-09-15): prompts at ctx 45, 8705, 33853; sw vs hw builds.
    assert text_hash("hello") == text_hash("hello") != text_hash("hello ")
    assert len(text_hash("x")) == 8
    assert classify_greedy(["ed9bf304", "ed9bf304"], ["ed9bf304", "43a56183"]) == SAME
    assert classify_greedy(["3d520259", "03d90f57"], ["03d90f57", "03d90f57"]) == SAME
    assert classify_greedy(["c45068c5", "c45068c5"], ["c45068c5", "c45068c5"]) == SAME
    assert classify_greedy(["aaaa", "aaaa"], ["bbbb", "bbbb"]) == DIFFERS_FROM_OTHER
    assert classify_greedy(["aaaa", "cccc"], ["bbbb", "bbbb"]) == UNSTABLE
