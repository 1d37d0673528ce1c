"""What drives switches and gates together: the one module above both.

Gates never import the switch and the switch never imports gates; whatever needs both lives here.
The KLD gate's reference collection (switch to the reference profile through the switch protocol,
collect its top-K prompt logprobs, switch the candidate back), handed to the gate as its reference
source; and promotion (`paroctl switch NAME --gate GATES`): switch, run the gates cheapest first,
stop at the first failure, roll back through the switch protocol, record one decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paroctl.errors import StateError, UsageError

if TYPE_CHECKING:
    from paroctl.events import EventSink
    from paroctl.gates import GateResult
    from paroctl.gates.base import GateContext, Progress
    from paroctl.gates.kld import Reference, Request
    from paroctl.profile.profiles import Profile
    from paroctl.records import LiveRecord


def switch_to(
    profile: Profile,
    progress: Progress,
    events: EventSink | None = None,
    timeout_s: float | None = None,
) -> LiveRecord:
    """Make profile live through the switch protocol (its own rollback); return the live record."""
    from paroctl import state
    from paroctl.profile import profiles
    from paroctl.switch.switch import default_deps, switch

    progress.note(f"switching the live serve to {profile.name}")
    switch(profile, default_deps(events), load_profile=profiles.load, timeout_s=timeout_s)
    live = state.read_live()
    if live is None:
        raise StateError(f"the switch to {profile.name} left nothing live")
    return live


def kld_reference_by_switching(ctx: GateContext, request: Request) -> Reference:
    """Collect the KLD reference on the reference profile's own serve, then switch back."""
    from paroctl.gates import kld

    plan = request.plan
    same = plan.reference.name == plan.candidate.name
    booted = ctx.target.profile_hash
    if not same and plan.candidate.hash != booted:
        raise UsageError(
            f"{plan.candidate.name} changed since it booted (hash "
            f"{booted} -> {plan.candidate.hash}); switch to it first so "
            "the gate can switch back to the same build"
        )
    switches: list[str] = []
    live = ctx.target.live
    if not same:
        # It takes the candidate off the air for two boots: say so before, not after.
        ctx.progress.note(
            f"kld: no stored reference fits ({request.why}); switching the live serve to "
            f"{plan.reference.name} to collect one, then back to {plan.candidate.name}"
        )
    try:
        if not same:
            live = switch_to(plan.reference, ctx.progress)
            switches.append(plan.reference.name)
        with ctx.client.at(ctx.target.base_url if live is None else live.serve.url) as client:
            kld.check_tokenizer(client, plan.reference, request.text, request.probe_ids)
            version = client.version()
            rows = kld.collect_side(ctx, client, plan.reference, request)
        # Stored under the stack it really ran on: a cross-stack collection never matches later.
        kld.save_reference({**request.key, "server_version": version}, rows, kld.cache_dir())
    finally:
        if not same:
            live = switch_to(plan.candidate, ctx.progress)  # back to what was live at the start
            switches.append(plan.candidate.name)
            ctx.watch.rebind(live)  # the gate's own switches: its candidate now has a new boot
    return kld.Reference(
        rows=rows,
        note=request.why,
        switches=tuple(switches),
        candidate_url=ctx.target.base_url if live is None else live.serve.url,
        candidate_boot_id=None if live is None else live.boot_id,
    )


def run_kld(options: Mapping[str, Any], **kwargs: Any) -> GateResult:
    """The KLD gate on this box: a reference the store lacks is collected by switching."""
    from paroctl.gates import run_gate

    return run_gate("kld", options, kld_reference=kld_reference_by_switching, **kwargs)


# --- promotion: switch, gate against the build it replaces, keep it or roll back -------------

# Cheapest and most decisive first: a broken serve fails in seconds, not after GSM8K.
ORDER = ("sanity", "greedy", "decode", "prefill", "concurrency", "kld", "gsm8k")
# A promotion's gates are short versions unless the band or the caller's options say otherwise.
SHORT = {"gsm8k": {"limit": 200}, "kld": {"chunks": 32}}
# What `switch --gate-limit N` bounds, per gate.
LIMITED = {"gsm8k": "limit"}
DECISIONS = {
    "promoted": "pass",
    "rolled back": "fail",
    "inconclusive": "unjudged",
    "interrupted": "interrupted",
}
# Promotion progress goes to the switch's display: on a terminal its live line, in a log one
# line each; at most one per this many seconds (GSM8K on the CPU box: ~2 h for 200 questions).
PROGRESS_INTERVAL_S = 10.0


@dataclass(frozen=True)
class Verdict:
    """One gate of a promotion: pass / fail / inconclusive, its run and the evidence."""

    gate: str
    verdict: str
    run_id: str | None
    evidence: str
    paired: dict[str, Any] | None = None


