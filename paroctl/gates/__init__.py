"""The gates: run one against the live serve, record it with provenance, judge it by its band."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paroctl.errors import ProfileError, UsageError
from paroctl.gates.base import (
    EXTERNAL,
    GateContext,
    NoProgress,
    Outcome,
    Progress,
    Target,
    base_url_of,
    connect,
    connect_external,
    paroctl_version,
    read_target_record,
    wrap_failure,
)
from paroctl.gates.watch import ServeChanged, ServeWatch

if TYPE_CHECKING:
    from paroctl.profile.profiles import Profile
    from paroctl.records import LiveRecord
    from paroctl.store.results import Store

# name -> module; each module has run(ctx) -> Outcome. Imported only when its gate runs.
GATES = {
    "sanity": "paroctl.gates.sanity",
    "gsm8k": "paroctl.gates.gsm8k",
    "decode": "paroctl.gates.decode",
    "prefill": "paroctl.gates.prefill",
    "concurrency": "paroctl.gates.concurrency",
    "greedy": "paroctl.gates.greedy",
    "kld": "paroctl.gates.kld",
    "lm-eval": "paroctl.gates.lmeval",
}
# The suite runs cheap, mechanical gates first: a broken serve fails in seconds, not after GSM8K.
SUITE = ("sanity", "greedy", "gsm8k", "decode", "prefill", "concurrency")


@dataclass(frozen=True)
class GateResult:
    """One finished gate run, as the CLI reports it."""

    run_id: str
    gate: str
    profile: str
    status: str
    headline_name: str
    headline: float | None
    message: str
    summary: dict[str, Any]

    @property
    def failed(self) -> bool:
        """Whether the model is outside the band (exit 1)."""
        return self.status == "fail"


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible endpoint given by URL instead of this box's live serve."""

    url: str
    model: str
    api_key: str | None = None  # sent as a bearer token, never stored
    bands: str | None = None  # a profile whose gate bands judge the run (else unjudged)


def api_key(key_file: Path | None = None) -> str | None:
    """The API key from --api-key-file, else PAROCTL_API_KEY, else None."""
    from paroctl import env

    if key_file is None:
        return env.get("PAROCTL_API_KEY") or None
    try:
        key = key_file.expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--api-key-file {key_file}: cannot read it ({exc})") from exc
    if not key or len(key.split()) != 1:
        raise UsageError(f"--api-key-file {key_file}: expected one key on one line")
    return key


def run_gate(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    progress: Progress | None = None,
    resume: str | None = None,
    store_path: Path | None = None,
    endpoint: Endpoint | None = None,
    kld_reference: Callable[..., Any] | None = None,
    key: str | None = None,
) -> GateResult:
    """Run one gate against the live serve or an endpoint; ParoctlError when it cannot run.

    key: the API key for the live serve (an endpoint carries its own); sent, never stored.
    """
    from paroctl.client import Client
    from paroctl.store.results import open_store

    if name not in GATES:
        raise UsageError(f"no gate {name!r} (known: {', '.join(GATES)}, suite)")
    opts = {k: v for k, v in dict(options or {}).items() if v is not None}
    if endpoint is not None:
        # Stored with the run (never the key): a resume must reach the same endpoint and model.
        opts.update(url=endpoint.url.rstrip("/"), model=endpoint.model)
    live: LiveRecord | None = None
    if endpoint is None:
        live = read_target_record()
        url = base_url_of(live)
    else:
        url = endpoint.url
    # Taken before the first request: a switch from here on stops the run (ServeChanged).
    watch = ServeWatch(live)
    with open_store(store_path) as store:
        if resume:
            run_id, opts = _resumable(store, resume, name, live, opts)
        client = Client(
            url,
            retries=int(opts.get("retries", 3)),
            backoff_s=float(opts.get("backoff_s", 0.5)),
            timeout_s=float(opts.get("timeout_s", 600.0)),
            api_key=endpoint.api_key if endpoint else key,
        )
        with client:
            target = connect(live, client) if live else connect_external(client, str(opts["model"]))
            profile = _bands_profile(target, endpoint)
            if resume:
                store.reopen_run(run_id)
            else:
                run_id = new_run(store, name, target, opts)
            ctx = GateContext(
                target=target,
                client=client,
                store=store,
                run_id=run_id,
                options=opts,
                profile=profile,
                progress=progress or NoProgress(),
                kld_reference=kld_reference,
                watch=watch,
            )
            if resume:
                ctx.done = {item["key"]: item for item in store.items(run_id)}
            outcome = _run_module(name, ctx)
    return GateResult(
        run_id=run_id,
        gate=name,
        profile=target.profile,
        status=outcome.status,
        headline_name=outcome.headline_name,
        headline=outcome.headline,
        message=outcome.message,
        summary=outcome.summary,
    )


