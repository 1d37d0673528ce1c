"""KLD: the live serve's top-K prompt logprobs against a same-stack reference profile.

The corpus is tokenized once through the live serve's /tokenize and cut into identical token-id
chunks, so both sides score exactly the same positions. The gate scores against the stored
reference whose key matches every setting, or one its context's reference source hands it
(`switch.promote` collects it by switching to the reference profile and back: the gate itself
never switches, so gates never import the switch). Why same-stack: in the seed log every "served" KL
carried ~0.018 nats of another image's numerics until the reference ran on the candidate's stack.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.client import Client, Reply
from paroctl.errors import DataError, UsageError
from paroctl.gates import data
from paroctl.gates.base import GateContext, Outcome
from paroctl.gates.kl import KlStats, TokenRow, kl_stats
from paroctl.profile.profiles import Profile
from paroctl.serve import cpu

CACHE_FORMAT = 1
DEFAULT_CHUNKS = 96
DEFAULT_CHUNK_TOKENS = 128
DEFAULT_TOP_K = 20
# prompt_logprobs materializes whole-chunk full-vocab fp32 logits; seed 09-09: ~1,000-token
# chunks OOM'd a prod-sized serve. Refuse chunks past this rather than crash the reference.
MAX_CHUNK_TOKENS = 1024
# vLLM's --max-logprobs default when a profile does not set serve.max_logprobs.
VLLM_MAX_LOGPROBS = 20
CHARS_PER_TOKEN = 8  # generous: WikiText-2 runs ~4.5 characters per BPE token

Chunks = list[list[int]]
Rows = list[list[TokenRow]]


@dataclass(frozen=True)
class Plan:
    """What one KLD run measures: who against whom, on which chunks, at which K."""

    reference: Profile
    candidate: Profile
    corpus: str  # "wikitext2" or a file path
    chunks: int
    chunk_tokens: int
    top_k: int


# --- the reference store -------------------------------------------------------------------------


def cache_key(
    plan: Plan, corpus_sha: str, tokens_sha: str, server_version: str | None
) -> dict[str, Any]:
    """Every setting a stored reference depends on; it is reused only when all of them match."""
    image = plan.reference.body.image
    return {
        "format": CACHE_FORMAT,
        "reference": plan.reference.name,
        "profile_hash": plan.reference.hash,
        "image": image.ref if image else None,
        # On a CPU box the dtype is this machine's decision (paroctl/cpu.py), not the file's.
        "dtype": cpu.resolved(plan.reference).body.serve.dtype,
        # The stack the reference ran on must be the candidate's (the seed's cross-image offset).
        "server_version": server_version,
        "corpus": plan.corpus,
        "corpus_sha": corpus_sha,
        "tokens_sha": tokens_sha,
        "chunks": plan.chunks,
        "chunk_tokens": plan.chunk_tokens,
        "top_k": plan.top_k,
    }


def cache_dir() -> Path:
    """Where stored reference collections live (under PAROCTL_HOME)."""
    return state.home() / "kld"


def _stem(key: Mapping[str, Any]) -> str:
    return f"{key['reference']}-{_sha(json.dumps(key, sort_keys=True))}"


def load_reference(key: Mapping[str, Any], directory: Path) -> tuple[Rows | None, str]:
    """The stored rows whose key matches exactly, or None and why nothing stored could be reused."""
    stem = _stem(key)
    meta, rows_file = directory / f"{stem}.key.json", directory / f"{stem}.rows.json.gz"
    if meta.is_file() and rows_file.is_file() and json.loads(meta.read_text()) == dict(key):
        with gzip.open(rows_file, "rt", encoding="utf-8") as handle:
            return _rows_from_json(json.load(handle)), "reused the stored reference"
    return None, "collected: " + mismatch(key, directory)


def mismatch(key: Mapping[str, Any], directory: Path) -> str:
    """Why no stored reference fits: the differing keys of the newest one for the same profile."""
    stored = sorted(
        directory.glob(f"{key['reference']}-*.key.json"), key=lambda p: p.stat().st_mtime
    )
    if not stored:
        return f"no stored reference for {key['reference']}"
    old = json.loads(stored[-1].read_text())
    diffs = [
        f"{name} {old.get(name)!r} -> {value!r}"
        for name, value in key.items()
        if old.get(name) != value
    ]
    return "the stored reference differs in " + ", ".join(diffs) if diffs else "stored rows missing"


def save_reference(key: Mapping[str, Any], rows: Rows, directory: Path) -> Path:
    """Store a collection: rows first, then the key file that makes it findable."""
    stem = _stem(key)
    body = json.dumps(_rows_to_json(rows), separators=(",", ":")).encode()
    state.atomic_write(directory / f"{stem}.rows.json.gz", gzip.compress(body, mtime=0))
    state.atomic_write(directory / f"{stem}.key.json", json.dumps(dict(key), indent=1) + "\n")
    return directory / f"{stem}.rows.json.gz"


def _rows_to_json(rows: Rows) -> list[list[list[Any]]]:
    return [
        [[row.token, row.token_logprob, [[t, lp] for t, lp in row.top.items()]] for row in chunk]
        for chunk in rows
    ]


def _rows_from_json(raw: Sequence[Sequence[Sequence[Any]]]) -> Rows:
    return [
        [
            TokenRow({int(t): float(lp) for t, lp in top}, int(tok), float(lp0))
            for tok, lp0, top in chunk
        ]
        for chunk in raw
    ]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- chunks and collection -----------------------------------------------------------------------


def cut_chunks(ids: Sequence[int], chunks: int, chunk_tokens: int) -> Chunks:
    """Consecutive, non-overlapping chunks of exactly chunk_tokens ids from the start."""
    need = chunks * chunk_tokens
    if len(ids) < need:
        raise DataError(
            f"the corpus gives {len(ids)} tokens, fewer than {chunks} x {chunk_tokens}; "
            "ask for fewer or shorter chunks"
        )
    return [list(ids[i * chunk_tokens : (i + 1) * chunk_tokens]) for i in range(chunks)]


def parse_prompt_logprobs(
    reply: Reply | Mapping[str, Any], chunk: Sequence[int], top_k: int
) -> list[TokenRow]:
    """Rows for positions 1..T-1 of a chunk from a /v1/completions reply with prompt_logprobs."""
    answer = reply if isinstance(reply, Reply) else Reply(dict(reply), [], 0.0)
    raw = answer.prompt_logprobs()  # typed, or BadAnswer naming the field out of shape
    if len(raw) != len(chunk):
        raise DataError(f"expected {len(chunk)} prompt-logprob rows, got {len(raw)}")
    rows: list[TokenRow] = []
    # Position 0 has no logprobs: nothing precedes it.
    for position, listed in enumerate(raw[1:], start=1):
        token = chunk[position]
        if listed is None or token not in listed:
            raise DataError(f"position {position}: the prompt token {token} is not in the reply")
        top = {t: v.logprob for t, v in listed.items() if v.rank <= top_k}
        rows.append(TokenRow(top, token, listed[token].logprob))
    return rows


def collect(
    client: Client, model: str, chunks: Chunks, top_k: int, step: Callable[[], None]
) -> Rows:
    """Top-K prompt logprobs of every chunk, one request at a time (the same schedule each side)."""
    rows: Rows = []
    for chunk in chunks:
        payload = {
            "model": model,
            "prompt": chunk,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": top_k,
        }
        rows.append(parse_prompt_logprobs(client.post("/v1/completions", payload), chunk, top_k))
        step()
    return rows


# --- the gate ------------------------------------------------------------------------------------


def _plan(ctx: GateContext) -> Plan:
    from paroctl.profile import profiles

    candidate = ctx.profile
    if candidate is None:
        raise UsageError(
            f"the live profile {ctx.target.profile} cannot be loaded; it cannot be switched back"
        )
    band = candidate.body.gates.kld
    reference = ctx.opt("reference", band.reference if band else None)
    if not reference:
        raise UsageError(f"{candidate.name} has no gates.kld.reference; pass --reference PROFILE")
    plan = Plan(
        reference=profiles.load(str(reference)),
        candidate=candidate,
        corpus=str(ctx.opt("corpus", "wikitext2")),
        chunks=int(ctx.opt("chunks", DEFAULT_CHUNKS)),
        chunk_tokens=int(ctx.opt("chunk_tokens", DEFAULT_CHUNK_TOKENS)),
        top_k=int(ctx.opt("top_k", band.top_k if band else DEFAULT_TOP_K)),
    )
    _check_plan(plan)
    return plan


def _check_plan(plan: Plan) -> None:
    problems: list[str] = []
    if plan.chunks < 1 or plan.top_k < 1:
        problems.append("--chunks and --top-k must be at least 1")
    if not 2 <= plan.chunk_tokens <= MAX_CHUNK_TOKENS:
        problems.append(
            f"--chunk-tokens {plan.chunk_tokens} outside 2..{MAX_CHUNK_TOKENS} (prompt logprobs "
            "allocate whole-chunk full-vocab logits: long chunks OOM the serve)"
        )
    for profile in (plan.reference, plan.candidate):
        serve = profile.body.serve
        limit = serve.max_logprobs or VLLM_MAX_LOGPROBS
        if plan.top_k > limit:
            problems.append(
                f"{profile.path}: serve.max_logprobs is {limit}, below top-K {plan.top_k}; raise "
                "it in the profile (vLLM refuses larger requests)"
            )
        if plan.chunk_tokens >= serve.max_model_len:
            problems.append(
                f"{profile.path}: serve.max_model_len {serve.max_model_len} leaves no room for "
                f"{plan.chunk_tokens}-token chunks"
            )
    if problems:
        raise UsageError("kld cannot run:\n" + "\n".join(problems))


def _corpus_text(corpus: str) -> str:
    if corpus == "wikitext2":
        return data.load_corpus(None)
    path = Path(corpus).expanduser()
    if path.is_dir() or path.name == "wiki.test.raw":
        return data.load_corpus(path)
    if not path.is_file():
        raise UsageError(f"--corpus {corpus}: neither wikitext2 nor a readable file")
    return path.read_text(encoding="utf-8")


def _tokenize(client: Client, model: str, text: str) -> list[int]:
    return client.tokenize(model, text, special=False)


def _token_chunks(ctx: GateContext, plan: Plan, text: str) -> Chunks:
    # Tokenize only the prefix the chunks need (the whole WikiText-2 test set is ~1.3 MB).
    span = plan.chunks * plan.chunk_tokens * CHARS_PER_TOKEN
    ids = _tokenize(ctx.client, ctx.target.model, text[:span])
    if len(ids) < plan.chunks * plan.chunk_tokens and span < len(text):
        ids = _tokenize(ctx.client, ctx.target.model, text)
    return cut_chunks(ids, plan.chunks, plan.chunk_tokens)


def probe(text: str) -> str:
    """The corpus prefix both serves tokenize to prove they split text the same way."""
    return text[: 64 * CHARS_PER_TOKEN]


def check_tokenizer(client: Client, reference: Profile, text: str, mine: list[int]) -> None:
    """DataError unless the reference serve tokenizes the probe as the candidate did."""
    # Token ids are only comparable when both serves split text the same way.
    theirs = _tokenize(client, reference.body.model.served_names[0], probe(text))
    if mine != theirs:
        raise DataError(
            f"{reference.name} tokenizes differently from the candidate: the KL is undefined"
        )


@dataclass(frozen=True)
class Request:
    """What the gate asks of a reference source: the plan, the chunks, the key, the corpus."""

    plan: Plan
    chunks: Chunks
    key: dict[str, Any]
    text: str
    probe_ids: list[int]
    why: str = ""  # why nothing stored fits ("collected: ..."), for the summary


@dataclass(frozen=True)
class Reference:
    """The reference rows the gate scores against, and what getting them did to the box."""

    rows: Rows
    note: str
    switches: tuple[str, ...] = ()
    # Where the candidate answers after a source switched away and back (its new boot).
    candidate_url: str | None = None
    candidate_boot_id: str | None = None


# Collects a reference the store does not hold (paroctl.switch.promote's switches to it and back).
ReferenceSource = Callable[[GateContext, Request], Reference]


def collect_side(ctx: GateContext, client: Client, profile: Profile, request: Request) -> Rows:
    """One side's top-K prompt logprobs over the request's chunks, with progress."""
    top_k = request.plan.top_k
    ctx.progress.start(f"{profile.name}: top-{top_k} prompt logprobs", len(request.chunks))
    model = profile.body.model.served_names[0]
    return collect(client, model, request.chunks, top_k, ctx.progress.advance)


def run(ctx: GateContext) -> Outcome:
    """Score the candidate against the stored reference, or one the context's source collects."""
    plan = _plan(ctx)
    text = _corpus_text(plan.corpus)
    chunks = _token_chunks(ctx, plan, text)
    key = cache_key(plan, _sha(text), _sha(json.dumps(chunks)), ctx.target.server_version)
    rows, note = load_reference(key, cache_dir())
    reference = Reference(rows, note) if rows is not None else None
    if reference is None:
        source: ReferenceSource | None = ctx.kld_reference
        if source is None:
            raise DataError(
                f"kld: no stored reference fits ({note}); on the box, `paroctl gate kld` "
                f"collects one by switching to {plan.reference.name} and back"
            )
        probe_ids = _tokenize(ctx.client, ctx.target.model, probe(text))
        reference = source(ctx, Request(plan, chunks, key, text, probe_ids, note))
    moved = reference.candidate_url not in (None, ctx.target.base_url)
    candidate = ctx.client.at(str(reference.candidate_url)) if moved else ctx.client
    try:
        asked = Request(plan, chunks, key, text, [])
        cand_rows = collect_side(ctx, candidate, plan.candidate, asked)
    finally:
        if moved:
            candidate.close()
    for index, (ref, cand) in enumerate(zip(reference.rows, cand_rows, strict=True)):
        chunk = kl_stats(ref, cand)
        ctx.record(
            f"chunk-{index:03d}",
            "ok",
            {"positions": chunk.n, "mean_kl": chunk.kl.mean, "same_top": chunk.same_top.mean},
        )
    flat_ref = [r for c in reference.rows for r in c]
    stats = kl_stats(flat_ref, [r for c in cand_rows for r in c])
    live = ctx.target.live
    boot_id = reference.candidate_boot_id or (live.boot_id if live else None)
    return _verdict(plan, stats, reference, boot_id, key)