@dataclass(frozen=True)
class Decision:
    """What a promotion decided, every gate's verdict, and where the record is stored."""

    target: str
    previous: str | None
    decision: str  # promoted | rolled back | inconclusive | planned
    verdicts: tuple[Verdict, ...]
    run_id: str | None
    message: str

    @property
    def failed(self) -> bool:
        """Whether a gate failed and the new build was rolled back (exit 1)."""
        return self.decision == "rolled back"

    @property
    def exit_code(self) -> int:
        """0 promoted (or planned), 1 a gate failed, 2 the gates could not decide, 130 stopped."""
        return {"rolled back": 1, "inconclusive": 2, "interrupted": 130}.get(self.decision, 0)

    def lines(self) -> list[str]:
        """The decision and each gate's verdict with its evidence, for the CLI to print."""
        gates = [f"{v.gate}: {v.verdict.upper()} — {v.evidence}" for v in self.verdicts]
        record = [f"decision record: {self.run_id} (paroctl results show)"] if self.run_id else []
        return [*gates, self.message, *record]


def gate_list(spec: str, profile: Profile) -> tuple[str, ...]:
    """The gates a `--gate` spec names ("suite" or a comma list), cheapest first."""
    from paroctl.gates import GATES

    names = profile.body.gates.suite if spec == "suite" else tuple(spec.split(","))
    unknown = [name for name in names if name not in GATES]
    if unknown or not names:
        raise UsageError(
            f"--gate {spec}: unknown gate {', '.join(unknown) or '(none)'}; "
            f"use suite or a comma list of {', '.join(GATES)}"
        )
    return tuple(sorted(dict.fromkeys(names), key=ORDER.index))


def decide(verdicts: Sequence[Verdict], rule: str) -> str:
    """promoted / rolled back / inconclusive from the verdicts and the profile's rule."""
    if any(v.verdict == "fail" for v in verdicts):
        return "rolled back"
    if any(v.verdict == "inconclusive" for v in verdicts):
        return "promoted" if rule == "promote" else "inconclusive"
    return "promoted"


def plan_lines(target: Profile, previous: str | None, gates: Sequence[str]) -> list[str]:
    """What `switch NAME --gate ... --dry-run` would do, step by step."""
    back = f"switch back to {previous} (verified)" if previous else "stop (nothing was live)"
    rule = target.body.gates.inconclusive
    return [
        f"switch {previous or '(nothing)'} -> {target.name} (verified by the switch)",
        *[f"gate {name}" for name in gates],
        f"on the first failed gate: stop, {back}",
        f"on an inconclusive gate: {'promote' if rule == 'promote' else back} "
        f"(gates.inconclusive: {rule})",
    ]


def gate_options(
    name: str, target: Profile, options: Mapping[str, Any] | None, limit: int | None
) -> dict[str, Any]:
    """One gate's options in a promotion: the short version, unless the profile's band sets its
    own (`gates.gsm8k.limit`), then the caller's options, then `--gate-limit`."""
    opts = dict(SHORT.get(name, {}))
    band = getattr(target.body.gates, name, None)
    fields_set: set[str] = set(getattr(band, "model_fields_set", ()))
    for key in [key for key in opts if key in fields_set]:
        opts[key] = getattr(band, key)  # the band's own value, stored with the run
    opts.update(dict((options or {}).get(name) or {}))
    if limit is not None and name in LIMITED:
        opts[LIMITED[name]] = limit
    return opts


def _progress(events: EventSink | None) -> Progress:
    """Gate progress for the switch's display: counts as "progress" events, notes as steps."""
    from paroctl.events import Event, ProgressLines
    from paroctl.gates.base import NoProgress

    if events is None:
        return NoProgress()
    sink = events
    return ProgressLines(
        lambda line: sink(Event("progress", line)),
        interval_s=PROGRESS_INTERVAL_S,
        say=lambda line: sink(Event("step", line)),
    )


