"""What drives switches and gates together: the one module above both.

Gates never import the switch and the switch never imports gates; whatever needs both lives here.
Today: the KLD gate's reference collection (switch to the reference profile through the switch
protocol, collect its top-K prompt logprobs, switch the candidate back), handed to the gate as
its reference source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from paroctl.errors import StateError

if TYPE_CHECKING:
    from paroctl.gates import GateResult
    from paroctl.gates.base import GateContext, Progress
    from paroctl.gates.kld import Reference, Request
    from paroctl.profiles import Profile


def switch_to(profile: Profile, progress: Progress) -> Mapping[str, Any]:
    """Make profile live through the switch protocol (its own rollback); return the live record."""
    from paroctl import profiles, state
    from paroctl.switch import default_deps, switch

    progress.start(f"switch to {profile.name}", 1)
    switch(profile, default_deps(), load_profile=profiles.load)
    progress.advance()
    live = state.read_live()
    if live is None:
        raise StateError(f"the switch to {profile.name} left nothing live")
    return live


def kld_reference_by_switching(ctx: GateContext, request: Request) -> Reference:
    """Collect the KLD reference on the reference profile's own serve, then switch back."""
    from paroctl.gates import base, kld

    plan = request.plan
    same = plan.reference.name == plan.candidate.name
    if not same and plan.candidate.hash != ctx.target.live.get("hash"):
        raise StateError(
            f"{plan.candidate.name} changed since it booted (hash "
            f"{ctx.target.live.get('hash')} -> {plan.candidate.hash}); switch to it first so "
            "the gate can switch back to the same build"
        )
    switches: list[str] = []
    live: Mapping[str, Any] = ctx.target.live
    try:
        if not same:
            live = switch_to(plan.reference, ctx.progress)
            switches.append(plan.reference.name)
        with ctx.client.at(base.base_url_of(live)) as client:
            kld.check_tokenizer(client, plan.reference, request.text, request.probe_ids)
            version = client.version()
            rows = kld.collect_side(ctx, client, plan.reference, request)
        # Stored under the stack it really ran on: a cross-stack collection never matches later.
        kld.save_reference({**request.key, "server_version": version}, rows, kld.cache_dir())
    finally:
        if not same:
            live = switch_to(plan.candidate, ctx.progress)  # back to what was live at the start
            switches.append(plan.candidate.name)
    return kld.Reference(
        rows=rows,
        note=request.why,
        switches=tuple(switches),
        candidate_url=base.base_url_of(live),
        candidate_boot_id=live.get("boot_id"),
    )


def run_kld(options: Mapping[str, Any], **kwargs: Any) -> GateResult:
    """The KLD gate on this box: a reference the store lacks is collected by switching."""
    from paroctl.gates import run_gate

    return run_gate("kld", options, kld_reference=kld_reference_by_switching, **kwargs)
