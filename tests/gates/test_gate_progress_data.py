"""Gates that say what they do and find their data: progress lines at a bounded rate off a
terminal, the KLD gate announcing its switches first, the shipped GSM8K and WikiText-2 found
without flags or network, and a hint that names a flag the gate has; the serve watch."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from paroctl import net, state
from paroctl.cli.main import cli
from paroctl.errors import DataError
from paroctl.events import ProgressLines
from paroctl.gates import data
from paroctl.gates.watch import ServeChanged, ServeWatch
from paroctl.profile import profiles
from paroctl.records import LiveRecord
from paroctl.switch import journal, promote

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_lines_are_bounded_and_carry_done_total_and_eta() -> None:
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines(lines.append, interval_s=30.0, clock=clock)
    progress.start("gsm8k", 400)
    for _ in range(399):  # one answer every 0.5 s for 200 s
        clock.now += 0.5
        progress.advance()
    assert len(lines) == 1 + 6  # the start, then one per 30 s
    assert lines[0] == "gsm8k: 0/400 (0%), 0 s elapsed"
    assert lines[1] == "gsm8k: 60/400 (15%), 30 s elapsed, ETA 2m 50s"
    clock.now += 0.5
    progress.advance()
    assert lines[-1] == "gsm8k: 400/400 (100%), 3m 20s elapsed"  # the end is always said


def test_progress_of_a_resumed_run_estimates_from_this_runs_pace() -> None:
    lines: list[str] = []
    clock = Clock()
    progress = ProgressLines(lines.append, interval_s=1.0, clock=clock)
    progress.start("gsm8k", 100, completed=50)
    clock.now += 10
    progress.advance(10)
    assert lines == [
        "gsm8k: 50/100 (50%), 0 s elapsed",
        "gsm8k: 60/100 (60%), 10 s elapsed, ETA 40 s",
    ]


def test_promotion_progress_goes_to_the_switch_display() -> None:
    from paroctl.events import Event

    events: list[Event] = []
    progress = promote._progress(events.append)
    progress.start("gsm8k", 3)
    progress.note("kld: switching")
    assert [(e.kind, e.message) for e in events] == [
        ("progress", "gsm8k: 0/3 (0%), 0 s elapsed"),
        ("step", "kld: switching"),
    ]


def _two_profiles(profile_dir: Path) -> None:
    text = (REPO / "profiles" / "cpu-demo.yaml").read_text()
    (profile_dir / "cpu-demo.yaml").write_text(text)
    (profile_dir / "cpu-demo-ref.yaml").write_text(text)


def test_the_band_limit_holds_in_a_promotion_and_gate_limit_overrides_it(
    profile_dir: Path,
) -> None:
    _two_profiles(profile_dir)
    (profile_dir / "no-limit.yaml").write_text(
        "description: no gsm8k band\nextends: _cpu\nmodel:\n  path: SmolLM2-135M-Instruct\n"
        "  served_names: [smollm2-demo]\n"
    )
    banded = profiles.load("cpu-demo")  # gates.gsm8k.limit: 20
    assert promote.gate_options("gsm8k", banded, None, None) == {"limit": 20}
    assert promote.gate_options("gsm8k", banded, None, 3) == {"limit": 3}
    assert promote.gate_options("gsm8k", profiles.load("no-limit"), None, None) == {"limit": 200}
    assert promote.gate_options("kld", banded, {"kld": {"top_k": 5}}, 3) == {
        "chunks": 32,
        "top_k": 5,
    }


class Noted(Exception):
    pass


def test_kld_says_it_will_switch_the_live_serve_before_it_does(profile_dir: Path) -> None:
    from paroctl.gates import kld

    _two_profiles(profile_dir)
    candidate, reference = profiles.load("cpu-demo"), profiles.load("cpu-demo-ref")
    said: list[str] = []

    def note(message: str) -> None:
        said.append(message)
        raise Noted  # stop here: nothing may have switched yet

    ctx = SimpleNamespace(
        target=SimpleNamespace(profile_hash=candidate.hash, live=None, base_url="http://x"),
        progress=SimpleNamespace(note=note),
    )
    plan = kld.Plan(reference, candidate, "wikitext2", 2, 8, 5)
    request = kld.Request(plan, [], {}, "", [], "no reference stored yet")
    with pytest.raises(Noted):
        promote.kld_reference_by_switching(ctx, request)  # type: ignore[arg-type]
    assert said == [
        "kld: no stored reference fits (no reference stored yet); switching the live serve to "
        "cpu-demo-ref to collect one, then back to cpu-demo"
    ]
    assert state.read_live() is None


def test_shipped_gate_data_is_found_without_flags_or_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PAROCTL_DATA_DIR")
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    shipped = REPO / "tests" / "data"
    assert data.wikitext2_file() == shipped / "wikitext2" / "wiki.test.raw"
    assert data.gsm8k_file("test") == shipped / "gsm8k" / "test.jsonl"
    assert data.gsm8k_file("train") == shipped / "gsm8k" / "train.jsonl"
    assert not (tmp_path / "cache").exists()  # nothing fetched


def test_a_box_that_fetched_once_keeps_its_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PAROCTL_DATA_DIR")
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "data" / "wikitext2" / "wiki.test.raw"
    cached.parent.mkdir(parents=True)
    cached.write_text("fetched earlier\n")
    assert data.wikitext2_file() == cached


@pytest.mark.parametrize(
    ("gate", "dataset", "load"),
    [
        ("sanity", "wikitext2", lambda: data.wikitext2_file()),
        ("gsm8k", "gsm8k", lambda: data.gsm8k_file("test")),
    ],
)
def test_unfindable_data_names_a_flag_the_gate_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gate: str, dataset: str, load: object
) -> None:
    # No copy anywhere, and the public source unreachable (a closed port on loopback).
    monkeypatch.delenv("PAROCTL_DATA_DIR")
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "SHIPPED", ())
    closed = f"http://127.0.0.1:{net.free_port()}/"
    monkeypatch.setattr(data, "WIKITEXT2_URL", closed + "w.zip")
    monkeypatch.setattr(data, "GSM8K_URL", closed + "{split}.jsonl")
    with pytest.raises(DataError) as caught:
        load()  # type: ignore[operator]
    flag = data.FLAGS[dataset]
    assert f"offline? pass {flag} PATH or set PAROCTL_DATA_DIR" in caught.value.message
    helped = CliRunner().invoke(cli, ["gate", gate, "--help"])
    assert f"  {flag} " in helped.output


def _live(boot: str, profile: str = "cpu-demo") -> LiveRecord:
    return LiveRecord.from_dict(
        {"profile": profile, "hash": "h", "host": "127.0.0.1", "port": 8123,
         "served_names": ["Qwen3.8"], "boot_id": boot}
    )  # fmt: skip


def test_the_watch_sees_a_switch_begin_and_a_new_boot_but_not_a_rewrite() -> None:
    state.write_live(_live("boot-a"))
    watch = ServeWatch(state.read_live())
    assert watch.problem() is None
    time.sleep(0.01)
    state.write_live(_live("boot-a"))  # rewritten, same serve (an adopt)
    assert watch.problem() is None
    state.write_live(_live("boot-b"))  # a switch finished between two answers
    with pytest.raises(ServeChanged, match=r"changed from cpu-demo \(hash h, boot boot-a\)"):
        watch.check()
    watch.rebind(state.read_live())  # the gate's own switch (KLD)
    assert watch.problem() is None
    journal.Journal.begin(state.read_live(), "cpu-demo-b")
    assert "a switch started on this box" in (watch.problem() or "")


def test_a_journal_left_from_before_the_gate_does_not_stop_it() -> None:
    state.write_live(_live("boot-a"))
    journal.Journal.begin(state.read_live(), "cpu-demo-b")
    watch = ServeWatch(state.read_live())
    assert watch.problem() is None
    assert ServeWatch(None).problem() is None  # an endpoint by URL: nothing here to watch
