"""`paroctl gate kld` end to end on CPU: bf16 SmolLM2 (cpu-demo) against its ParoQuant int4 copy.

One box (PAROCTL_HOME, profiles on a free port) for the module; tests run in order: the first
collects the reference through real switches, the second reuses it, the third judges a candidate
whose band is too tight. Four CPU boots in all (~40-90 s each on two cores).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from paroctl import demo, net, profiles, state
from paroctl import switch as switch_mod
from paroctl.cli.main import cli
from paroctl.results import open_store

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
SHARED_DATA = REPO / "tests" / "data"  # the repository's copy (tests/data/README.md)
ARGS = ("--reference", "cpu-demo", "--chunks", "8", "--chunk-tokens", "128", "--top-k", "20")
NAMES = ("cpu-demo", "cpu-demo-paro", "cpu-demo-paro-corrupt")
# Run 2 scores the same token ids on the same boot against the stored reference: vLLM CPU prefill
# is deterministic there, so anything past float dust would mean the reuse is wrong.
STABLE_NATS = 1e-4
MEASURED: dict[str, Any] = {}


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory,
    demo_parts: Any,
    nibble_corrupter: Callable[[Path, Path], None],
    stop_box: Callable[[dict[str, str], Any], None],
) -> Iterator[dict[str, str]]:
    """PAROCTL_HOME and a profiles dir for the module: the CPU pair and a corrupted candidate."""
    demo.ensure_plugin(demo_parts.python)
    demo.ensure_smollm2_paro(demo.default_models_dir(), demo_parts.python)
    root = tmp_path_factory.mktemp("kld-box")
    prof_dir = root / "profiles"
    prof_dir.mkdir()
    port = net.free_port()
    base = (REPO / "profiles" / "_cpu.yaml").read_text().replace("port: 8123", f"port: {port}")
    (prof_dir / "_cpu.yaml").write_text(base)
    for name in NAMES[:2]:
        (prof_dir / f"{name}.yaml").write_text((REPO / "profiles" / f"{name}.yaml").read_text())
    # The int4 checkpoint with its zero points packed in the wrong nibble order (what `paro-quant
    # inspect` rejects), forced through under the real cpu-demo-paro band.
    bad_model = root / "models" / "SmolLM2-135M-Instruct-paro-corrupt"
    nibble_corrupter(demo.paro_model_dir(demo.default_models_dir()), bad_model)
    corrupt = yaml.safe_load((REPO / "profiles" / "cpu-demo-paro.yaml").read_text())
    corrupt["description"] = "cpu-demo-paro with a deliberately corrupted checkpoint"
    corrupt["model"]["path"] = str(bad_model)
    corrupt["model"]["served_names"] = ["smollm2-paro-corrupt"]
    corrupt["boot"]["sanity_expect"] = "re:(?s)."  # any text: the KL gate is the judge here
    (prof_dir / "cpu-demo-paro-corrupt.yaml").write_text(yaml.safe_dump(corrupt))
    env = {
        "PAROCTL_HOME": str(root / "home"),
        "PAROCTL_PROFILES_DIR": str(prof_dir),
        "PAROCTL_DATA_DIR": str(SHARED_DATA),
    }
    yield env
    try:
        stop_box(env, NAMES)
    finally:
        print("\nkld e2e measurements:", MEASURED)


@pytest.fixture(autouse=True)
def on_box(box: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in box.items():
        monkeypatch.setenv(key, value)


def _switch(name: str) -> None:
    switch_mod.switch(profiles.load(name), switch_mod.default_deps(), load_profile=profiles.load)


def _kld(*extra: str) -> Any:
    return CliRunner().invoke(cli, ["gate", "kld", *ARGS, *extra])


def _last_run() -> dict[str, Any]:
    with open_store() as store:
        return store.runs(gate="kld")[0]


def test_collects_reference_switches_and_comes_back() -> None:
    _switch("cpu-demo-paro")
    result = _kld()
    run = _last_run()
    MEASURED["run1"] = result.output.strip()
    assert result.exit_code == 0, result.output
    assert "top-20, 8 chunks x 128 tokens of wikitext2, 1016 positions" in result.output
    assert "collected: no stored reference for cpu-demo" in result.output
    summary = run["summary"]
    assert summary["switches"] == ["cpu-demo", "cpu-demo-paro"]
    assert (run["profile"], run["status"], run["headline_name"]) == (
        "cpu-demo-paro",
        "pass",
        "mean KL",
    )
    assert math.isfinite(run["headline"]) and 0.0 < run["headline"] < 0.5
    assert summary["same_top"] > 0.5 and summary["n"] == 1016
    live = state.read_live()
    assert live is not None and live["profile"] == "cpu-demo-paro"  # back where it started
    with open_store() as store:
        assert len(store.items(run["run_id"])) == 8


def test_second_run_reuses_the_reference_and_agrees() -> None:
    first = _last_run()
    result = _kld()
    second = _last_run()
    MEASURED["run2"] = result.output.strip()
    assert result.exit_code == 0, result.output
    assert "reused the stored reference" in result.output
    assert second["summary"]["switches"] == []
    MEASURED["run_delta"] = abs(second["headline"] - first["headline"])
    assert abs(second["headline"] - first["headline"]) <= STABLE_NATS
    assert state.read_live()["profile"] == "cpu-demo-paro"  # type: ignore[index]


def test_corrupted_checkpoint_gives_a_large_kl_and_fails_the_band() -> None:
    good = _last_run()["headline"]
    _switch("cpu-demo-paro-corrupt")
    result = _kld()
    bad = _last_run()
    MEASURED["corrupt"] = result.output.strip()
    # The reference's profile, image, stack, corpus and chunking are unchanged: no re-collection.
    assert "reused the stored reference" in result.output
    assert result.exit_code == 1, result.output
    assert "kld: FAIL" in result.output and "band: KL <= 0.4" in result.output
    assert bad["headline"] > 3 * good, (bad["headline"], good)
    assert bad["summary"]["same_top"] < 0.2
