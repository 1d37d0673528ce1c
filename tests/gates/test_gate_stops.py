"""Gates that stop when asked and never mislabel: Ctrl-C / SIGTERM stop sending at once and keep
every answer; a switch under a running gate stops it with exit 2, storing only the answers of the
serve the run names; a promotion honours the band's limit, shows progress, and an interrupted one
rolls back with its decision recorded."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from paroctl import state
from paroctl.cli.main import cli
from paroctl.store.results import open_store

if TYPE_CHECKING:
    from .conftest import StandinBox


def _only_run(gate: str) -> dict[str, Any]:
    with open_store() as store:
        runs = store.runs(gate=gate)
        assert len(runs) == 1, runs
        run = runs[0]
        run["items"] = store.items(run["run_id"])
    return run


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_gate_stops_sending_keeps_its_answers_and_resumes(
    standin_box: StandinBox, gate_process: Callable[..., Any], sig: signal.Signals
) -> None:
    standin_box.switch("cpu-demo")
    gate = gate_process("gate", "gsm8k", "--limit", "24", "--concurrency", "2")
    standin_box.wait_answered(4)
    gate.send_signal(sig)
    _out, err = gate.communicate(timeout=60)
    sent = standin_box.counts()["received"]
    time.sleep(0.5)
    # It sent nothing more once signalled (before: Ctrl-C sent every one of the 24, then exited;
    # SIGTERM killed it outright and left the run "running").
    assert standin_box.counts()["received"] == sent < 24
    assert gate.returncode == 130, err
    run = _only_run("gsm8k")
    assert run["status"] == "interrupted"
    assert len(run["items"]) >= 4, err
    assert all(i["outcome"] != "error" for i in run["items"])
    assert f"{len(run['items'])} items, every answer kept" in run["message"]
    assert f"`paroctl gate gsm8k --resume {run['run_id']}` finishes it" in err
    if sig != signal.SIGTERM:
        return
    resumed = CliRunner().invoke(cli, ["gate", "gsm8k", "--resume", run["run_id"]])
    assert resumed.exit_code == 0, resumed.output
    done = _only_run("gsm8k")
    assert done["status"] == "unjudged" and len(done["items"]) == 24


def test_a_switch_under_a_running_gate_stops_it_and_keeps_only_the_old_serves_answers(
    standin_box: StandinBox, gate_process: Callable[..., Any]
) -> None:
    standin_box.switch("cpu-demo")
    gate = gate_process("gate", "gsm8k", "--limit", "60", "--concurrency", "2")
    standin_box.wait_answered(4)
    # The same port and served name: only the box's state tells the two serves apart.
    standin_box.switch("cpu-demo-b")
    out, err = gate.communicate(timeout=60)
    assert gate.returncode == 2, (out, err)
    assert "gsm8k stopped:" in err and "cpu-demo" in err
    run = _only_run("gsm8k")
    assert (run["profile"], run["status"]) == ("cpu-demo", "error")
    answers = [i.get("response") for i in run["items"]]
    assert answers and all(a is None or a.startswith("served by cpu-demo #") for a in answers)
    assert run["summary"]["items"] == len(run["items"])
    assert state.read_live() is not None and state.read_live().serve.profile == "cpu-demo-b"


def test_a_promotion_runs_the_bands_limit_and_shows_progress(
    standin_box: StandinBox,
) -> None:
    from paroctl.events import Event
    from paroctl.switch import promote

    standin_box.switch("cpu-demo")
    events: list[Event] = []
    decision = promote.run("cpu-demo-b", "gsm8k", events=events.append)
    run = _only_run("gsm8k")
    # The band says 20 (before: a promotion always asked 200, ~2 h on the CPU box).
    assert run["options"]["limit"] == 20 and len(run["items"]) == 20
    shown = [e.message for e in events if e.kind == "progress" and e.message.startswith("gsm8k")]
    assert shown[0] == "gsm8k: 0/20 (0%), 0 s elapsed" and shown[-1].startswith("gsm8k: 20/20")
    assert decision.run_id is not None


@pytest.mark.parametrize("keep", [False, True])
def test_an_interrupted_promotion_stops_at_once_rolls_back_and_records_it(
    standin_box: StandinBox, keep: bool
) -> None:
    import os
    import threading

    from paroctl.cli.serve import interrupt_on_signals
    from paroctl.switch import promote

    standin_box.switch("cpu-demo")

    inside = threading.Event()  # SIGTERM only while its handler is installed (else it kills)

    def terminate_once_gating() -> None:
        standin_box.wait_answered(3)  # the candidate's gate requests only
        if inside.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_gating, daemon=True).start()
    with interrupt_on_signals(), pytest.raises(KeyboardInterrupt) as stopped:
        inside.set()
        try:
            promote.run("cpu-demo-b", "gsm8k", limit=60, keep_on_interrupt=keep)
        finally:
            inside.clear()
    # Before: SIGTERM was ignored until all questions were asked; SIGKILL then left the
    # candidate live with no decision recorded.
    outcome = "kept live as asked" if keep else "rolled back to cpu-demo"
    assert f"interrupted: cpu-demo-b, {outcome}" in str(stopped.value)
    live = state.read_live()
    assert live is not None and live.serve.profile == ("cpu-demo-b" if keep else "cpu-demo")
    gsm8k = _only_run("gsm8k")
    assert gsm8k["status"] == "interrupted" and gsm8k["options"]["limit"] == 60
    assert gsm8k["profile"] == "cpu-demo-b" and len(gsm8k["items"]) < 60
    decision = _only_run("promote")
    assert decision["status"] == "interrupted"
    assert decision["summary"]["gates"][-1]["verdict"] == "interrupted"
    assert decision["summary"]["gates"][-1]["run_id"] == gsm8k["run_id"]
    line = promote.last_decision_line()
    assert line is not None and f"interrupted: cpu-demo-b, {outcome}" in line


def test_a_promotion_killed_outright_is_shown_as_undecided() -> None:
    import os
    import subprocess

    from paroctl.store.results import Provenance
    from paroctl.switch import promote

    # What SIGKILL mid-gate leaves: the decision record opened before the gates, never closed.
    gone = subprocess.Popen(["true"])
    gone.wait()
    prov = Provenance("cpu-demo-b", "h", {}, None, "boot-b", False, "0.1.0", None)
    with open_store() as store:
        store.start_run("r1-promote", "promote", prov, {"gates": ["gsm8k"], "pid": gone.pid})
    line = promote.last_decision_line()
    assert line is not None and "cpu-demo-b INTERRUPTED with no decision" in line
    assert f"paroctl pid {gone.pid} is gone" in line
    with open_store() as store:
        store.start_run("r2-promote", "promote", prov, {"gates": ["gsm8k"], "pid": os.getpid()})
    assert "cpu-demo-b being gated" in (promote.last_decision_line() or "")