def run(
    profile_name: str,
    gates: str,
    *,
    dry_run: bool = False,
    options: Mapping[str, Any] | None = None,
    store_path: Path | None = None,
    events: EventSink | None = None,
    timeout_s: float | None = None,
    limit: int | None = None,
    keep_on_interrupt: bool = False,
) -> Decision:
    """`paroctl switch NAME --gate GATES`: switch, gate, and keep the new build only if it holds.

    limit: `--gate-limit`, the questions GSM8K asks (else the band's, else 200). Ctrl-C or
    SIGTERM during a gate stops it at once (its answers kept), rolls back (or keeps NAME live
    with keep_on_interrupt), records the decision, then raises KeyboardInterrupt saying so.
    """
    from paroctl import state
    from paroctl.profile import profiles

    target = profiles.load(profile_name)
    names = gate_list(gates, target)
    live = state.read_live()
    previous = live.serve.profile if live else None
    if dry_run:
        lines = plan_lines(target, previous, names)
        return Decision(target.name, previous, "planned", (), None, "\n".join(lines))
    progress = _progress(events)
    candidate = switch_to(target, progress, events, timeout_s)
    # Opened before the first gate: a promotion killed outright leaves a record that says so.
    run_id = _open_record(target, candidate, names, store_path)
    verdicts: list[Verdict] = []
    name = names[0]
    try:
        for name in names:
            opts = gate_options(name, target, options, limit)
            verdict = _gate(name, opts, target, live, store_path, progress)
            verdicts.append(verdict)
            if verdict.verdict == "fail":
                break
    except KeyboardInterrupt as exc:
        verdicts.append(
            Verdict(name, "interrupted", getattr(exc, "run_id", None), str(exc) or "Ctrl-C")
        )
        back = _Back(progress, events, keep_on_interrupt)
        stopped = _interrupted(target, candidate, live, verdicts, run_id, back, store_path)
        raise KeyboardInterrupt(f"{stopped.message}; decision record {stopped.run_id}") from exc
    decision = decide(verdicts, target.body.gates.inconclusive)
    if decision != "promoted":
        _roll_back(previous, progress, events)
    return _record(run_id, target, candidate, live, decision, verdicts, store_path)


@dataclass(frozen=True)
class _Back:
    """How an interrupted promotion goes back: its display, and whether to keep the candidate."""

    progress: Progress
    events: EventSink | None
    keep: bool


def _interrupted(
    target: Profile,
    candidate: LiveRecord,
    previous: LiveRecord | None,
    verdicts: Sequence[Verdict],
    run_id: str,
    how: _Back,
    store_path: Path | None,
) -> Decision:
    """Ctrl-C or SIGTERM during a gate: roll back (or keep the candidate), record why."""
    from paroctl.errors import ParoctlError

    back = previous.serve.profile if previous else None
    if how.keep:
        what = "kept live as asked"
    else:
        how.progress.note(f"interrupted: rolling back to {back or 'nothing live'}")
        try:
            _roll_back(back, how.progress, how.events)
            what = f"rolled back to {back}" if back else "stopped (nothing was live before)"
        except ParoctlError as exc:
            what = f"the rollback to {back} FAILED ({exc.message}); see `paroctl status`"
    return _record(
        run_id, target, candidate, previous, "interrupted", verdicts, store_path, what=what
    )


def _gate(
    name: str,
    opts: dict[str, Any],
    target: Profile,
    previous: LiveRecord | None,
    store_path: Path | None,
    progress: Progress,
) -> Verdict:
    from paroctl.errors import EXIT_INTERRUPTED, ParoctlError
    from paroctl.gates import run_gate

    try:
        result = run_gate(
            name,
            opts,
            kld_reference=kld_reference_by_switching,
            store_path=store_path,
            progress=progress,
        )
    except ParoctlError as exc:
        if exc.exit_code == EXIT_INTERRUPTED:  # a signal during the gate's own switch (kld)
            raise KeyboardInterrupt(exc.message) from exc
        # The gate could not measure: neither a pass nor a fail; the profile's rule decides.
        return Verdict(name, "inconclusive", None, f"could not run: {exc.message}")
    verdict = {"pass": "pass", "fail": "fail"}.get(result.status, "inconclusive")
    if name != "gsm8k" or previous is None or verdict == "fail":
        return Verdict(name, verdict, result.run_id, result.message)
    paired = paired_gsm8k(result.run_id, previous, target.body.gates.gsm8k_margin, store_path)
    if paired is None:
        return Verdict(name, verdict, result.run_id, result.message + "; no paired run to compare")
    # The absolute band still applies; the paired test can only make the verdict stricter,
    # or decide where no band does.
    combined = (
        paired["verdict"] if verdict == "inconclusive" or paired["verdict"] != "pass" else verdict
    )
    evidence = (
        f"{result.message}; paired with {paired['against']}: {paired['old_only']} right only "
        f"before, {paired['new_only']} right only now of {paired['n']}, McNemar p "
        f"{paired['p_value']:.3g}, loss {paired['loss']:+.1%} (margin {paired['margin']:.1%})"
    )
    return Verdict(name, combined, result.run_id, evidence, paired)


