"""`paroctl switch|status|stop|logs`: the live serve."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click

from paroctl.cli.params import FiniteFloat

if TYPE_CHECKING:
    from paroctl.records import BootRecord, LiveRecord
    from paroctl.switch import journal as journal_mod
    from paroctl.switch.recovery import Stranded
    from paroctl.switch.status import GateRows, LiveView

# A closed SSH session (SIGHUP) or a service manager's stop (SIGTERM) is an operator's Ctrl-C.
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP during a switch: it rolls back (or keeps what was live), then
    paroctl exits 130."""


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """For the block's duration, SIGINT, SIGTERM and SIGHUP raise Interrupted (once) in the main
    thread; during a rollback (paroctl/switch/record.py: rolling_back) one is noted instead, and
    the rollback ends before paroctl answers it."""
    from paroctl.switch import record

    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return  # the rollback under way is what leaves the box sane; SIGKILL is the journal's
        fired.append(signum)
        why = f"{signal.Signals(signum).name} received"
        if not record.defer_interrupt(why):
            raise Interrupted(why)

    previous = {sig: signal.signal(sig, handler) for sig in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.command(name="switch")
@click.argument("name", required=False)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an interrupted switch (verify the serve it started, or take its step again).",
)
@click.option("--no-rollback", is_flag=True, help="On failure leave the box stopped.")
@click.option(
    "--timeout",
    type=FiniteFloat(min=1, max=86400),
    help="Boot timeout in seconds [default: the profile's serve.boot_timeout_s].",
)
@click.option(
    "--gate",
    "gates",
    metavar="GATES",
    help="After the switch verifies, run these gates (a suite name or a comma list), cheapest "
    "first; keep NAME only if they hold, else switch back to what was live.",
)
@click.option(
    "--gate-limit",
    type=click.IntRange(1, 100_000),
    help="With --gate: the questions GSM8K asks [default: the band's gates.gsm8k.limit, else 200].",
)
@click.option(
    "--keep-on-interrupt",
    is_flag=True,
    help="With --gate: on Ctrl-C or SIGTERM keep NAME live (the decision says so) instead of "
    "rolling back.",
)
@click.option("--dry-run", is_flag=True, help="Print the exact actions; change nothing.")
def switch_cmd(
    name: str | None,
    resume: bool,
    no_rollback: bool,
    timeout: float | None,
    gates: str | None,
    gate_limit: int | None,
    keep_on_interrupt: bool,
    dry_run: bool,
) -> None:
    """Make profile NAME the live serve; roll back to the previous one on failure."""
    if (gate_limit is not None or keep_on_interrupt) and not gates:
        raise click.UsageError("--gate-limit and --keep-on-interrupt go with --gate")
    from paroctl import state
    from paroctl.profile import profiles
    from paroctl.switch import journal
    from paroctl.switch import switch as switch_mod

    if resume == (name is not None):
        raise click.UsageError("give a profile NAME, or --resume (without NAME)")
    if resume:
        entry = journal.read()
        if dry_run:
            if entry is None:
                click.echo("no interrupted switch to resume")
            else:
                click.echo(f"resume the interrupted {_describe(entry)}")
            return
        with interrupt_on_signals(), _progress() as events:
            record = switch_mod.resume(
                switch_mod.default_deps(events),
                load_profile=profiles.load,
                rollback=not no_rollback,
                timeout_s=timeout,
            )
        _echo_live(record)
        return
    assert name is not None
    if gates:
        _promote(name, gates, timeout, no_rollback, dry_run, gate_limit, keep_on_interrupt)
        return
    target = profiles.load(name)  # validated completely before anything touches the box
    if dry_run:
        for line in switch_mod.plan(target, state.read_live(), journal.read()):
            click.echo(line)
        return
    with interrupt_on_signals(), _progress() as events:
        record = switch_mod.switch(
            target,
            switch_mod.default_deps(events),
            load_profile=profiles.load,
            rollback=not no_rollback,
            timeout_s=timeout,
        )
    _echo_live(record)


