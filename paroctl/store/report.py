"""`paroctl report`: markdown + PNG plots comparing profiles from their latest stored runs.

matplotlib is imported inside the drawing function, and figures are drawn without pyplot (no
global state, no display: matplotlib's Agg canvas writes the PNG): the rest of paroctl never pays
for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paroctl import state
from paroctl.store.results import Store, headline_numbers

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from paroctl.profile.schema import Profile

GATE_ORDER = ("sanity", "greedy", "gsm8k", "decode", "prefill", "concurrency", "kld")


@dataclass(frozen=True)
class Curve:
    """One profile's points on one plot: x values, y values, optional (low, high) intervals, and
    the band each x is judged against ((x, limit) pairs; a bar's band sits at x 0)."""

    profile: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    lows: tuple[float, ...] = ()
    highs: tuple[float, ...] = ()
    band: tuple[tuple[float, float], ...] = ()
    band_label: str = "band"


@dataclass(frozen=True)
class Plot:
    """One PNG: its file name, words, curves, and how its axes read."""

    name: str
    title: str
    xlabel: str
    ylabel: str
    curves: tuple[Curve, ...]
    bars: bool = False
    scale: float = 1.0  # y values are multiplied by this (fractions shown as %)
    ymax: float | None = None  # a fixed top (100 for a percentage)


# gate -> (summary field, band attribute on the profile's Gates, the band's direction)
TIMING = {
    "decode": ("ms_per_step", "max_ms_per_step", "max"),
    "prefill": ("prefill_tok_s", "min_tok_s", "min"),
    "concurrency": ("aggregate_tok_s", "min_aggregate_tok_s", "min"),
}
BandSource = Callable[[str], "Profile | None"]
BAND = "band"  # the gid of every band artist, so a reader of the figure tells them from data


def latest_runs(
    store: Store, profiles: Sequence[str] | None
) -> dict[str, dict[str, dict[str, Any]]]:
    """profile -> gate -> its latest finished (not errored) run."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in reversed(store.runs(limit=100000)):
        if run["status"] in ("running", "error"):
            continue
        if profiles and run["profile"] not in profiles:
            continue
        out.setdefault(run["profile"], {})[run["gate"]] = run
    return out


def _points(run: Mapping[str, Any], field: str) -> list[tuple[float, float, float, float]]:
    """(x, median, min, max) per point; a scalar point is its own min and max."""
    points = (run.get("summary") or {}).get("points") or {}
    out = []
    for x, values in points.items():
        value = values.get(field)
        if isinstance(value, dict):
            mid = value.get("median")
            low, high = value.get("min", mid), value.get("max", mid)
        else:
            mid = low = high = value
        if mid is not None and low is not None and high is not None:
            out.append((float(x), float(mid), float(low), float(high)))
    return sorted(out)


def _band(
    run: Mapping[str, Any], profile: str, gate: str, bands: BandSource | None
) -> tuple[tuple[tuple[float, float], ...], str]:
    """A timing gate's band from the profile (today's file; said so when it changed since)."""
    found = bands(profile) if bands else None
    band = getattr(found.body.gates, gate, None) if found else None
    if found is None or band is None:
        return (), ""
    _, attr, direction = TIMING[gate]
    limits = tuple(sorted((float(x), float(v)) for x, v in getattr(band, attr).items()))
    edited = " (profile edited since the run)" if found.hash != run.get("profile_hash") else ""
    return limits, f"{profile} band ({direction}){edited}"


def curves(
    latest: Mapping[str, Mapping[str, Any]], gate: str, bands: BandSource | None = None
) -> list[Curve]:
    """Each profile's curve of its timing gate's measured field: median with min..max, and band."""
    field = TIMING[gate][0]
    out = []
    for profile, runs in sorted(latest.items()):
        if gate in runs and (points := _points(runs[gate], field)):
            band, label = _band(runs[gate], profile, gate, bands)
            xs, ys, lows, highs = (tuple(column) for column in zip(*points, strict=True))
            out.append(Curve(profile, xs, ys, lows, highs, band, label))
    return out


def gsm8k_bars(latest: Mapping[str, Mapping[str, Any]]) -> list[Curve]:
    """Each profile's GSM8K accuracy (judged metric) with its Wilson interval and the band its
    run was judged by (the interval's lower end must clear it)."""
    out = []
    for profile, runs in sorted(latest.items()):
        summary = (runs.get("gsm8k") or {}).get("summary") or {}
        metric = summary.get(summary.get("metric", ""), None)
        if metric:
            floor = summary.get("min_lower_bound")
            band = ((0.0, float(floor)),) if floor is not None else ()
            out.append(
                Curve(
                    profile,
                    (0.0,),
                    (metric["acc"],),
                    (metric["low"],),
                    (metric["high"],),
                    band,
                    "band (min lower bound)",
                )
            )
    return out


def kld_bars(latest: Mapping[str, Mapping[str, Any]]) -> list[Curve]:
    """Each profile's mean KL against its reference, with ± one standard error and its band."""
    out = []
    for profile, runs in sorted(latest.items()):
        summary = (runs.get("kld") or {}).get("summary") or {}
        if "kl" in summary:
            kl, err = float(summary["kl"]), float(summary.get("kl_stderr", 0.0))
            reference, top_k = summary.get("reference", "?"), summary.get("top_k", "?")
            label = f"{profile}\nvs {reference}, top-{top_k}"
            limit = (summary.get("band") or {}).get("max_mean_kl")
            band = ((0.0, float(limit)),) if limit is not None else ()
            out.append(Curve(label, (0.0,), (kl,), (kl - err,), (kl + err,), band, "band (max)"))
    return out


def plots(latest: Mapping[str, Mapping[str, Any]], bands: BandSource | None = None) -> list[Plot]:
    """Every plot the stored runs give, in report order."""
    words = {
        "decode": ("Decode ms/step vs context (median, min..max)", "context tokens", "ms per step"),
        "prefill": ("Prefill tok/s vs prompt length (median, min..max)", "prompt tokens",
                    "tokens/s"),
        "concurrency": ("Aggregate decode tok/s vs streams", "concurrent streams", "tokens/s"),
    }  # fmt: skip
    out = []
    for gate, (title, xlabel, ylabel) in words.items():
        if data := curves(latest, gate, bands):
            out.append(Plot(f"{gate}.png", title, xlabel, ylabel, tuple(data)))
    if data := gsm8k_bars(latest):
        title = "GSM8K accuracy (Wilson 95% interval)"
        out.append(Plot("gsm8k.png", title, "", "accuracy %", tuple(data), True, 100.0, 100.0))
    if data := kld_bars(latest):
        title = "KL divergence from the reference (± 1 s.e.)"
        out.append(Plot("kld.png", title, "", "nats", tuple(data), True))
    return out


def markdown(latest: Mapping[str, Mapping[str, Any]], images: Sequence[str]) -> str:
    """The report text: a verdict table, every profile's numbers, provenance, and the plots."""
    profiles = sorted(latest)
    lines = ["# paroctl gate report", "", "| gate | " + " | ".join(profiles) + " |"]
    lines.append("|---|" + "---|" * len(profiles))
    for gate in GATE_ORDER:
        cells = []
        for profile in profiles:
            run = latest[profile].get(gate)
            cells.append("-" if run is None else f"{run['status']}: {run['message'] or ''}")
        lines.append(f"| {gate} | " + " | ".join(cells) + " |")
    for profile in profiles:
        lines += ["", f"## {profile}", ""]
        for gate in GATE_ORDER:
            run = latest[profile].get(gate)
            if run is None:
                continue
            lines.append(
                f"- **{gate}** run `{run['run_id']}` ({run['status']}), boot `{run['boot_id']}`, "
                f"hash `{run['profile_hash']}`, image `{run['image']}`, first boot "
                f"{run['first_boot']}, vLLM {run['server_version']}, "
                f"paroctl {run['paroctl_version']}"
            )
            for name, value in sorted(headline_numbers(run).items()):
                lines.append(f"  - {name}: {value:.4g}")
    if images:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(name).stem}]({name})" for name in images]
    return "\n".join(lines) + "\n"


