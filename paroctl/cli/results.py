"""`paroctl results list|show|compare`: the stored gate runs."""

from __future__ import annotations

import json
from typing import Any

import click

from paroctl.errors import UsageError


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _get(store: Any, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    if run is None:
        raise UsageError(f"no run {run_id!r}; see `paroctl results list`")
    return dict(run)


@click.group("results")
def results() -> None:
    """Stored gate runs: list, show, compare."""


@results.command("list")
@click.option("--profile", help="Only this profile's runs.")
@click.option("--gate", "gate_name", help="Only this gate's runs.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True,
    help="At most this many runs (a number past the store's size lists them all).",
)  # fmt: skip
def results_list(profile: str | None, gate_name: str | None, limit: int) -> None:
    """List runs, newest first."""
    from rich.console import Console
    from rich.table import Table

    from paroctl.store.results import open_store

    with open_store() as store:
        runs = store.runs(profile=profile, gate=gate_name, limit=limit)
    table = Table("run", "gate", "profile", "status", "headline", "boot", "started")
    for run in runs:
        head = f"{_fmt(run['headline'])} {run['headline_name'] or ''}".strip()
        table.add_row(
            run["run_id"], run["gate"], run["profile"], run["status"], head,
            str(run["boot_id"] or "-"), run["started_at"][:19],
        )  # fmt: skip
    Console(width=200).print(table)


@results.command("show")
@click.argument("run_id")
@click.option("--items", "show_items", is_flag=True, help="Print every per-item record (JSON).")
def results_show(run_id: str, show_items: bool) -> None:
    """One run: provenance, verdict, summary (and its items)."""
    from paroctl.store.results import open_store

    with open_store() as store:
        run = _get(store, run_id)
        items = store.items(run["run_id"])
    for key in (
        "run_id", "gate", "status", "message", "profile", "profile_hash", "image", "boot_id",
        "first_boot", "paroctl_version", "server_version", "started_at", "finished_at",
    ):  # fmt: skip
        click.echo(f"{key}: {_fmt(run[key])}")
    click.echo(f"knobs: {json.dumps(run['knobs'], sort_keys=True)}")
    click.echo(f"options: {json.dumps(run['options'], sort_keys=True)}")
    click.echo(f"items: {len(items)}")
    click.echo("summary: " + json.dumps(run["summary"], indent=2, sort_keys=True))
    if show_items:
        for item in items:
            click.echo(json.dumps(item, sort_keys=True))


@results.command("compare")
@click.argument("run_a")
@click.argument("run_b")
def results_compare(run_a: str, run_b: str) -> None:
    """Two runs side by side, with B - A deltas."""
    from rich.console import Console
    from rich.table import Table

    from paroctl.store.results import compare, open_store

    with open_store() as store:
        a, b = _get(store, run_a), _get(store, run_b)
    if a["gate"] != b["gate"]:
        raise UsageError(f"{a['run_id']} is {a['gate']}, {b['run_id']} is {b['gate']}")
    table = Table("", f"A {a['profile']}", f"B {b['profile']}", "B - A", "rel")
    for label, key in (("run", "run_id"), ("status", "status"), ("boot", "boot_id")):
        table.add_row(label, _fmt(a[key]), _fmt(b[key]), "", "")
    for name, va, vb, delta, rel in compare(a, b):
        table.add_row(name, _fmt(va), _fmt(vb), _fmt(delta), "-" if rel is None else f"{rel:+.1%}")
    Console(width=200).print(table)
    if a["gate"] == "lm-eval":
        _lm_eval_compare(a, b)


def _lm_eval_compare(a: dict[str, Any], b: dict[str, Any]) -> None:
    """lm-eval runs: every task metric A -> B, then each task paired sample by sample."""
    from paroctl.gates.lmeval_scoring import comparable_numbers, paired_runs
    from paroctl.store.results import open_store

    left, right = comparable_numbers(a["summary"]), comparable_numbers(b["summary"])
    for name in sorted(set(left) | set(right)):
        va, vb = left.get(name), right.get(name)
        delta = "" if va is None or vb is None else f" ({vb - va:+.4g})"
        click.echo(f"{name}: {_fmt(va)} -> {_fmt(vb)}{delta}")
    with open_store() as store:
        pairs = paired_runs(store.items(a["run_id"]), store.items(b["run_id"]), {}, margin=0.0)
    for task, p in pairs.items():
        click.echo(
            f"{task} {p['metric']},{p['filter']}: paired on {p['n']} samples, {p['old_only']} "
            f"right only in A, {p['new_only']} right only in B, McNemar p {p['p_value']:.3g}"
        )