def _promote(
    name: str,
    gates: str,
    timeout: float | None,
    no_rollback: bool,
    dry_run: bool,
    gate_limit: int | None = None,
    keep_on_interrupt: bool = False,
) -> None:
    """`switch NAME --gate GATES`: paroctl/promote.py switches, gates and keeps or rolls back."""
    from paroctl.errors import GateFailed, RuntimeFailure
    from paroctl.switch import promote

    if no_rollback:
        raise click.UsageError("--gate rolls back on a failed gate; it cannot take --no-rollback")
    if dry_run:
        decision = promote.run(name, gates, dry_run=True)
    else:
        with interrupt_on_signals(), _progress() as events:
            decision = promote.run(
                name,
                gates,
                events=events,
                timeout_s=timeout,
                limit=gate_limit,
                keep_on_interrupt=keep_on_interrupt,
            )
    for line in decision.lines():
        click.echo(line)
    if decision.exit_code == 1:
        raise GateFailed(decision.message)
    if decision.exit_code == 2:
        raise RuntimeFailure(decision.message)


def _describe(entry: journal_mod.Entry) -> str:
    from paroctl.switch import recovery

    return recovery.describe(entry)


def _echo_live(record: BootRecord) -> None:
    kv = f"{record.kv_tokens:,}" if record.kv_tokens is not None else "unknown"
    first = " (first boot on a fresh cache: KV not trusted)" if record.first_boot else ""
    how = {"adopt": " (adopted as it runs)", "resume": " (resumed)"}.get(record.origin, "")
    serve = record.serve
    click.echo(
        f"{serve.profile} is live at http://{serve.host}:{serve.port} as "
        f"{', '.join(serve.served_names)}{how}; boot {record.boot_s:.1f} s; KV {kv} tokens"
        f"{first}; boot id {record.boot_id}"
    )


@click.command(name="adopt")
@click.argument("name")
@click.option(
    "--timeout",
    type=FiniteFloat(min=1, max=86400),
    help="How long to wait for it to answer [default: the profile's serve.boot_timeout_s].",
)
def adopt_cmd(name: str, timeout: float | None) -> None:
    """Verify NAME's serve, started outside paroctl (systemctl start, a boot), and make it live."""
    from paroctl.profile import profiles
    from paroctl.switch import adopt
    from paroctl.switch import switch as switch_mod

    target = profiles.load(name)
    with interrupt_on_signals(), _progress() as events:
        record = adopt.adopt(target, switch_mod.default_deps(events), timeout_s=timeout)
    _echo_live(record)


@click.command(name="status")
def status_cmd() -> None:
    """Show the live profile, its health, served names, KV tokens and last gate results."""
    from paroctl.switch import status as status_mod
    from paroctl.switch import switch as switch_mod

    shown = status_mod.status(switch_mod.default_runtime)
    if shown.stranded is not None:
        live_record = shown.live.record if shown.live else None
        for line in _journal_lines(shown.stranded, live_record):
            click.echo(line)
    if shown.live is None:
        for serve in shown.untracked:
            click.echo(f"serving: {serve.describe()}; not recorded as live")
            hint = (
                f"`paroctl adopt {serve.profile.name}` verifies and records it"
                if (serve.current)
                else f"`paroctl switch {serve.profile.name}` restarts it as the profile says"
            )
            click.echo(f"         {hint}; `paroctl stop` stops it")
        if not shown.untracked:
            click.echo("live: nothing (run `paroctl switch NAME`)")
        _echo_last_promotion()
        return
    if shown.live.key_problem is not None:
        click.echo(f"note:    {shown.live.key_problem}", err=True)
    for line in _live_lines(shown.live, shown.gates):
        click.echo(line)
    _echo_last_promotion()
    if not shown.live.healthy or not shown.live.names_match:
        from paroctl.errors import RuntimeFailure

        recorded = shown.live.record.serve
        what = "does not answer" if not shown.live.healthy else "answers with other names"
        raise RuntimeFailure(
            f"the live serve {recorded.profile} {what} at {recorded.url}; `paroctl logs` shows "
            f"why, `paroctl switch {recorded.profile}` starts it again"
        )


