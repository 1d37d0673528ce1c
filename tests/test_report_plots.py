"""The report's plots show what was measured and what it is judged by: every PNG is opened and its
data read back (the tEXt record the report saves from the figure's own Axes, and the Axes
themselves), never its pixels. Real sqlite store, real matplotlib, the shipped paro-int4 profile's
bands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from paroctl.profile import profiles
from paroctl.profile.schema import Profile
from paroctl.store import report, results

INT4 = "paro-int4"  # shipped: decode, prefill and concurrency bands (profiles/paro-int4.yaml)
OTHER = "nvfp4"  # shipped: a concurrency band too


def _run(
    store: results.Store, run_id: str, gate: str, profile: str, profile_hash: str, summary: Any
) -> None:
    prov = results.Provenance(profile, profile_hash, {}, None, "boot", False, "0.1.0", "0.32.0")
    store.start_run(run_id, gate, prov, {})
    store.finish_run(run_id, "pass", summary, "x", 1.0, "ok")


def _spread(median: float, low: float, high: float) -> dict[str, float]:
    return {"n": 3, "median": median, "min": low, "max": high, "rel_spread": (high - low) / median}


@pytest.fixture
def store(tmp_path: Path) -> results.Store:
    int4 = profiles.load(INT4)
    db = results.open_store(tmp_path / "r.db")
    decode = {"points": {"25": {"ms_per_step": _spread(23.3, 23.1, 23.9)},
                         "8192": {"ms_per_step": _spread(24.8, 24.5, 26.6)}}}  # fmt: skip
    _run(db, "d1", "decode", INT4, int4.hash, decode)
    prefill = {"points": {"2048": {"prefill_tok_s": _spread(3808, 3700, 3850)}}}
    _run(db, "p1", "prefill", INT4, int4.hash, prefill)
    # A 14% spread that a y axis cut at the lowest value would draw as a cliff.
    conc = {"points": {"1": {"aggregate_tok_s": 168.0}, "2": {"aggregate_tok_s": 276.0},
                       "4": {"aggregate_tok_s": 240.0}}}  # fmt: skip
    _run(db, "c1", "concurrency", INT4, int4.hash, conc)
    # The other profile's concurrency run was judged by a file edited since (its hash differs).
    _run(db, "c2", "concurrency", OTHER, "edited", {"points": {"2": {"aggregate_tok_s": 250.0}}})
    gsm = {"metric": "flexible-extract", "min_lower_bound": 0.85,
           "flexible-extract": {"acc": 0.9, "low": 0.87, "high": 0.93}}  # fmt: skip
    _run(db, "g1", "gsm8k", INT4, int4.hash, gsm)
    kld = {"kl": 0.289, "kl_stderr": 0.014, "reference": "bf16-ref", "top_k": 256,
           "band": {"max_mean_kl": 0.4, "min_top1": 0.5}}  # fmt: skip
    _run(db, "k1", "kld", INT4, int4.hash, kld)
    return db


def _bands(name: str) -> Profile | None:
    return profiles.load(name)


def _png_data(path: Path) -> dict[str, Any]:
    with Image.open(path) as png:
        assert png.format == "PNG"
        return json.loads(png.text["Description"])  # type: ignore[attr-defined]


def test_every_png_says_what_it_draws(store: results.Store, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report.write_report(store, out, None, _bands)
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == ["concurrency.png", "decode.png", "gsm8k.png", "kld.png", "prefill.png"]
    for name in names:
        data = _png_data(out / name)
        assert data["ylim"][0] == 0.0, (name, data["ylim"])  # every axis from zero
        assert data["bands"], name  # every plot draws what it is judged by

    decode = _png_data(out / "decode.png")
    (line,) = decode["lines"]
    assert (line["label"], line["xy"]) == (INT4, [[25.0, 23.3], [8192.0, 24.8]])
    # min..max of the repetitions as error bars, not just the median
    assert decode["errorbars"] == [[[[25.0, 23.1], [25.0, 23.9]], [[8192.0, 24.5], [8192.0, 26.6]]]]
    (band,) = decode["bands"]  # the shipped band, at every context it names
    assert band["label"] == f"{INT4} band (max)"
    assert band["xy"] == [[25.0, 25.6], [8192.0, 27.3], [32768.0, 28.2]]
    assert decode["xticklabels"] == ["25", "8192", "32768"] and decode["xscale"] == "log"

    prefill = _png_data(out / "prefill.png")
    assert prefill["errorbars"] == [[[[2048.0, 3700.0], [2048.0, 3850.0]]]]
    assert prefill["bands"][0]["xy"][0] == [2048.0, 3427.0]

    conc = _png_data(out / "concurrency.png")
    # ticks at the measured stream counts and the band's: no "1.5 streams"
    assert conc["xticks"] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert conc["xticklabels"] == ["1", "2", "4", "8", "16"] and conc["xscale"] == "linear"
    assert conc["ylim"][0] == 0.0 and conc["ylim"][1] >= 276.0
    labels = {b["label"] for b in conc["bands"]}
    assert labels == {f"{INT4} band (min)", f"{OTHER} band (min) (profile edited since the run)"}

    gsm = _png_data(out / "gsm8k.png")
    assert gsm["ylim"] == [0.0, 100.0] and gsm["bars"] == [pytest.approx(90.0)]
    assert gsm["errorbars"] == [[[[0.0, pytest.approx(87.0)], [0.0, pytest.approx(93.0)]]]]
    assert [b["xy"] for b in gsm["bands"]] == [[[-0.4, 85.0], [0.4, 85.0]]]

    kld = _png_data(out / "kld.png")
    assert kld["bars"] == [0.289] and kld["bands"][0]["xy"] == [[-0.4, 0.4], [0.4, 0.4]]
    low, high = kld["errorbars"][0][0]
    assert (low[1], high[1]) == (pytest.approx(0.275), pytest.approx(0.303))


def test_the_figure_itself_starts_at_zero_with_integer_count_ticks(store: results.Store) -> None:
    plots = {p.name: p for p in report.plots(report.latest_runs(store, None), _bands)}
    fig = report.figure(plots["concurrency.png"])
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0.0
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert list(ax.xaxis.get_minor_locator().tick_values(1, 4)) == []  # no in-between ticks


def test_without_a_profile_the_timing_plots_draw_no_band(store: results.Store) -> None:
    plots = {p.name: p for p in report.plots(report.latest_runs(store, None), lambda _: None)}
    assert all(not c.band for c in plots["decode.png"].curves)
    # GSM8K and KLD runs stored the band they were judged by: drawn from the run itself.
    assert plots["gsm8k.png"].curves[0].band == ((0.0, 0.85),)
    assert plots["kld.png"].curves[0].band == ((0.0, 0.4),)
