"""The report plots KL by profile from stored kld runs (real sqlite store, real matplotlib)."""

from __future__ import annotations

from pathlib import Path

from paroctl.store import report, results


def _kld_run(store: results.Store, run_id: str, profile: str, kl: float, err: float) -> None:
    prov = results.Provenance(profile, "h", {}, None, "boot", False, "0.1.0", "0.32.0")
    store.start_run(run_id, "kld", prov, {})
    summary = {
        "kl": kl,
        "kl_stderr": err,
        "same_top": 0.6,
        "kl_median": kl / 2,
        "kl_p99": 2.0,
        "reference": "cpu-demo",
        "top_k": 20,
    }
    store.finish_run(run_id, "pass", summary, "mean KL", kl, "ok")


def test_report_has_kl_by_profile(tmp_path: Path) -> None:
    store = results.open_store(tmp_path / "r.db")
    _kld_run(store, "r1", "cpu-demo-paro", 0.289, 0.014)
    _kld_run(store, "r2", "cpu-demo-broken", 1.21, 0.05)
    bars = report.kld_bars(report.latest_runs(store, None))
    assert [(b.ys[0], b.lows[0], b.highs[0]) for b in bars] == [
        (1.21, 1.21 - 0.05, 1.21 + 0.05),
        (0.289, 0.289 - 0.014, 0.289 + 0.014),
    ]
    assert bars[1].profile == "cpu-demo-paro\nvs cpu-demo, top-20"
    path = report.write_report(store, tmp_path / "out")
    text = path.read_text()
    assert "![kld](kld.png)" in text
    assert "  - kl: 0.289" in text
    assert (tmp_path / "out" / "kld.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
