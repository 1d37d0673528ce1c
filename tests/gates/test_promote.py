"""Promotion logic as pure functions: McNemar's exact test, the paired verdict, the decision, the
gate order and the dry-run plan (the switching itself is tests/e2e: it needs real serves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl import state
from paroctl.errors import ProfileError, UsageError
from paroctl.gates.stats import mcnemar_exact, paired_noninferiority
from paroctl.profile import profiles
from paroctl.records import LiveRecord
from paroctl.switch import promote


@pytest.mark.parametrize(
    ("old_only", "new_only", "p"),
    [
        (0, 0, 1.0),
        (2, 10, 158 / 4096),  # 2 * (C(12,0) + C(12,1) + C(12,2)) / 2**12
        (10, 2, 158 / 4096),  # symmetric
        (0, 6, 2 / 64),
        (1, 9, 22 / 1024),
        (5, 5, 1.0),  # 2 * P(X <= 5) > 1: capped
        (3, 4, 1.0),
    ],
)
def test_mcnemar_exact_known_p_values(old_only: int, new_only: int, p: float) -> None:
    assert mcnemar_exact(old_only, new_only) == pytest.approx(p, rel=1e-12)


def test_mcnemar_exact_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def _items(pattern: str) -> dict[str, bool]:
    return {f"q{i}": mark == "1" for i, mark in enumerate(pattern)}


def test_paired_verdicts_pass_fail_inconclusive() -> None:
    same = paired_noninferiority(_items("1100" * 25), _items("1100" * 25), margin=0.02)
    assert (same.n, same.old_only, same.new_only, same.verdict) == (100, 0, 0, "pass")
    # 12 right only before, 2 right only now, of 100: loses 10 points, p = 0.0129 -> fail.
    worse = paired_noninferiority(
        _items("1" * 12 + "0" * 2 + "1" * 40 + "0" * 46),
        _items("0" * 12 + "1" * 2 + "1" * 40 + "0" * 46),
        margin=0.02,
    )
    assert (worse.old_only, worse.new_only, worse.verdict) == (12, 2, "fail")
    assert worse.p_value == pytest.approx(mcnemar_exact(12, 2)) and worse.loss == pytest.approx(0.1)
    # 2 of 10 lost: 20 points given up, but two discordant items cannot show it (p = 0.5).
    few = paired_noninferiority(_items("1100000000"), _items("0000000000"), margin=0.02)
    assert (few.loss, few.p_value, few.verdict) == (pytest.approx(0.2), 0.5, "inconclusive")
    # Only the items both runs answered are paired.
    part = paired_noninferiority(_items("11"), {"q1": True, "q7": False}, margin=0.02)
    assert part.n == 1 and part.verdict == "pass"
    none = paired_noninferiority({}, {"q0": True}, margin=0.02)
    assert none.verdict == "inconclusive"


def _v(gate: str, verdict: str) -> promote.Verdict:
    return promote.Verdict(gate, verdict, None, "")


def test_decision_follows_the_inconclusive_rule() -> None:
    assert promote.decide([_v("sanity", "pass"), _v("kld", "pass")], "keep-previous") == "promoted"
    assert promote.decide([_v("sanity", "pass"), _v("kld", "fail")], "promote") == "rolled back"
    unsure = [_v("sanity", "pass"), _v("gsm8k", "inconclusive")]
    assert promote.decide(unsure, "keep-previous") == "inconclusive"
    assert promote.decide(unsure, "promote") == "promoted"


def test_gates_run_cheapest_first_and_the_plan_says_so() -> None:
    profile = profiles.load("cpu-demo-paro")
    assert promote.gate_list("gsm8k,kld,sanity,decode", profile) == (
        "sanity", "decode", "kld", "gsm8k",
    )  # fmt: skip
    assert promote.gate_list("suite", profile)[0] == "sanity"
    with pytest.raises(UsageError, match="unknown gate kv"):
        promote.gate_list("sanity,kv", profile)
    state.write_live(
        LiveRecord.from_dict(
            {"profile": "cpu-demo", "host": "127.0.0.1", "port": 1, "served_names": ["m"]}
        )
    )
    decision = promote.run("cpu-demo-paro", "gsm8k,sanity", dry_run=True)
    assert decision.decision == "planned" and decision.run_id is None
    assert decision.message.splitlines() == [
        "switch cpu-demo -> cpu-demo-paro (verified by the switch)",
        "gate sanity",
        "gate gsm8k",
        "on the first failed gate: stop, switch back to cpu-demo (verified)",
        "on an inconclusive gate: switch back to cpu-demo (verified) "
        "(gates.inconclusive: keep-previous)",
    ]


def test_the_inconclusive_rule_and_margin_are_validated(profile_dir: Path) -> None:
    body = "description: t\nextends: _cpu\nmodel:\n  path: M\n  served_names: [m]\n"
    (profile_dir / "bad.yaml").write_text(
        body + "gates:\n  inconclusive: maybe\n  gsm8k_margin: 2\n"
    )
    with pytest.raises(ProfileError) as info:
        profiles.load("bad", profile_dir)
    keys = {p.split(": ")[1] for p in info.value.problems}
    assert keys == {"gates.inconclusive", "gates.gsm8k_margin"}, info.value.problems
    (profile_dir / "ok.yaml").write_text(body + "gates:\n  inconclusive: promote\n")
    assert profiles.load("ok", profile_dir).body.gates.inconclusive == "promote"


def test_decision_exit_codes_and_lines() -> None:
    verdicts = (promote.Verdict("kld", "fail", "r1", "mean KL 1.2"),)
    back = promote.Decision("new", "old", "rolled back", verdicts, "p1", "rolled back: new")
    assert back.failed and back.exit_code == 1
    assert back.lines() == [
        "kld: FAIL — mean KL 1.2",
        "rolled back: new",
        "decision record: p1 (paroctl results show)",
    ]
    unsure = promote.Decision("new", "old", "inconclusive", (), "p2", "inconclusive: new")
    assert not unsure.failed and unsure.exit_code == 2
    assert promote.Decision("new", None, "promoted", (), "p3", "").exit_code == 0


def test_switch_gate_dry_run_through_the_cli_plans_and_changes_nothing() -> None:
    from click.testing import CliRunner

    from paroctl import state
    from paroctl.cli.main import cli

    plan = CliRunner().invoke(cli, ["switch", "cpu-demo-paro", "--gate", "sanity,kld", "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert plan.output.splitlines()[:3] == [
        "switch (nothing) -> cpu-demo-paro (verified by the switch)",
        "gate sanity",
        "gate kld",
    ]
    assert state.read_live() is None
    refused = CliRunner().invoke(
        cli, ["switch", "cpu-demo-paro", "--gate", "sanity", "--no-rollback"]
    )
    assert refused.exit_code == 2 and "cannot take --no-rollback" in refused.output
