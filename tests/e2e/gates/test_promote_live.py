"""`paroctl switch NAME --gate` (promote.run) against real vLLM CPU serves through the switch
protocol: an inconclusive gate follows the profile's rule; a deliberately corrupted build fails
the KLD gate and the box ends on the previous serve, verified and live, with one decision record.
Three boots in all: the KLD reference is the int4 build itself, collected while it is live."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from paroctl import demo, promote, state
from paroctl.cli.main import cli
from paroctl.client import Client
from paroctl.results import open_store

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
GOOD, BAD = "cpu-demo-paro", "cpu-demo-paro-corrupt"
KLD = {"reference": GOOD, "chunks": 8, "chunk_tokens": 128, "top_k": 20}


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory,
    demo_parts: Any,
    stop_box: Callable[[dict[str, str], Iterable[str]], None],
    cpu_box_profiles: Callable[[Path, Iterable[str]], int],
    nibble_corrupter: Callable[[Path, Path], None],
) -> Iterator[dict[str, str]]:
    """A home and profiles: the int4 build, and a copy on a corrupted checkpoint judged by KLD
    against the int4 build (same stack, same tokenizer)."""
    demo.ensure_plugin(demo_parts.python)
    models = demo.default_models_dir()
    demo.ensure_smollm2_paro(models, demo_parts.python)
    root = tmp_path_factory.mktemp("promote-box")
    prof_dir = root / "profiles"
    cpu_box_profiles(prof_dir, ("cpu-demo", GOOD))  # cpu-demo: GOOD's own band names it
    good = yaml.safe_load((prof_dir / f"{GOOD}.yaml").read_text())
    good["gates"]["inconclusive"] = "promote"  # this box promotes what its gates cannot judge
    (prof_dir / f"{GOOD}.yaml").write_text(yaml.safe_dump(good))
    bad_model = root / "models" / "SmolLM2-135M-Instruct-paro-corrupt"
    nibble_corrupter(demo.paro_model_dir(models), bad_model)
    corrupt = yaml.safe_load((prof_dir / f"{GOOD}.yaml").read_text())
    corrupt["description"] = "cpu-demo-paro on a deliberately corrupted checkpoint"
    corrupt["model"].update(path=str(bad_model), served_names=["smollm2-paro-corrupt"])
    corrupt["boot"] = {**corrupt.get("boot", {}), "sanity_expect": "re:(?s)."}  # the KL judges
    corrupt["gates"]["kld"]["reference"] = GOOD
    (prof_dir / f"{BAD}.yaml").write_text(yaml.safe_dump(corrupt))
    env = {
        "PAROCTL_HOME": str(root / "home"),
        "PAROCTL_PROFILES_DIR": str(prof_dir),
        "PAROCTL_DATA_DIR": str(REPO / "tests" / "data"),
    }
    yield env
    stop_box(env, (GOOD, BAD))


@pytest.fixture(autouse=True)
def on_box(box: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in box.items():
        monkeypatch.setenv(key, value)


def _answers() -> list[str]:
    live = state.read_live()
    assert live is not None
    with Client(f"http://127.0.0.1:{live['port']}", retries=0) as client:
        return client.models()


def _record(run_id: str | None) -> dict[str, Any]:
    with open_store() as store:
        run = store.run(str(run_id))
    assert run is not None
    return run


def test_an_inconclusive_gate_follows_the_profiles_rule() -> None:
    # KLD of the int4 build against itself: its band is for cpu-demo, so the run is not judged
    # (inconclusive), and this box's rule promotes. The reference is collected on the live int4
    # serve itself (no switch) and stored: the next test's KLD gate scores against it.
    decision = promote.run(GOOD, "kld", options={"kld": KLD})
    assert (decision.decision, decision.previous) == ("promoted", None), decision.message
    (kld,) = decision.verdicts
    assert kld.verdict == "inconclusive" and "not judged" in kld.evidence, kld.evidence
    assert "collected: no stored reference" in kld.evidence
    assert _answers() == ["smollm2-paro"]
    run = _record(decision.run_id)
    assert (run["gate"], run["status"]) == ("promote", "pass")
    assert run["summary"]["decision"] == "promoted" and run["summary"]["rule"] == "promote"


def test_a_corrupted_build_fails_kld_and_the_previous_serve_is_back() -> None:
    before = state.read_live()
    assert before is not None and before["profile"] == GOOD
    decision = promote.run(BAD, "kld", options={"kld": KLD})
    assert decision.decision == "rolled back", decision.message
    (kld,) = decision.verdicts
    assert kld.verdict == "fail" and "reused the stored reference" in kld.evidence
    live = state.read_live()
    assert live is not None and live["profile"] == GOOD
    assert live["boot_id"] != before["boot_id"]  # booted again by the rollback, and verified
    assert _answers() == ["smollm2-paro"]
    run = _record(decision.run_id)
    assert (run["status"], run["profile"]) == ("fail", BAD)
    summary = run["summary"]
    assert summary["decision"] == "rolled back" and summary["previous"]["profile"] == GOOD
    assert summary["previous"]["boot_id"] == before["boot_id"]
    assert kld.run_id in {g["run_id"] for g in summary["gates"]}
    assert summary["previous"]["run_ids"]  # the previous build's own runs, named
    shown = CliRunner().invoke(cli, ["results", "show", str(decision.run_id)])
    assert shown.exit_code == 0 and '"decision": "rolled back"' in shown.output
