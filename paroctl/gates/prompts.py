"""Deterministic prompts cut from a fixed corpus, as token ids of exactly the asked length."""

from __future__ import annotations

import random

from paroctl.gates.base import GateContext

# WikiText-2 averages ~4.5 characters per token under a BPE tokenizer; cut generously and trim.
CHARS_PER_TOKEN = 6


def tokenize(ctx: GateContext, text: str, special: bool = False) -> list[int]:
    """Token ids of text under the served tokenizer (special tokens only when asked)."""
    payload = {"model": ctx.target.model, "prompt": text, "add_special_tokens": special}
    return ctx.client.post("/tokenize", payload).tokens()


def corpus_ids(ctx: GateContext, corpus: str, rng: random.Random, n_tokens: int) -> list[int]:
    """Exactly n_tokens ids of corpus text from an offset drawn from rng (seeded: repeatable)."""
    span = n_tokens * CHARS_PER_TOKEN
    if span >= len(corpus):
        raise ValueError(f"the corpus ({len(corpus)} chars) is too short for {n_tokens} tokens")
    offset = rng.randrange(0, len(corpus) - span)
    ids = tokenize(ctx, corpus[offset : offset + span])
    while len(ids) < n_tokens:
        span *= 2
        ids = tokenize(ctx, corpus[offset : offset + span])
    # Drop the first id: the cut may land inside a word, and a stable start reads better.
    return ids[1 : n_tokens + 1] if len(ids) > n_tokens else ids[:n_tokens]


def seeded(seed: int, *parts: object) -> random.Random:
    """A random stream fixed by the seed and a label: the same prompt every run, every machine."""
    return random.Random(":".join([str(seed), *map(str, parts)]))