def _bands_profile(target: Target, endpoint: Endpoint | None) -> Profile | None:
    from paroctl.profile import profiles

    if endpoint is not None:
        # An endpoint's bands come only from a profile named for them: it is not one of ours.
        return profiles.load(endpoint.bands) if endpoint.bands else None
    try:
        return profiles.load(target.profile)
    except ProfileError:
        # The profile file may be gone or broken since it booted: gate unjudged, still recorded.
        return None


def new_run(store: Store, name: str, target: Target, opts: Mapping[str, Any]) -> str:
    """Start a run in the store with the target's provenance; return its id."""
    from paroctl.store.results import Provenance, new_run_id

    live = target.live
    run_id = new_run_id(name)
    provenance = Provenance(
        profile=target.profile,
        profile_hash=target.profile_hash,
        knobs=dict(live.knobs) if live else {},
        image=live.image if live else None,
        boot_id=live.boot_id if live else None,
        first_boot=live.first_boot if live else None,
        paroctl_version=paroctl_version(),
        server_version=target.server_version,
    )
    store.start_run(run_id, name, provenance, dict(opts))
    return run_id


class GateInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a gate; its run is stored as interrupted, every answer kept."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


def _measured(ctx: GateContext, why: str) -> dict[str, Any]:
    """The summary of a run that stopped early: what it measured, and why it stopped."""
    outcomes: dict[str, int] = {}
    for item in ctx.done.values():
        outcomes[str(item["outcome"])] = outcomes.get(str(item["outcome"]), 0) + 1
    return {"stopped": why, "items": len(ctx.done), "outcomes": outcomes}


def _run_module(name: str, ctx: GateContext) -> Outcome:
    module = importlib.import_module(GATES[name])
    gate_run: Callable[[GateContext], Outcome] = module.run
    try:
        outcome = gate_run(ctx)
    except KeyboardInterrupt as exc:
        why = str(exc) or "Ctrl-C"
        message = (
            f"interrupted ({why}) after {len(ctx.done)} items, every answer kept; "
            f"`paroctl gate {name} --resume {ctx.run_id}` finishes it"
        )
        ctx.store.finish_run(ctx.run_id, "interrupted", _measured(ctx, why), message=message)
        raise GateInterrupted(f"{name} run {ctx.run_id} {message}", ctx.run_id) from exc
    except Exception as exc:
        error = wrap_failure(exc)
        # Items stay stored (every one from the serve the run names: ServeChanged stops before
        # storing one that may not be); the run is marked error and can be finished with --resume.
        summary = _measured(ctx, error.message)
        ctx.store.finish_run(ctx.run_id, "error", summary, message=error.message)
        if isinstance(exc, ServeChanged):
            raise ServeChanged(
                f"{name} stopped: {exc.message}; its {len(ctx.done)} items before that are stored "
                f"as run {ctx.run_id} ({ctx.target.profile})"
            ) from exc
        raise error from exc
    ctx.store.finish_run(
        ctx.run_id,
        outcome.status,
        outcome.summary,
        headline_name=outcome.headline_name,
        headline=outcome.headline,
        message=outcome.message,
    )
    return outcome


def _resumable(
    store: Any,
    run_id: str,
    name: str,
    live: LiveRecord | None,
    opts: dict[str, Any],
) -> tuple[str, dict[str, Any]]:
    run = store.run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id!r} in the results store; see `paroctl results list`")
    if run["gate"] != name:
        raise UsageError(f"run {run['run_id']} is a {run['gate']} run, not {name}")
    if run["status"] not in ("running", "error", "interrupted"):
        raise UsageError(f"run {run['run_id']} already finished ({run['status']}); nothing to do")
    if live is None:
        stored = (run["profile"], run["options"].get("url"), run["options"].get("model"))
        if stored != (EXTERNAL, opts.get("url"), opts.get("model")):
            raise UsageError(
                f"run {run['run_id']} was started on {stored[0]} {stored[1] or ''} "
                f"{stored[2] or ''}; resume it with the same --url and --model"
            )
    elif (run["profile"], run["profile_hash"]) != (live.serve.profile, live.serve.hash or None):
        raise UsageError(
            f"run {run['run_id']} was started on {run['profile']} ({run['profile_hash']}); "
            f"the live serve is {live.serve.profile} ({live.serve.hash or None}): switch back "
            "to resume it"
        )
    # The stored options win: a resumed run must ask the same questions the same way.
    merged = {**opts, **run["options"]}
    return str(run["run_id"]), merged
