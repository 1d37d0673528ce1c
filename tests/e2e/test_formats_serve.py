"""The other formats of issue #8 on CPU: int5 (I8 PG ZPE), MXFP4-PARO and NVFP4->MXFP4 served.

Each copy of SmolLM2 (built once by `paroctl demo setup`'s recipes) boots through `paroctl
switch` under its real profile (boot markers and the sanity completion are the switch's own
checks), its marker line is checked field by field, and `paroctl gate kld` scores it against the
bf16 cpu-demo with the profile's real band. The bf16 reference is collected once, by the first
format, and reused by the others; int4 (cpu-demo-paro) is scored on the same reference last so
the ordering int5 < int4 is measured, not assumed. Six CPU boots in all (the first candidate boots
twice around the reference collection). Measured numbers are printed at the end (run with -s).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from paroctl import demo, net, profiles, state
from paroctl import switch as switch_mod
from paroctl.cli.main import cli
from paroctl.client import Client
from paroctl.results import open_store
from paroctl.runtime.local import LocalRuntime

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO / "tests" / "data"  # the repository's copy (tests/data/README.md)
ARGS = ("--reference", "cpu-demo", "--chunks", "8", "--chunk-tokens", "128", "--top-k", "20")
POSITIONS = 1016  # 8 chunks x 128 tokens, the first token of each has no logprob
FORMATS = ("cpu-demo-int5", "cpu-demo-mxfp4", "cpu-demo-nvfp4")
INT4 = "cpu-demo-paro"
NAMES = ("cpu-demo", *FORMATS, INT4)
V = r"version=\d+\.\d+\.\d+"
R = r"0\.\d{4}"
# The whole marker line per profile: method, backend, act mode, and the layers by kind.
MARKER_RE = {
    "cpu-demo-int5": rf"paro-vllm: method=paroquant backend=reference bits=5 layers=210/210 {V} "
    r"act=int8/group zpe=1$",
    "cpu-demo-mxfp4": r"paro-vllm: method=paroquant_mxfp4 backend=reference act=fp8 "
    rf"layers=210/210 from=mxfp4:210 kept=none lm_head=bf16 {V}$",
    "cpu-demo-nvfp4": r"paro-vllm: method=nvfp4_mxfp4 backend=reference exp=mse "
    r"layers=209/210 from=fp8:132,nvfp4:77 kept=bf16:1 lm_head=bf16 "
    rf"relrms_mean={R} relrms_max={R} {V}$",
    INT4: rf"paro-vllm: method=paroquant backend=reference bits=4 layers=210/210 {V} "
    r"act=fp8/token zpe=0$",
}
MEASURED: dict[str, Any] = {}


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory,
    demo_parts: Any,
    stop_box: Callable[[dict[str, str], Any], None],
) -> Iterator[dict[str, str]]:
    """PAROCTL_HOME and a profiles dir for the module: the real profiles, each on a free port."""
    start = time.monotonic()
    demo.ensure_plugin(demo_parts.python)
    models = demo.default_models_dir()
    demo.ensure_smollm2_paro(models, demo_parts.python)
    for copy in demo.FORMAT_COPIES:
        demo.ensure_format_copy(models, demo_parts.python, copy.key)
    MEASURED["setup_s"] = round(time.monotonic() - start, 1)
    root = tmp_path_factory.mktemp("formats-box")
    prof_dir = root / "profiles"
    prof_dir.mkdir()
    for name in ("_cpu", *NAMES):
        text = (REPO / "profiles" / f"{name}.yaml").read_text()
        # Own ports in the repository (8123-8126); free ones here, so a running demo is unharmed.
        text, count = re.subn(r"(?m)^(  port: )\d+", rf"\g<1>{net.free_port()}", text)
        assert count == (1 if name == "_cpu" or name in FORMATS else 0), (name, count)
        (prof_dir / f"{name}.yaml").write_text(text)
    env = {
        "PAROCTL_HOME": str(root / "home"),
        "PAROCTL_PROFILES_DIR": str(prof_dir),
        "PAROCTL_DATA_DIR": str(SHARED_DATA),
    }
    start = time.monotonic()
    yield env
    MEASURED["tests_s"] = round(time.monotonic() - start, 1)
    try:
        stop_box(env, NAMES)
    finally:
        print("\nformats e2e measurements:", MEASURED)


@pytest.fixture(autouse=True)
def on_box(box: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in box.items():
        monkeypatch.setenv(key, value)


def _switch(name: str) -> None:
    switch_mod.switch(profiles.load(name), switch_mod.default_deps(), load_profile=profiles.load)


def _marker_lines(name: str) -> list[str]:
    lines = LocalRuntime().logs(name)
    return [
        line[line.index("paro-vllm: method=") :] for line in lines if "paro-vllm: method=" in line
    ]


def _check_requant_log(name: str) -> None:
    """One relRMS line per requantized linear (119 modules: 30 layers x 4, minus the bf16 one
    kept) and one summary line whose mean/max the marker repeats."""
    lines = list(LocalRuntime().logs(name))
    per_layer = [ln for ln in lines if re.search(r"paro-vllm: requant \S+ (nvfp4|fp8)->mxfp4 ", ln)]
    assert len(per_layer) == 119, len(per_layer)
    assert not any("model.layers.0.mlp.down_proj" in ln for ln in per_layer)
    (summary,) = [ln for ln in lines if "requant relRMS vs the checkpoint weights" in ln]
    assert re.search(rf"over 119 linears: mean={R} max={R} \(model\.layers\.", summary), summary


def _sanity_text(name: str) -> str:
    """The live serve's greedy answer to the profile's sanity prompt (reported, not judged)."""
    body = profiles.load(name).body
    with Client(f"http://127.0.0.1:{body.serve.port}") as client:
        out = client.completion(body.model.served_names[0], body.boot.sanity_prompt, 16)
    return str(out["choices"][0]["text"])


def _last_run() -> dict[str, Any]:
    with open_store() as store:
        return store.runs(gate="kld")[0]


def _serve_and_score(name: str) -> dict[str, Any]:
    """Switch to `name` (markers + sanity checked by the switch), check its marker line, run kld."""
    start = time.monotonic()
    _switch(name)
    boot_s = time.monotonic() - start
    (line,) = _marker_lines(name)  # one process loads the model: exactly one marker
    assert re.fullmatch(MARKER_RE[name], line), line
    MEASURED[f"{name}_sanity"] = _sanity_text(name)
    result = CliRunner().invoke(cli, ["gate", "kld", *ARGS])
    run = _last_run()
    s = run["summary"]
    MEASURED[name] = {
        "kl": round(run["headline"], 4),
        "kl_stderr": round(s["kl_stderr"], 4),
        "same_top": round(s["same_top"], 3),
        "n": s["n"],
        "boot_s": round(boot_s, 1),
        "switches": s["switches"],
    }
    if name == "cpu-demo-nvfp4":
        MEASURED["nvfp4_marker"] = line
        _check_requant_log(name)
    assert result.exit_code == 0, result.output
    assert (run["profile"], run["status"]) == (name, "pass"), result.output
    assert s["n"] == POSITIONS and math.isfinite(run["headline"])
    assert state.read_live()["profile"] == name  # type: ignore[index]
    return run


def test_int5_collects_the_reference_and_passes_its_band() -> None:
    run = _serve_and_score("cpu-demo-int5")
    assert run["summary"]["switches"] == ["cpu-demo", "cpu-demo-int5"]  # the one collection


@pytest.mark.parametrize("name", ["cpu-demo-mxfp4", "cpu-demo-nvfp4", INT4])
def test_format_reuses_the_reference_and_passes_its_band(name: str) -> None:
    run = _serve_and_score(name)
    assert run["summary"]["switches"] == []  # the stored bf16 reference, no re-collection


def test_kl_orders_int5_below_int4_and_the_fp4_formats() -> None:
    got = {name: MEASURED[name] for name in (*FORMATS, INT4) if name in MEASURED}
    assert len(got) == 4, f"an earlier test did not score every format: {sorted(got)}"

    def gap(a: str, b: str) -> float:
        # a < b by more than three combined standard errors: a real ordering, not noise
        ea, eb = got[a]["kl_stderr"], got[b]["kl_stderr"]
        return got[b]["kl"] - got[a]["kl"] - 3 * math.hypot(ea, eb)

    # Measured 2026-11-29: int5 0.073 +- 0.008, int4 0.304 +- 0.015, MXFP4-PARO 0.371 +- 0.016,
    # NVFP4->MXFP4 0.415 +- 0.021. int4 < MXFP4 is NOT asserted: its gap (0.068) is barely three
    # combined standard errors (0.065), so it would fail on a harmless shift.
    for fp4 in ("cpu-demo-mxfp4", "cpu-demo-nvfp4"):
        assert gap("cpu-demo-int5", fp4) > 0, got
    assert gap("cpu-demo-int5", INT4) > 0, got