def _echo_last_promotion() -> None:
    """The last promotion's decision (an interrupted or killed one says so), if any."""
    from paroctl.errors import ParoctlError
    from paroctl.switch import promote

    try:
        decided = promote.last_decision_line()
    except ParoctlError:
        decided = None
    if decided:
        click.echo(decided)


def _live_lines(view: LiveView, gates: GateRows | None) -> list[str]:
    """The live serve as status shows it."""
    live, serve = view.record, view.record.serve
    how = {"adopt": ", adopted as it ran", "resume": ", by a resumed switch"}.get(live.origin, "")
    match = "" if view.names_match else f"  MISMATCH: expected {list(serve.served_names)}"
    lines = [
        f"live:    {serve.profile} (hash {serve.hash}) since {live.since}{how}",
        f"address: {serve.url} ({serve.runtime})",
        f"health:  {'ok' if view.healthy else 'NOT ANSWERING'}",
        f"serves:  {', '.join(view.names) or '-'}{match}",
    ]
    if view.requests is not None:
        running, waiting = view.requests
        lines.append(f"requests: {running:g} running, {waiting:g} waiting")
    kv, flag = live.kv_tokens, " (first boot: not trusted)" if live.first_boot else ""
    lines.append(f"kv:      {kv:,} tokens{flag}" if kv else "kv:      unknown")
    if (cpu := view.cpu) is not None:
        lines.append(
            f"cpu:     {cpu.dtype} ({cpu.dtype_why}), engine on {cpu.engine_cores} of "
            f"{cpu.cores} cores, KV {cpu.kv_gib} GiB"
        )
    return lines + _gate_lines(gates)


def _journal_lines(stranded: Stranded, live: LiveRecord | None) -> list[str]:
    """What an unfinished switch's journal says, and what its serve does now."""
    from paroctl import net
    from paroctl.switch import journal

    entry = stranded.entry
    step = f"step {entry.step}" + (" (rolling back)" if entry.rolling_back else "")
    origin = entry.from_profile or "nothing"
    if stranded.owner_alive:
        return [
            f"switch:  in progress (paroctl pid {entry.owner.pid}): {origin} -> "
            f"{entry.to_profile}, {step}"
        ]
    lines = [
        f"switch:  INTERRUPTED (paroctl pid {entry.owner.pid} is gone): {origin} -> "
        f"{entry.to_profile}, {step}; journal {journal.path()}"
    ]
    if stranded.finished:
        return [*lines, "         it had recorded the new serve; the next stop or switch clears it"]
    serve = entry.serve
    if serve is None:
        return [
            *lines,
            "serving: nothing (the old serve was stopped, the new one not started)",
            "         `paroctl switch --resume` finishes the switch",
        ]
    where = f"{serve.profile} ({serve.runtime}"
    if not stranded.active and not stranded.healthy:
        return [*lines, f"serving: nothing: {where}) is not running"]
    pid = f", pid {stranded.pid}" if stranded.pid is not None else ""
    health = "ok" if stranded.healthy else "NOT ANSWERING"
    names = ", ".join(stranded.served_names) or "-"
    recorded = (
        "still recorded as live (the switch was stopping it)"
        if live is not None and live.serve.profile == serve.profile
        else "not recorded as live"
    )
    return [
        *lines,
        f"serving: {where}{pid}) at http://{net.connect_host(serve.host)}:{serve.port}, "
        f"health {health}, serves {names}; {recorded}",
        "         `paroctl switch --resume` finishes the switch; `paroctl stop` stops it; "
        "`paroctl switch NAME` stops it first",
    ]


