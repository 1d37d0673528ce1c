"""GSM8K: 5-shot, greedy, scored as lm-evaluation-harness scores it; pass on the Wilson lower bound.

Prompt format, stop strings, filters and the exact-match normalisation follow
EleutherAI/lm-evaluation-harness `lm_eval/tasks/gsm8k/gsm8k.yaml` (task version 3.0) and the
RegexFilter of `lm_eval/filters/extraction.py`; they are re-expressed here, not copied, so that a
number from this gate can be compared with a number from `lm_eval --tasks gsm8k`.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed
from paroctl.gates import data
from paroctl.gates.base import FanOut, Finished, GateContext, Outcome
from paroctl.gates.stats import wilson
from paroctl.gates.watch import ServeChanged

# --- scoring (pure) --------------------------------------------------------------------------

# gsm8k.yaml filter "strict-match": regex `#### (\-?[0-9\.\,]+)`, then take_first (first match).
STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
# gsm8k.yaml filter "flexible-extract": regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`, group_select -1
# (the LAST match in the text); a match is a tuple of the two groups, the non-empty one is kept.
FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
# gsm8k.yaml metric exact_match: ignore_case, and these regexes removed from both sides.
IGNORE_RES = (re.compile(","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$"))
METRICS = ("strict-match", "flexible-extract")
# gsm8k.yaml generation_kwargs.until; max_gen_toks is lm-eval's default of 256.
STOP = ("Question:", "</s>", "<|im_end|>")
MAX_TOKENS = 256
NUM_FEWSHOT = 5
FEWSHOT_SEED = 1234
# Stored in each run's summary: runs pair item by item only when they asked the same prompts.
FEWSHOT_SCHEME = "lm-eval-stream:1234"


def _pick(match: str | tuple[str, ...]) -> str:
    if isinstance(match, tuple):
        match = next(part for part in match if part)
    return match.strip()


def strict_match(response: str) -> str | None:
    """The strict-match extraction: the first `#### <number>`; None when there is none."""
    found = STRICT_RE.findall(response)
    return _pick(found[0]) if found else None


def flexible_extract(response: str) -> str | None:
    """The flexible-extract extraction: the last number-like token; None when there is none."""
    found = FLEXIBLE_RE.findall(response)
    return _pick(found[-1]) if found else None


def normalize(text: str) -> str:
    """exact_match's normalisation: drop ',', '$', everything through '#### ', a final '.'."""
    for pattern in IGNORE_RES:
        text = pattern.sub("", text)
    return text.lower()


def is_correct(extracted: str | None, reference: str) -> bool:
    """Whether an extracted answer matches the reference answer under exact_match."""
    return extracted is not None and normalize(extracted) == normalize(reference)


def score(response: str, reference: str) -> dict[str, Any]:
    """Both extractions of one response and whether each is correct."""
    strict, flexible = strict_match(response), flexible_extract(response)
    return {
        "strict": strict,
        "flexible": flexible,
        "strict_correct": is_correct(strict, reference),
        "flexible_correct": is_correct(flexible, reference),
    }


# --- prompts (pure) --------------------------------------------------------------------------


def fewshot_indices(n_train: int, n_questions: int, k: int = NUM_FEWSHOT) -> list[list[int]]:
    """The training indices shown before each of the first n_questions test questions.

    lm-eval's ContextSampler (lm_eval/api/samplers.py, 0.4.13) draws `rnd.sample(train, k)` from
    one `Random(1234)` per task, once per test document in document order (the train split is not
    the test split, so no eval doc is excluded and exactly k are drawn). `sample` picks by index,
    so sampling range(n_train) walks the same stream; deriving every question's shots up front
    keeps a resumed or reordered run asking exactly what a fresh run asks.
    """
    rnd = random.Random(FEWSHOT_SEED)
    return [rnd.sample(range(n_train), k) for _ in range(n_questions)]


def completion_prompt(question: str, shots: Sequence[data.Question]) -> str:
    """lm-eval's text: 'Question: q\\nAnswer: a' shots joined by blank lines, then the question."""
    parts = [f"Question: {shot.question}\nAnswer: {shot.answer}" for shot in shots]
    parts.append(f"Question: {question}\nAnswer:")
    return "\n\n".join(parts)


def chat_messages(question: str, shots: Sequence[data.Question]) -> list[dict[str, str]]:
    """lm-eval's multi-turn few-shot under the chat template: one user/assistant pair per shot."""
    messages: list[dict[str, str]] = []
    for shot in shots:
        messages.append({"role": "user", "content": f"Question: {shot.question}\nAnswer:"})
        messages.append({"role": "assistant", "content": shot.answer})
    messages.append({"role": "user", "content": f"Question: {question}\nAnswer:"})
    return messages


# --- summary (pure) --------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """Counts over a run's items and the accuracy intervals of both metrics."""

    n: int
    answered: int
    errors: int
    truncated: int
    invalid: int
    correct: dict[str, int]

    def interval(self, metric: str) -> Any:
        """The Wilson 95% interval of one metric over the answered items."""
        return wilson(self.correct[metric], self.answered)


def tally(items: Sequence[dict[str, Any]], metric: str) -> Tally:
    """Count answered / errors / truncated / invalid (by `metric`'s extraction) and corrects."""
    answered = [item for item in items if item.get("outcome") != "error"]
    key = "strict" if metric == "strict-match" else "flexible"
    return Tally(
        n=len(items),
        answered=len(answered),
        errors=len(items) - len(answered),
        truncated=sum(1 for item in answered if item.get("finish_reason") == "length"),
        invalid=sum(1 for item in answered if item.get(key) is None),
        correct={
            "strict-match": sum(1 for item in answered if item.get("strict_correct")),
            "flexible-extract": sum(1 for item in answered if item.get("flexible_correct")),
        },
    )