def figure(plot: Plot) -> Figure:
    """Draw one plot: y from zero (every plotted quantity is a ratio scale), intervals as error
    bars, bands as dashed lines, ticks only at the measured counts."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    if plot.bars:
        _draw_bars(ax, plot)
    else:
        _draw_curves(ax, plot)
        # ticks where something is drawn: the measured counts and the bands' points
        xs = sorted({x for c in plot.curves for x in (*c.xs, *(bx for bx, _ in c.band))})
        if xs[-1] / max(xs[0], 1) > 50:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])  # counts: never "1.5 streams"
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(plot.xlabel)
    ax.set_ylim(0, plot.ymax)  # after drawing: autoscaled top, fixed zero
    ax.set_title(plot.title)
    ax.set_ylabel(plot.ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _draw_curves(ax: Axes, plot: Plot) -> None:
    k = plot.scale
    for curve in plot.curves:
        ys = [y * k for y in curve.ys]
        shown = ax.errorbar(
            curve.xs, ys, yerr=_errors(curve, k), marker="o", capsize=4, label=curve.profile
        )
        if curve.band:
            line = ax.plot(
                [x for x, _ in curve.band],
                [limit * k for _, limit in curve.band],
                linestyle="--",
                marker="_",
                markersize=14,
                color=shown.lines[0].get_color(),
                label=curve.band_label,
            )
            line[0].set_gid(BAND)


def _draw_bars(ax: Axes, plot: Plot) -> None:
    names = [bar.profile for bar in plot.curves]
    values = [bar.ys[0] * plot.scale for bar in plot.curves]
    ax.bar(names, values, yerr=_errors_bars(plot), capsize=6)
    labelled = False
    for i, bar in enumerate(plot.curves):
        for _, limit in bar.band:
            label = "_" if labelled else bar.band_label  # one legend entry for them all
            drawn = ax.hlines(limit * plot.scale, i - 0.4, i + 0.4, "red", "--", label=label)
            drawn.set_gid(BAND)
            labelled = True


def _errors(curve: Curve, scale: float) -> list[list[float]] | None:
    if not curve.lows:
        return None
    return [
        [(y - low) * scale for y, low in zip(curve.ys, curve.lows, strict=True)],
        [(high - y) * scale for y, high in zip(curve.ys, curve.highs, strict=True)],
    ]


def _errors_bars(plot: Plot) -> list[list[float]]:
    return [
        [(bar.ys[0] - bar.lows[0]) * plot.scale for bar in plot.curves],
        [(bar.highs[0] - bar.ys[0]) * plot.scale for bar in plot.curves],
    ]


def drawn(fig: Figure) -> dict[str, Any]:
    """What a figure shows, read back from its Axes: limits, ticks, every data line, band and
    error bar. Saved into the PNG (tEXt "Description") so the file says it too."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.patches import Rectangle

    ax = fig.axes[0]
    artists = [*ax.get_lines(), *ax.collections]
    bands = [{"label": a.get_label(), "xy": _xy(a)} for a in artists if a.get_gid() == BAND]
    curves = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    # an errorbar's data line is the container's first artist (a bar chart's has none)
    lines = [
        {"label": c.get_label(), "xy": c.lines[0].get_xydata().tolist()}
        for c in curves
        if c.lines[0] is not None
    ]
    errorbars = [
        [seg.tolist() for coll in c.lines[2] for seg in coll.get_segments()]
        for c in curves
        if c.has_yerr
    ]
    return {
        "title": ax.get_title(),
        "ylim": [float(v) for v in ax.get_ylim()],
        "xscale": ax.get_xscale(),
        "xticks": [float(t) for t in ax.get_xticks()],
        "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
        "bars": [float(p.get_height()) for p in ax.patches if isinstance(p, Rectangle)],
        "lines": lines,
        "bands": bands,
        "errorbars": errorbars,
    }


def _xy(artist: Any) -> list[list[float]]:
    # a band line's points, or an hlines segment's two ends
    if hasattr(artist, "get_xydata"):
        return [[float(x), float(y)] for x, y in artist.get_xydata()]
    return [[float(x), float(y)] for seg in artist.get_segments() for x, y in seg]


def write_report(
    store: Store,
    out_dir: Path,
    profiles: Sequence[str] | None = None,
    bands: BandSource | None = None,
) -> Path:
    """Write report.md and its PNG plots into out_dir; return the markdown's path. `bands` gives
    a profile by name (None when it is gone): the timing plots draw its bands."""
    latest = latest_runs(store, profiles)
    out_dir.mkdir(parents=True, exist_ok=True)
    images: list[str] = []
    for plot in plots(latest, bands):
        fig = figure(plot)
        meta = {"Title": plot.title, "Description": json.dumps(drawn(fig), sort_keys=True)}
        fig.savefig(out_dir / plot.name, dpi=100, metadata=meta)
        images.append(plot.name)
    path = out_dir / "report.md"
    state.atomic_write(path, markdown(latest, images))
    return path
