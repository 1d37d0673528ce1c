"""Sanity: fixed prompts with known answers, completions and chat, and one long-context recall.

The required prompts are ones any working model of any size gets right, so a failure means a
broken serve (wrong weights, a bad kernel, a mangled template), not a small model. The arithmetic
probes are recorded and shown but judge nothing: a 135M model cannot multiply, and a 27B one that
cannot is caught by GSM8K.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed
from paroctl.gates import data
from paroctl.gates.base import GateContext, Outcome
from paroctl.gates.prompts import corpus_ids, seeded, tokenize

LONG_TARGET_TOKENS = 7000
LONG_HEADROOM = 64  # answer tokens + template slack under the serve's max length
SECRET = "tangerine"


@dataclass(frozen=True)
class Check:
    """One sanity prompt: how to ask, and the regex its answer must match."""

    key: str
    kind: str  # completion | chat | long
    prompt: str
    expect: str
    required: bool = True
    max_tokens: int = 16


CHECKS = (
    Check("capital-completion", "completion", "The capital of France is", r"\bParis\b"),
    # The switch's boot fact on the CPU box (profiles/_cpu.yaml): kept by every SmolLM2 copy.
    Check("opposite-completion", "completion", "The opposite of hot is", r"^\s*cold\b"),
    Check("count-completion", "completion", "1, 2, 3, 4, 5,", r"^\s*6\b"),
    Check(
        "capital-chat", "chat", "What is the capital of France? Answer in one word.", r"\bParis\b"
    ),
    Check("long-recall", "long", f"The secret password is: {SECRET}.", rf"\b{SECRET}\b"),
    Check("multiply-chat", "chat", "What is 17*23?", r"\b391\b", required=False, max_tokens=48),
    Check("multiply-completion", "completion", "17 * 23 =", r"^\s*391\b", required=False),
)


def passes(check: Check, answer: str) -> bool:
    """Whether an answer matches the check's expectation."""
    return re.search(check.expect, answer) is not None


def _long_prompt(ctx: GateContext, check: Check) -> list[int]:
    # Secret first, ~7k tokens of WikiText, then the cue: recall across the whole window.
    corpus = data.load_corpus(Path(ctx.options["corpus"]) if ctx.options.get("corpus") else None)
    head = tokenize(ctx, check.prompt + "\n\n", special=True)
    tail = tokenize(ctx, "\n\nThe secret password is:")
    budget = min(LONG_TARGET_TOKENS, ctx.max_len() - LONG_HEADROOM) - len(head) - len(tail)
    filler = corpus_ids(ctx, corpus, seeded(int(ctx.opt("seed", 0)), "sanity-long"), budget)
    return head + filler + tail


def judged(ctx: GateContext) -> list[str]:
    """The required checks that judge this serve: the profile's sanity band, else every one."""
    band = ctx.profile.body.gates.sanity if ctx.profile else None
    keys = [c.key for c in CHECKS if c.required]
    return [key for key in keys if key in band.judge] if band else keys


def _ask(ctx: GateContext, check: Check, judge: list[str]) -> dict[str, Any]:
    common = {"model": ctx.target.model, "max_tokens": check.max_tokens, "temperature": 0.0}
    if check.kind == "chat":
        messages = [{"role": "user", "content": check.prompt}]
        reply = ctx.client.post("/v1/chat/completions", {**common, "messages": messages})
        answer = reply.content()
    else:
        prompt: str | list[int] = _long_prompt(ctx, check) if check.kind == "long" else check.prompt
        reply = ctx.client.post("/v1/completions", {**common, "prompt": prompt})
        answer = reply.text()
    return {
        "kind": check.kind,
        "required": check.key in judge,
        "answer": answer,
        "ok": passes(check, answer),
        "prompt_tokens": reply.usage("prompt_tokens"),
        "faults": reply.faults,
    }


def run(ctx: GateContext) -> Outcome:
    """Ask every check once (greedy); pass when every required one answers as expected."""
    judge = judged(ctx)
    ctx.progress.start("sanity", len(CHECKS))
    for check in CHECKS:
        try:
            record = _ask(ctx, check, judge)
            outcome = "ok" if record["ok"] else "wrong"
        except RequestFailed as exc:
            record = {"kind": check.kind, "required": check.key in judge, "error": exc.message}
            record["faults"] = exc.faults
            outcome = "error"
        ctx.record(check.key, outcome, record)
        ctx.progress.advance()
    required = judge
    errors = [key for key in required if ctx.done[key]["outcome"] == "error"]
    wrong = [key for key in required if ctx.done[key]["outcome"] == "wrong"]
    probes = {c.key: ctx.done[c.key]["outcome"] for c in CHECKS if c.key not in judge}
    summary = {
        "required": len(required),
        "passed": len(required) - len(errors) - len(wrong),
        "wrong": wrong,
        "errors": errors,
        "probes": probes,
        "long_prompt_tokens": ctx.done["long-recall"].get("prompt_tokens"),
    }
    passed = len(required) - len(errors) - len(wrong)
    text = f"{passed}/{len(required)} required answers right; probes {probes}"
    if errors:
        return Outcome("error", "required passed", passed, summary, text + f"; errors: {errors}")
    if wrong:
        return Outcome("fail", "required passed", passed, summary, text + f"; wrong: {wrong}")
    return Outcome("pass", "required passed", passed, summary, text)