@click.command(name="stop")
@click.option("--dry-run", is_flag=True, help="Print what would be stopped.")
def stop_cmd(dry_run: bool) -> None:
    """Drain and stop the live serve (and a serve an interrupted switch left running)."""
    from paroctl import state
    from paroctl.switch import adopt, journal, recovery
    from paroctl.switch import switch as switch_mod

    if dry_run:
        entry, recorded = journal.read(), state.read_live()
        if entry is not None:
            click.echo(recovery.plan_line(entry, recorded))
        live = recovery.live_after(entry, recorded) if entry is not None else recorded
        if live:
            old = live.serve
            click.echo(
                f"stop {old.profile} (grace {old.grace_s} s) and wait until "
                f"{old.host}:{old.port} is closed"
            )
        elif entry is None:
            click.echo("nothing is live")
        return
    untracked: list[str] = []
    with state.locked(), _progress() as events:
        deps = switch_mod.default_deps(events)
        entry = recovery.recover(deps.runtime_for, events)
        live = state.read_live()
        if live:
            switch_mod.stop_live(live, deps)
        elif entry is None:
            for serve in adopt.discover(deps.runtime_for):
                switch_mod.stop_live(serve.as_live(), deps)
                untracked.append(serve.profile.name)
    if entry is not None and entry.serve is not None and live is None:
        click.echo(f"{entry.serve.profile} stopped (left running by an interrupted switch)")
    for name in untracked:
        click.echo(f"{name} stopped (it ran without being recorded as live)")
    if live:
        click.echo(f"{live.serve.profile} stopped")
    elif entry is not None and entry.serve is None:
        click.echo("nothing is live (an interrupted switch had left nothing running)")
    elif entry is None and not untracked:
        click.echo("nothing is live")


@click.command(name="logs")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--profile", "name", help="A profile other than the live one.")
def logs_cmd(follow: bool, name: str | None) -> None:
    """Print the live serve's log."""
    from paroctl import state
    from paroctl.errors import UsageError
    from paroctl.profile import profiles
    from paroctl.switch import switch as switch_mod

    live = state.read_live()
    if name is None and not live:
        raise UsageError("nothing is live; name one with --profile")
    kind: str
    scope: str
    if name is not None:
        runtime_cfg = profiles.load(name).body.runtime
        kind, scope = runtime_cfg.kind, runtime_cfg.scope
    else:
        assert live is not None
        name, kind, scope = live.serve.profile, live.serve.runtime, live.serve.scope
    runtime = switch_mod.default_runtime(kind, scope)
    for line in runtime.logs(name, follow=follow):
        click.echo(line)


def _gate_lines(gates: GateRows | None) -> list[str]:
    if gates is None:
        return []
    if gates.problem is not None:
        return [f"gates:   (results store unreadable: {gates.problem})"]
    if not gates.rows:
        return ["gates:   none recorded"]
    lines = ["gates:"]
    for row in gates.rows:
        headline = "" if row["headline"] is None else f"{row['headline_name']}={row['headline']:g}"
        lines.append(f"  {row['gate']:<12} {row['status']:<9} {headline:<28} {row['when']}")
    return lines


class _progress:
    """Progress on stderr: in a terminal one live line (boot phases, drain counts) with steps
    and warnings printed above it; in a log one line per step, phase, changed count or warning."""

    def __enter__(self):  # type: ignore[no-untyped-def]
        import time

        from rich.console import Console

        from paroctl.events import Event

        self._console = Console(stderr=True)
        self._status = self._console.status("starting")
        self._status.start()
        self._t0 = time.monotonic()

        def sink(event: Event) -> None:
            # Progress is best-effort: a terminal gone with its SSH session must not fail a switch.
            with contextlib.suppress(OSError):
                show(event)

        live_line = self._console.is_terminal

        def show(event: Event) -> None:
            if event.kind in ("phase", "progress"):
                text = event.message + (
                    f" ({event.elapsed_s:.1f} s)" if event.kind == "phase" else ""
                )
                if live_line:
                    self._status.update(text)  # one live line, rewritten in place
                else:
                    self._console.print(f"- {text}")  # a log: one line per change
            elif event.kind == "warn":
                self._console.print(f"[yellow]warning:[/] {event.message}")
            else:
                self._console.print(f"- {event.message}")

        return sink

    def __exit__(self, *exc: object) -> None:
        self._status.stop()
