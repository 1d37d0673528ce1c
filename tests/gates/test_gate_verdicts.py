"""Gates judge only what they measured: nothing measured, or a band point left out, never passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.errors import ProfileError
from paroctl.gates import concurrency, decode, prefill
from paroctl.gates.timing import judge
from paroctl.profile import profiles

DECODE_BAND = {25: 28.5, 8192: 30.2, 32768: 31.0}


def _decode_points(ms: dict[int, float]) -> dict[str, Any]:
    return {str(n): {"ms_per_step": {"median": v}} for n, v in ms.items()}


def _prefill_points(tps: dict[int, float]) -> dict[str, Any]:
    return {
        str(n): {"prefill_tok_s": {"median": v}, "prefix_hit_tokens": 0} for n, v in tps.items()
    }


def test_judge_never_passes_on_nothing_or_on_a_subset() -> None:
    above = float.__gt__
    assert judge({}, 0, DECODE_BAND, above).status == "error"
    assert judge({}, 0, None, above).note == "nothing measured"
    subset = judge({25: 20.0}, 1, DECODE_BAND, above)
    assert (subset.status, subset.unmeasured) == ("error", (8192, 32768))
    assert judge({25: 20.0}, 1, DECODE_BAND, above, partial=True).status == "pass"
    assert judge({1: 20.0}, 1, DECODE_BAND, above, partial=True).status == "error"
    assert judge({25: 29.0}, 1, DECODE_BAND, above).status == "fail"  # over the band beats subset
    assert judge({25: 20.0, 8192: 20.0, 32768: 20.0}, 3, DECODE_BAND, above).status == "pass"
    assert judge({25: 20.0}, 2, DECODE_BAND, above).note == "some points failed"


def test_decode_with_no_contexts_is_nothing_measured_not_a_pass() -> None:
    outcome = decode._verdict({}, DECODE_BAND, 128, 3, 0.0)
    assert (outcome.status, outcome.message) == ("error", "nothing measured")


def test_decode_on_one_of_three_band_points_cannot_pass() -> None:
    outcome = decode._verdict(_decode_points({25: 26.0}), DECODE_BAND, 128, 3, 0.0)
    assert outcome.status == "error"
    assert outcome.message == (
        "26.00 ms/step @ 25; band points [8192, 32768] not measured "
        "(--partial judges only the measured ones)"
    )
    assert outcome.summary["unmeasured_band_points"] == [8192, 32768]
    partial = decode._verdict(_decode_points({25: 26.0}), DECODE_BAND, 128, 3, 0.0, partial=True)
    assert partial.status == "pass" and "not measured (--partial)" in partial.message


def test_prefill_and_concurrency_judge_only_what_they_measured() -> None:
    band = {2048: 3000.0, 8192: 2900.0}
    assert prefill._verdict({}, band, 2).status == "error"
    assert prefill._verdict(_prefill_points({2048: 3500.0}), band, 2).status == "error"
    assert prefill._verdict(_prefill_points({2048: 3500.0, 8192: 3000.0}), band, 2).status == "pass"
    streams = {1: 100.0, 4: 300.0}
    assert concurrency._verdict({}, streams, 128).status == "error"
    one = {"1": {"aggregate_tok_s": 150.0}}
    assert concurrency._verdict(one, streams, 128).status == "error"
    assert concurrency._verdict(one, streams, 128, partial=True).status == "pass"


@pytest.mark.parametrize(
    "args",
    [
        ["decode", "--contexts", "0"],
        ["decode", "--contexts", "25,abc"],
        ["decode", "--contexts", ","],
        ["prefill", "--lengths", "0"],
        ["concurrency", "--streams", "0"],
        ["concurrency", "--streams", "2000"],
        ["gsm8k", "--concurrency", "0"],
        ["gsm8k", "--limit", "0"],
        ["decode", "--gen", "-5"],
        ["decode", "--reps", "0"],
        ["decode", "--temperature", "nan"],
        ["kld", "--chunks", "0"],
    ],
)
def test_gate_options_are_range_checked_before_connecting(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["gate", *args])
    assert result.exit_code == 2
    assert f"Invalid value for '{args[1]}'" in result.output
    assert "nothing is live" not in result.output  # refused before looking for a serve


GOOD_BODY = "description: t\nextends: _cpu\nmodel:\n  path: M\n  served_names: [m]\n"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("gates:\n  suite: []\n", "gates.suite"),
        ("boot:\n  sanity_expect: 're:'\n", "boot.sanity_expect"),
        ("boot:\n  sanity_expect: 're:.*'\n", "boot.sanity_expect"),
        ("boot:\n  expect: ['re:(x)?']\n", "boot.expect"),
        ("boot:\n  forbid: ['re:']\n", "boot.forbid"),
        ("gates:\n  prefill:\n    min_tok_s: {2048: .inf}\n", "gates.prefill.min_tok_s.2048"),
        ("gates:\n  concurrency:\n    min_aggregate_tok_s: {1: .nan}\n",
         "gates.concurrency.min_aggregate_tok_s.1"),
    ],
)  # fmt: skip
def test_degenerate_suites_bands_and_markers_are_refused(
    profile_dir: Path, extra: str, key: str
) -> None:
    (profile_dir / "bad.yaml").write_text(GOOD_BODY + extra)
    with pytest.raises(ProfileError) as info:
        profiles.load("bad", profile_dir)
    assert any(p.startswith(f"{profile_dir}/bad.yaml: {key}: ") for p in info.value.problems), (
        info.value.problems
    )


def test_greedy_against_a_run_with_no_prompt_in_common_compares_nothing(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from paroctl.gates import greedy
    from paroctl.store.results import Provenance, open_store

    with open_store(tmp_path / "r.db") as store:
        prov = Provenance("p", "h", {}, None, "b", False, "0.1.0", None)
        store.start_run("g-other", "greedy", prov, {})
        store.add_item("g-other", "elsewhere", "stable", {"hashes": ["x", "x"]})
        done = {"p1": {"key": "p1", "outcome": "stable", "hashes": ["a", "a"]}}
        ctx = SimpleNamespace(done=done, options={"against": "g-other"}, store=store)
        outcome = greedy._verdict(ctx, [])  # type: ignore[arg-type]
    assert outcome.status == "error"
    assert outcome.message.endswith("no prompt in common, nothing compared")


def test_the_profile_names_every_required_sanity_check() -> None:
    # schema.SanityCheck (the profile's `gates.sanity.judge`) lists the gate's required checks:
    # the profile layer does not import the gates, so this test holds the two lists equal.
    from typing import get_args

    from paroctl.gates.sanity import CHECKS
    from paroctl.profile.schema import SanityCheck

    assert list(get_args(SanityCheck)) == [c.key for c in CHECKS if c.required]