def paired_gsm8k(
    run_id: str, previous: LiveRecord, margin: float, store_path: Path | None
) -> dict[str, Any] | None:
    """McNemar against the previous build's newest GSM8K run on the same prompts, if it has one."""
    from dataclasses import asdict

    from paroctl.gates import gsm8k, stats
    from paroctl.store.results import open_store

    with open_store(store_path) as store:
        new = store.run(run_id)
        assert new is not None
        mine = new["summary"]
        same = ("fewshot", "mode", "metric")
        old = next(
            (
                run
                for run in store.runs(gate="gsm8k")
                if run["profile"] == previous.serve.profile
                and run["profile_hash"] == (previous.serve.hash or None)
                and run["status"] in ("pass", "fail", "unjudged")
                and all(run["summary"].get(k) == mine.get(k) for k in same)
            ),
            None,
        )
        if old is None:
            return None
        metric = str(mine["metric"])
        before = gsm8k.correct_by_item(store.items(old["run_id"]), metric)
        now = gsm8k.correct_by_item(store.items(run_id), metric)
    paired = stats.paired_noninferiority(before, now, margin)
    return {**asdict(paired), "against": old["run_id"], "margin": margin}


def _roll_back(previous: str | None, progress: Progress, events: EventSink | None) -> None:
    from paroctl import state
    from paroctl.profile import profiles
    from paroctl.switch.switch import default_deps, stop_live

    if previous is None:
        live = state.read_live()
        if live:
            stop_live(live, default_deps(events))  # nothing was live before: leave nothing live
        return
    switch_to(profiles.load(previous), progress, events)


def _provenance(candidate: LiveRecord, target: Profile) -> Any:
    from paroctl.gates.base import paroctl_version
    from paroctl.store.results import Provenance

    return Provenance(
        profile=target.name,
        profile_hash=candidate.serve.hash or None,
        knobs=dict(candidate.knobs),
        image=candidate.image,
        boot_id=candidate.boot_id,
        first_boot=candidate.first_boot,
        paroctl_version=paroctl_version(),
        server_version=None,
    )


def _open_record(
    target: Profile, candidate: LiveRecord, names: Sequence[str], store_path: Path | None
) -> str:
    """The decision record, opened as running (with this process's pid) before the gates."""
    import os

    from paroctl.store.results import new_run_id, open_store

    run_id = new_run_id("promote")
    with open_store(store_path) as store:
        options = {"gates": list(names), "pid": os.getpid()}
        store.start_run(run_id, "promote", _provenance(candidate, target), options)
    return run_id


def _record(
    run_id: str,
    target: Profile,
    candidate: LiveRecord,
    previous: LiveRecord | None,
    decision: str,
    verdicts: Sequence[Verdict],
    store_path: Path | None,
    what: str | None = None,
) -> Decision:
    """Close the decision record: decision, every gate's evidence, the old runs."""
    from dataclasses import asdict

    from paroctl.store.results import open_store

    gates_text = "; ".join(f"{v.gate} {v.verdict}" for v in verdicts)
    message = f"{decision}: {target.name}{f', {what}' if what else ''} ({gates_text})"
    with open_store(store_path) as store:
        old_runs = (
            [r["run_id"] for r in store.last_gate_results(previous.serve.profile)]
            if previous
            else []
        )
        summary = {
            "decision": decision,
            "rule": target.body.gates.inconclusive,
            "gates": [asdict(v) for v in verdicts],
            "previous": {
                "profile": previous.serve.profile if previous else None,
                "hash": (previous.serve.hash or None) if previous else None,
                "boot_id": previous.boot_id if previous else None,
                "run_ids": old_runs,
            },
        }
        if what:
            summary["outcome"] = what
        store.finish_run(run_id, DECISIONS[decision], summary, message=message)
    prev_name = previous.serve.profile if previous else None
    return Decision(target.name, prev_name, decision, tuple(verdicts), run_id, message)


def last_decision_line(store_path: Path | None = None) -> str | None:
    """The newest promotion as `status` shows it; None when there is none.

    A promotion still "running" whose process is gone was killed outright (SIGKILL): its
    candidate may be live with no decision taken.
    """
    from paroctl.store.results import open_store

    with open_store(store_path) as store:
        runs = store.runs(gate="promote", limit=1)
    if not runs:
        return None
    run = runs[0]
    if run["status"] != "running":
        return f"promote: {run['message']} ({run['finished_at']}; {run['run_id']})"
    pid = int(run["options"].get("pid") or 0)
    if pid > 0 and _alive(pid):
        return f"promote: {run['profile']} being gated (paroctl pid {pid}; {run['run_id']})"
    return (
        f"promote: {run['profile']} INTERRUPTED with no decision (paroctl pid {pid} is gone; "
        f"{run['run_id']}): it may be live ungated; `paroctl switch NAME` to choose"
    )


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process holds that pid: it exists
    return True
