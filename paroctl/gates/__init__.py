"""The gates: run one against the live serve, record it with provenance, judge it by its band."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl.errors import ProfileError, StateError
from paroctl.gates.base import (
    GateContext,
    NoProgress,
    Outcome,
    Progress,
    Requester,
    base_url_of,
    connect,
    paroctl_version,
    read_target_record,
    wrap_failure,
)

# name -> module; each module has run(ctx) -> Outcome. Imported only when its gate runs.
GATES = {
    "sanity": "paroctl.gates.sanity",
    "gsm8k": "paroctl.gates.gsm8k",
    "decode": "paroctl.gates.decode",
    "prefill": "paroctl.gates.prefill",
    "concurrency": "paroctl.gates.concurrency",
    "greedy": "paroctl.gates.greedy",
    "kld": "paroctl.gates.kld",
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


def run_gate(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    progress: Progress | None = None,
    resume: str | None = None,
    store_path: Path | None = None,
) -> GateResult:
    """Run one gate against the live serve; StateError/RuntimeFailure when it cannot run."""
    from paroctl import profiles
    from paroctl.client import Client
    from paroctl.results import Provenance, new_run_id, open_store

    if name not in GATES:
        raise StateError(f"no gate {name!r} (known: {', '.join(GATES)}, suite)")
    live = read_target_record()
    client = Client(base_url_of(live), retries=3)
    opts = {k: v for k, v in dict(options or {}).items() if v is not None}
    with open_store(store_path) as store:
        target = connect(live, client)
        try:
            profile: profiles.Profile | None = profiles.load(target.profile)
        except ProfileError:
            # The profile file may be gone or broken since it booted: gate unjudged, still recorded.
            profile = None
        if resume:
            run_id, opts = _resumable(store, resume, name, live, opts)
            store.reopen_run(run_id)
        else:
            run_id = new_run_id(name)
            provenance = Provenance(
                profile=target.profile,
                profile_hash=live.get("hash"),
                knobs=live.get("knobs") or {},
                image=live.get("image"),
                boot_id=live.get("boot_id"),
                first_boot=live.get("first_boot"),
                paroctl_version=paroctl_version(),
                server_version=target.server_version,
            )
            store.start_run(run_id, name, provenance, opts)
        ctx = GateContext(
            target=target,
            client=client,
            requester=Requester(
                target.base_url,
                retries=int(opts.get("retries", 3)),
                backoff_s=float(opts.get("backoff_s", 0.5)),
                timeout_s=float(opts.get("timeout_s", 600.0)),
            ),
            store=store,
            run_id=run_id,
            options=opts,
            profile=profile,
            progress=progress or NoProgress(),
        )
        if resume:
            ctx.done = {item["key"]: item for item in store.items(run_id)}
        module = importlib.import_module(GATES[name])
        gate_run: Callable[[GateContext], Outcome] = module.run
        try:
            outcome = gate_run(ctx)
        except Exception as exc:
            error = wrap_failure(exc)
            # Items stay stored; the run is marked error and can be finished with --resume.
            store.finish_run(run_id, "error", {}, message=error.message)
            client.close()
            raise error from exc
        store.finish_run(
            run_id,
            outcome.status,
            outcome.summary,
            headline_name=outcome.headline_name,
            headline=outcome.headline,
            message=outcome.message,
        )
    client.close()
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


def _resumable(
    store: Any, run_id: str, name: str, live: Mapping[str, Any], opts: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    run = store.run(run_id)
    if run is None:
        raise StateError(f"no run {run_id!r} in the results store; see `paroctl results list`")
    if run["gate"] != name:
        raise StateError(f"run {run['run_id']} is a {run['gate']} run, not {name}")
    if run["status"] not in ("running", "error"):
        raise StateError(f"run {run['run_id']} already finished ({run['status']}); nothing to do")
    if run["profile"] != live["profile"] or run["profile_hash"] != live.get("hash"):
        raise StateError(
            f"run {run['run_id']} was started on {run['profile']} ({run['profile_hash']}); "
            f"the live serve is {live['profile']} ({live.get('hash')}): switch back to resume it"
        )
    # The stored options win: a resumed run must ask the same questions the same way.
    merged = {**opts, **run["options"]}
    return str(run["run_id"]), merged