def correct_by_item(items: Sequence[dict[str, Any]], metric: str) -> dict[str, bool]:
    """Per answered item key, whether `metric` judged it right (errors are left out)."""
    key = "strict_correct" if metric == "strict-match" else "flexible_correct"
    return {str(i["key"]): bool(i.get(key)) for i in items if i.get("outcome") != "error"}


def outcome_of(record: dict[str, Any], metric: str) -> str:
    """One item's outcome under the judged metric: correct, truncated, invalid or wrong."""
    key = "strict" if metric == "strict-match" else "flexible"
    if record[f"{key}_correct"]:
        return "correct"
    if record.get("finish_reason") == "length":
        return "truncated"
    return "invalid" if record.get(key) is None else "wrong"


# --- the gate --------------------------------------------------------------------------------


def _ask(ctx: GateContext, question: data.Question, shots: list[data.Question]) -> dict[str, Any]:
    mode = ctx.opt("mode", "chat")
    common = {
        "model": ctx.target.model,
        "max_tokens": int(ctx.opt("max_tokens", MAX_TOKENS)),
        "temperature": 0.0,
        "stop": list(STOP),
    }
    if mode == "chat":
        payload = {**common, "messages": chat_messages(question.question, shots)}
        reply = ctx.client.post("/v1/chat/completions", payload)
        text = reply.content()
    else:
        payload = {**common, "prompt": completion_prompt(question.question, shots)}
        reply = ctx.client.post("/v1/completions", payload)
        text = reply.text()
    return {
        "index": question.index,
        "response": text,
        "finish_reason": reply.finish_reason(),
        "prompt_tokens": reply.usage("prompt_tokens"),
        "completion_tokens": reply.usage("completion_tokens"),
        "seconds": round(reply.seconds, 3),
        "faults": reply.faults,
        **score(text, question.answer),
    }


def run(ctx: GateContext) -> Outcome:
    """Ask `limit` test questions at `concurrency`; judge the Wilson lower bound of the metric."""
    band = ctx.profile.body.gates.gsm8k if ctx.profile else None
    metric = str(ctx.opt("metric", band.metric if band else "flexible-extract"))
    limit = int(ctx.opt("limit", band.limit if band else 500))
    concurrency = int(ctx.opt("concurrency", band.concurrency if band else 8))
    path = Path(ctx.options["data"]) if ctx.options.get("data") else None
    questions = data.load_gsm8k("test", path)[:limit]
    train = data.load_gsm8k("train", path)
    # A resume redoes what is missing and what errored; answered items stand.
    pending = [q for q in questions if ctx.done.get(f"q{q.index}", {}).get("outcome") not in _FINAL]
    ctx.progress.start("gsm8k", len(questions), completed=len(questions) - len(pending))
    shots = fewshot_indices(len(train), len(questions))

    def ask(question: data.Question) -> dict[str, Any]:
        return _ask(ctx, question, [train[i] for i in shots[question.index]])

    with FanOut(ask, pending, concurrency) as answers:
        try:
            for done in answers:
                _keep(ctx, done, metric)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: send nothing more, keep what has already arrived.
            with contextlib.suppress(ServeChanged):  # not the run's serve: not its answers
                for done in answers.ready():
                    _keep(ctx, done, metric)
            raise
    items = [ctx.done[f"q{q.index}"] for q in questions if f"q{q.index}" in ctx.done]
    return _verdict(tally(items, metric), metric, band.min_lower_bound if band else None, ctx)


_FINAL = ("correct", "wrong", "invalid", "truncated")


def _keep(ctx: GateContext, done: Finished[data.Question, dict[str, Any]], metric: str) -> None:
    """Store one finished question: its scored answer, or the failure of its request."""
    question = done.item
    if done.answer is not None:
        record, outcome = done.answer, outcome_of(done.answer, metric)
    elif isinstance(done.error, RequestFailed):
        # Never abort the run for one item: record it and carry on.
        record = {"index": question.index, "error": done.error.message, "faults": done.error.faults}
        outcome = "error"
    else:
        raise done.error or AssertionError("a finished item without answer or error")
    ctx.record(f"q{question.index}", outcome, record)
    ctx.progress.advance()


def _verdict(t: Tally, metric: str, floor: float | None, ctx: GateContext) -> Outcome:
    chosen = t.interval(metric)
    summary: dict[str, Any] = {
        "metric": metric,
        "mode": ctx.opt("mode", "chat"),
        "n": t.n,
        "answered": t.answered,
        "errors": t.errors,
        "truncated": t.truncated,
        "invalid": t.invalid,
        "fewshot": FEWSHOT_SCHEME,
        "faults_retried": sum(len(item.get("faults") or []) for item in ctx.done.values()),
        "min_lower_bound": floor,
    }
    for name in METRICS:
        iv = t.interval(name)
        summary[name] = {"correct": iv.successes, "acc": iv.point, "low": iv.low, "high": iv.high}
    text = (
        f"{metric} {chosen.point:.2%} ({chosen.successes}/{t.answered}), 95% CI "
        f"[{chosen.low:.2%}, {chosen.high:.2%}]; {t.truncated} truncated, {t.invalid} invalid, "
        f"{t.errors} errors"
    )
    if t.answered == 0 or t.errors * 20 > t.n:
        # More than 5% of the questions never got an answer: the infrastructure, not the model.
        return Outcome("error", f"{metric} acc", chosen.point, summary, text + " (too many errors)")
    if floor is None:
        status = "unjudged"
    else:
        status = "pass" if chosen.low >= floor else "fail"
        text += f"; lower bound {'clears' if status == 'pass' else 'is below'} {floor:.2%}"
    return Outcome(status, f"{metric} acc", chosen.point, summary, text)
