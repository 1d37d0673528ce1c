"""Greedy: fixed prompts, two runs each, hashed; with a self-consistency control.

Greedy text on a batching server is not run-to-run stable (the field log: the second request of a
prompt came from the prefix cache with a different chunking; the same 200 requests replayed gave
194/200 identical). So each build answers every prompt twice, and a difference between builds only
counts when both builds agree with themselves.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from paroctl.client import RequestFailed
from paroctl.errors import UsageError
from paroctl.gates import data
from paroctl.gates.base import GateContext, Outcome
from paroctl.gates.prompts import corpus_ids, seeded, tokenize
from paroctl.gates.stats import DIFFERS_FROM_OTHER, classify_greedy, text_hash

GEN = 128
RUNS = 2
FIXED = (
    "The history of the Roman Empire",
    "def fibonacci(n):",
    "Q: Why is the sky blue?\nA:",
)
CORPUS_LENGTHS = (256, 1024)


def _prompts(ctx: GateContext, gen: int) -> dict[str, list[int]]:
    corpus = data.load_corpus(Path(ctx.options["corpus"]) if ctx.options.get("corpus") else None)
    seed = int(ctx.opt("seed", 7))
    prompts = {f"fixed{i}": tokenize(ctx, text, special=True) for i, text in enumerate(FIXED)}
    for length in CORPUS_LENGTHS:
        n = min(length, ctx.max_len() - gen - 1)
        prompts[f"ctx{n}"] = corpus_ids(ctx, corpus, seeded(seed, "greedy", length), n)
    return prompts


def _generate(ctx: GateContext, prompt: list[int], gen: int) -> str:
    payload = {"model": ctx.target.model, "prompt": prompt, "max_tokens": gen, "temperature": 0.0}
    return ctx.client.post("/v1/completions", payload).text()


def run(ctx: GateContext) -> Outcome:
    """Answer every prompt in run a, then all again in run b; compare with --against if given."""
    gen = int(ctx.opt("gen", GEN))
    prompts = _prompts(ctx, gen)
    ctx.progress.start("greedy", len(prompts) * RUNS)
    texts: dict[str, list[str]] = {key: [] for key in prompts}
    errors: list[str] = []
    # All of run a before any of run b: the b request finds a's blocks in the prefix cache, which
    # is exactly the serving condition the control must cover.
    for _ in range(RUNS):
        for key, prompt in prompts.items():
            try:
                texts[key].append(_generate(ctx, prompt, gen))
            except RequestFailed as exc:
                errors.append(f"{key}: {exc.message}")
            ctx.progress.advance()
    for key, outs in texts.items():
        hashes = [text_hash(t) for t in outs]
        record = {"hashes": hashes, "texts": outs, "prompt_tokens": len(prompts[key])}
        ok = len(outs) == RUNS
        ctx.record(
            key, ("stable" if len(set(hashes)) == 1 else "unstable") if ok else "error", record
        )
    return _verdict(ctx, errors)


def _verdict(ctx: GateContext, errors: list[str]) -> Outcome:
    mine = {k: v["hashes"] for k, v in ctx.done.items() if v["outcome"] != "error"}
    stable = sum(1 for hashes in mine.values() if len(set(hashes)) == 1)
    summary: dict[str, Any] = {
        "prompts": len(ctx.done),
        "self_consistent": stable,
        "errors": errors,
    }
    text = f"{stable}/{len(ctx.done)} prompts self-consistent over {RUNS} runs"
    if errors:
        return Outcome("error", "self-consistent", stable, summary, text + f"; errors {errors}")
    against = ctx.options.get("against")
    if not against:
        return Outcome("unjudged", "self-consistent", stable, summary, text)
    other = ctx.store.run(str(against))
    if other is None or other["gate"] != "greedy":
        raise UsageError(f"--against {against}: no greedy run with that id")
    theirs = {item["key"]: item["hashes"] for item in ctx.store.items(other["run_id"])}
    verdicts = {k: classify_greedy(mine[k], theirs[k]) for k in mine if k in theirs}
    if not verdicts:
        # No prompt in common: nothing was compared, so nothing can pass.
        text += f"; vs {other['run_id']}: no prompt in common, nothing compared"
        return Outcome("error", "self-consistent", stable, summary, text)
    summary.update(
        against=other["run_id"], comparison=verdicts, counts=dict(Counter(verdicts.values()))
    )
    text += f"; vs {other['run_id']}: {dict(Counter(verdicts.values()))}"
    status = "fail" if DIFFERS_FROM_OTHER in verdicts.values() else "pass"
    return Outcome(status, "self-consistent", stable, summary, text)