def _verdict(
    plan: Plan, stats: KlStats, ref: Reference, boot_id: Any, key: Mapping[str, Any]
) -> Outcome:
    band = plan.candidate.body.gates.kld
    setup = (
        f"top-{plan.top_k}, {plan.chunks} chunks x {plan.chunk_tokens} tokens of {plan.corpus}, "
        f"{stats.n} positions, reference {plan.reference.name}"
    )
    numbers = (
        f"mean KL {stats.kl.mean:.4f} ± {stats.kl.stderr:.4f} nats (median {stats.kl_median:.4f}, "
        f"p99 {stats.kl_p99:.4f}, max {stats.kl_max:.4f}), same top {stats.same_top.mean:.1%}, "
        f"RMS Δp {stats.delta_p_rms.mean:.1%} ({setup}; {ref.note})"
    )
    summary: dict[str, Any] = {
        **stats.as_dict(),
        "reference": plan.reference.name,
        "reference_hash": plan.reference.hash,
        "corpus": plan.corpus,
        "chunks": plan.chunks,
        "chunk_tokens": plan.chunk_tokens,
        "top_k": plan.top_k,
        "cache": ref.note,
        "cache_key": dict(key),
        "switches": list(ref.switches),
        "candidate_boot_id": boot_id,
    }
    status = "unjudged"
    if band is None:
        text = f"{numbers}; no gates.kld band: not judged"
    elif band.reference != plan.reference.name or band.top_k != plan.top_k:
        text = f"{numbers}; the band is for {band.reference} at top-{band.top_k}: not judged"
    else:
        ok = stats.kl.mean <= band.max_mean_kl and stats.same_top.mean >= band.min_top1
        status = "pass" if ok else "fail"
        text = f"{numbers}; band: KL <= {band.max_mean_kl}, same top >= {band.min_top1:.1%}"
        summary["band"] = band.model_dump()
    return Outcome(status, "mean KL", stats.kl.mean, summary, text)
