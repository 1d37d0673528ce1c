"""The rules that turn a gvrows run (`benchmarks.kernels.decode --h2 gvrows`) into dispatch settings (CPU only).

The runs here are built from per-cell times chosen to sit on each side of every rule's edge;
`decide_gvrows` must read them exactly as it would read the GPU run's JSON.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paro_kernels.triton import gemv_mma, prologue

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the checkout, no installed package
    sys.path.insert(0, str(ROOT))
d = importlib.import_module("benchmarks.kernels.decide_gvrows")
MS = (8, 16, 24, 32)
LARGE = ("qkv", "gate_up")
SMALL = "o_proj"


def _run(records: dict[int, dict[tuple[str, int], float]],
         blocks: dict[tuple[str, int], float]) -> dict[str, object]:  # fmt: skip
    rows = [{"shape": s, "m": m, "variant": d.RECORDS.format(r), "us": us}
            for r, cells in records.items() for (s, m), us in cells.items()]  # fmt: skip
    rows += [{"shape": s, "m": m, "variant": d.BLOCKS, "us": us} for (s, m), us in blocks.items()]
    # the rows a gvrows run also writes, which no rule reads
    rows += [{"shape": "qkv", "m": 8, "variant": "cuBLAS bf16", "us": 1.0}]
    return {"device": "test", "h2": rows}


def _uniform(us: float, shapes: tuple[str, ...] = (*LARGE, SMALL)) -> dict[tuple[str, int], float]:
    return {(s, m): us * m for s in shapes for m in MS}


def test_rows_pick_the_best_geomean_and_refuse_a_loss_on_any_cell() -> None:
    base = _uniform(1.0)
    r4 = {c: v * 0.80 for c, v in base.items()}
    r4[("gate_up", 32)] = base[("gate_up", 32)] * 1.10  # best mean, but loses 10% on one cell
    r8 = {c: v * 0.85 for c, v in base.items()}
    r16 = {c: v * 0.95 for c, v in base.items()}
    dec = d.decide(_run({0: base, 4: r4, 8: r8, 16: r16}, _uniform(10.0)))
    assert dec.givens_rows == 8
    assert any("rows 4" in w and "out" in w and "gate_up M=32" in w for w in dec.why["GIVENS_ROWS"])


def test_rows_stay_at_zero_when_the_gain_is_within_noise() -> None:
    base = _uniform(1.0)
    near = {c: v * (1 - d.NOISE / 2) for c, v in base.items()}
    dec = d.decide(_run({0: base, 4: base, 8: near, 16: base}, _uniform(10.0)))
    assert dec.givens_rows == 0
    assert "within noise" in dec.why["GIVENS_ROWS"][-1]


def test_blocks_threshold_sits_past_the_last_measured_m_the_records_won() -> None:
    recs = _uniform(1.0)
    blocks = {c: v * (0.9 if c[1] >= 24 else 1.1) for c, v in recs.items()}
    blocks[(SMALL, 16)] = recs[(SMALL, 16)] * 0.9
    blocks[(SMALL, 8)] = recs[(SMALL, 8)] * 0.9
    dec = d.decide(_run({0: recs, 4: recs, 8: recs, 16: recs}, blocks))
    assert dec.givens_rows == 0
    assert dec.blocks_all_min_m == 17  # records won at 16, blocks at 24 and 32
    assert dec.blocks_min_m == 8  # o_proj: blocks from the smallest measured M


def test_blocks_use_the_chosen_rows_and_a_class_sum() -> None:
    base = _uniform(1.0)
    r8 = {c: v * 0.5 for c, v in base.items()}
    # the blocks beat rows 0 everywhere, but not the records at 8 rows a program
    blocks = {c: v * 0.7 for c, v in base.items()}
    # one large layer's blocks win at 32, but the class's summed time still favours the records
    blocks[("qkv", 32)] = base[("qkv", 32)] * 0.4
    dec = d.decide(_run({0: base, 4: base, 8: r8, 16: base}, blocks))
    assert dec.givens_rows == 8
    never = gemv_mma.MMA_TILE_MAX_M + 1
    assert dec.blocks_all_min_m == never and dec.blocks_min_m == never


def test_non_monotone_blocks_wins_count_only_from_the_top() -> None:
    recs = _uniform(1.0)
    blocks = {c: v * (0.9 if c[1] in (8, 32) else 1.1) for c, v in recs.items()}
    dec = d.decide(_run({0: recs, 4: recs, 8: recs, 16: recs}, blocks))
    assert dec.blocks_all_min_m == 25 and dec.blocks_min_m == 25


def test_the_rule_rederives_the_blocks_threshold_from_the_run_that_set_it() -> None:
    # The H100 run of 2026-12-05 (committed, benchmarks/results/) set MMA_BLOCKS_ALL_MIN_M = 17 from the int4
    # mma op on the records (one program for all rows: "int4 mma {}") and on the blocks.
    run = json.loads((RESULTS / "bench-2026-12-05-h100-int4-mma4.json").read_text())
    for row in run["h2"]:
        if row["variant"] == "int4 mma {}":
            row["variant"] = d.RECORDS.format(0)
    dec = d.decide(run)
    assert dec.givens_rows == 0
    # M = 16: the blocks' 108.34 us against the records' 108.86 is a tie (records); 24, 32: blocks
    assert dec.blocks_all_min_m == 17
    assert "M=16" in dec.why["MMA_BLOCKS_ALL_MIN_M"][-1]
    assert dec.why["MMA_BLOCKS_ALL_MIN_M"][-1].endswith(": records")
    assert dec.blocks_min_m == 16  # o_proj: the blocks at every M that run measured (16, 24, 32)


def test_the_shipped_settings_are_the_rule_applied_to_the_run_that_set_them() -> None:
    # The H100 gvrows run of 2026-12-06 (M = 16, 24, 32, every 27B shape): the records in 4-row
    # programs won every cell against one program for all rows and, to their 32 rows, against
    # the 16-row blocks; the shipped constants are what the rule reads from it.
    run = json.loads((RESULTS / "bench-2026-12-06-h100-gvrows.json").read_text())
    dec = d.decide(run)
    assert (dec.givens_rows, dec.blocks_all_min_m, dec.blocks_min_m) == (
        prologue.GIVENS_ROWS,
        gemv_mma.MMA_BLOCKS_ALL_MIN_M,
        gemv_mma.MMA_BLOCKS_MIN_M,
    )
    assert dec.givens_rows == 4 and dec.blocks_all_min_m == 33


def test_cli_prints_settings_and_refuses_a_run_that_is_not_gvrows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = _uniform(1.0)
    good = tmp_path / "gvrows.json"
    good.write_text(json.dumps(_run({0: recs, 4: recs, 8: recs, 16: recs}, _uniform(0.5))))
    assert d.main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "GIVENS_ROWS = 0\n" in out and "MMA_BLOCKS_ALL_MIN_M = 8\n" in out
    assert d.main([str(good), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks_min_m"] == 8
    bad = tmp_path / "mma.json"
    for body, says in (
        ({"h2": [{"shape": "qkv", "m": 8, "variant": "int4 as served"}]}, "h2[0]: not a bench row"),
        ({"h2": [{"shape": "qkv", "m": 8, "variant": "x", "us": 1}]}, "not a `--h2 gvrows` run"),
        ({"stage1": []}, "no 'h2' list"),
        ([1, 2], "no 'h2' list"),
        (
            _run({0: {("qkv", 8): 1.0}}, {("qkv", 16): 1.0}),
            "no 'int4 mma records rows 0' row beside 'int4 mma blocks prologue' at M=16",
        ),
    ):
        bad.write_text(json.dumps(body))
        assert d.main([str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"decide_gvrows: {bad}: ") and says in err
    bad.write_text("{")
    assert d.main([str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"decide_gvrows: {bad}: Expecting")
    # and the module runs as the usage line says
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "kernels"), str(ROOT)])}
    res = subprocess.run([sys.executable, "-m", "benchmarks.kernels.decide_gvrows", str(good)],
                         capture_output=True, text=True, cwd=ROOT, env=env)  # fmt: skip
    assert res.returncode == 0 and "GIVENS_ROWS = 0" in res.stdout, res.stderr
