"""`paroctl switch|status|stop|logs`: the live serve."""

from __future__ import annotations

import click


@click.command(name="switch")
@click.argument("name")
@click.option("--no-rollback", is_flag=True, help="On failure leave the box stopped.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    help="Boot timeout in seconds [default: the profile's serve.boot_timeout_s].",
)
@click.option("--dry-run", is_flag=True, help="Print the exact actions; change nothing.")
def switch_cmd(name: str, no_rollback: bool, timeout: float | None, dry_run: bool) -> None:
    """Make profile NAME the live serve; roll back to the previous one on failure."""
    from paroctl import profiles, state
    from paroctl import switch as switch_mod

    target = profiles.load(name)  # validated completely before anything touches the box
    if dry_run:
        for line in switch_mod.plan(target, state.read_live()):
            click.echo(line)
        return
    with _progress() as events:
        record = switch_mod.switch(
            target,
            switch_mod.default_deps(events),
            load_profile=profiles.load,
            rollback=not no_rollback,
            timeout_s=timeout,
        )
    kv = f"{record.kv_tokens:,}" if record.kv_tokens is not None else "unknown"
    first = " (first boot on a fresh cache: KV not trusted)" if record.first_boot else ""
    click.echo(
        f"{record.profile} is live at http://{record.host}:{record.port} as "
        f"{', '.join(record.served_names)}; boot {record.boot_s:.1f} s; KV {kv} tokens"
        f"{first}; boot id {record.boot_id}"
    )


@click.command(name="status")
def status_cmd() -> None:
    """Show the live profile, its health, served names, KV tokens and last gate results."""
    from paroctl import state
    from paroctl.client import Client
    from paroctl.errors import ParoctlError

    live = state.read_live()
    if not live:
        click.echo("live: nothing (run `paroctl switch NAME`)")
        return
    host = "127.0.0.1" if live["host"] in ("0.0.0.0", "::") else live["host"]
    with Client(f"http://{host}:{live['port']}", retries=0, timeout_s=5) as client:
        try:
            healthy = client.health()
            names = client.models() if healthy else []
        except ParoctlError:
            healthy, names = False, []
    kv = live.get("kv_tokens")
    click.echo(f"live:    {live['profile']} (hash {live['hash']}) since {live.get('since')}")
    click.echo(f"address: http://{host}:{live['port']} ({live['runtime']})")
    click.echo(f"health:  {'ok' if healthy else 'NOT ANSWERING'}")
    match = (
        ""
        if sorted(names) == sorted(live["served_names"])
        else (f"  MISMATCH: expected {live['served_names']}")
    )
    click.echo(f"serves:  {', '.join(names) or '-'}{match}")
    flag = " (first boot: not trusted)" if live.get("first_boot") else ""
    click.echo(f"kv:      {kv:,} tokens{flag}" if kv else "kv:      unknown")
    if plan := live.get("cpu"):
        engine_cores = plan["cores"] - plan["reserved"]
        click.echo(
            f"cpu:     {plan['dtype']} ({plan['dtype_why']}), engine on {engine_cores} of "
            f"{plan['cores']} cores, KV {plan['kv_gib']} GiB"
        )
    for line in _gate_lines(live["profile"]):
        click.echo(line)


@click.command(name="stop")
@click.option("--dry-run", is_flag=True, help="Print what would be stopped.")
def stop_cmd(dry_run: bool) -> None:
    """Drain and stop the live serve."""
    from paroctl import state
    from paroctl import switch as switch_mod

    live = state.read_live()
    if not live:
        click.echo("nothing is live")
        return
    if dry_run:
        click.echo(
            f"stop {live['profile']} (grace {live.get('grace_s', 30)} s) and wait until "
            f"{live['host']}:{live['port']} is closed"
        )
        return
    with state.locked(), _progress() as events:
        switch_mod.stop_live(live, switch_mod.default_deps(events))
    click.echo(f"{live['profile']} stopped")


@click.command(name="logs")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--profile", "name", help="A profile other than the live one.")
def logs_cmd(follow: bool, name: str | None) -> None:
    """Print the live serve's log."""
    from paroctl import profiles, state
    from paroctl import switch as switch_mod
    from paroctl.errors import StateError

    live = state.read_live()
    if name is None and not live:
        raise StateError("nothing is live; name one with --profile")
    if name is not None:
        runtime_cfg = profiles.load(name).body.runtime
        kind, scope = runtime_cfg.kind, runtime_cfg.scope
    else:
        assert live is not None
        name, kind, scope = live["profile"], live["runtime"], live["scope"]
    runtime = switch_mod.default_runtime(kind, scope)
    for line in runtime.logs(name, follow=follow):
        click.echo(line)


def _gate_lines(profile: str) -> list[str]:
    from paroctl import results
    from paroctl.errors import ParoctlError

    try:
        rows = results.open_store().last_gate_results(profile, limit=5)
    except ParoctlError as exc:  # status still shows the serve when the store is unreadable
        return [f"gates:   (results store unreadable: {exc.message})"]
    if not rows:
        return ["gates:   none recorded"]
    lines = ["gates:"]
    for row in rows:
        headline = "" if row["headline"] is None else f"{row['headline_name']}={row['headline']:g}"
        lines.append(f"  {row['gate']:<12} {row['status']:<9} {headline:<28} {row['when']}")
    return lines


class _progress:
    """A rich status line for boot phases; steps and warnings print as lines (stderr)."""

    def __enter__(self):  # type: ignore[no-untyped-def]
        import time

        from rich.console import Console

        from paroctl.switch import Event

        self._console = Console(stderr=True)
        self._status = self._console.status("starting")
        self._status.start()
        self._t0 = time.monotonic()

        def sink(event: Event) -> None:
            if event.kind == "phase":
                self._status.update(f"{event.message} ({event.elapsed_s:.1f} s)")
            elif event.kind == "warn":
                self._console.print(f"[yellow]warning:[/] {event.message}")
            else:
                self._console.print(f"- {event.message}")

        return sink

    def __exit__(self, *exc: object) -> None:
        self._status.stop()
