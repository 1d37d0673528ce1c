"""`paroctl report`: markdown + PNG plots comparing profiles from their latest stored runs.

matplotlib is imported inside the plotting function (Agg backend): the rest of paroctl never pays
for it, and a box without a display renders fine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.store.results import Store, headline_numbers

GATE_ORDER = ("sanity", "greedy", "gsm8k", "decode", "prefill", "concurrency", "kld")


@dataclass(frozen=True)
class Curve:
    """One profile's points on one plot: x values, y values, optional (low, high) error bars."""

    profile: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    lows: tuple[float, ...] = ()
    highs: tuple[float, ...] = ()


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


def _points(run: Mapping[str, Any], field: str) -> list[tuple[float, float]]:
    points = (run.get("summary") or {}).get("points") or {}
    pairs = []
    for x, values in points.items():
        value = values.get(field)
        if isinstance(value, dict):
            value = value.get("median")
        if value is not None:
            pairs.append((float(x), float(value)))
    return sorted(pairs)


def curves(latest: Mapping[str, Mapping[str, Any]], gate: str, field: str) -> list[Curve]:
    """Each profile's curve of one summary field over its gate's points."""
    out = []
    for profile, runs in sorted(latest.items()):
        if gate in runs and (pairs := _points(runs[gate], field)):
            out.append(Curve(profile, tuple(x for x, _ in pairs), tuple(y for _, y in pairs)))
    return out


def gsm8k_bars(latest: Mapping[str, Mapping[str, Any]]) -> list[Curve]:
    """Each profile's GSM8K accuracy (judged metric) with its Wilson interval."""
    out = []
    for profile, runs in sorted(latest.items()):
        summary = (runs.get("gsm8k") or {}).get("summary") or {}
        metric = summary.get(summary.get("metric", ""), None)
        if metric:
            out.append(
                Curve(profile, (0.0,), (metric["acc"],), (metric["low"],), (metric["high"],))
            )
    return out


def kld_bars(latest: Mapping[str, Mapping[str, Any]]) -> list[Curve]:
    """Each profile's mean KL against its reference, with ± one standard error."""
    out = []
    for profile, runs in sorted(latest.items()):
        summary = (runs.get("kld") or {}).get("summary") or {}
        if "kl" in summary:
            kl, err = float(summary["kl"]), float(summary.get("kl_stderr", 0.0))
            reference, top_k = summary.get("reference", "?"), summary.get("top_k", "?")
            label = f"{profile}\nvs {reference}, top-{top_k}"
            out.append(Curve(label, (0.0,), (kl,), (kl - err,), (kl + err,)))
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


def _plot(path: Path, title: str, xlabel: str, ylabel: str, data: Sequence[Curve]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for curve in data:
        ax.plot(curve.xs, curve.ys, marker="o", label=curve.profile)
    if data and max(max(c.xs) for c in data) / max(min(min(c.xs) for c in data), 1) > 50:
        ax.set_xscale("log", base=2)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_bars(
    path: Path, bars: Sequence[Curve], title: str, ylabel: str, scale: float = 1.0
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [bar.profile for bar in bars]
    values = [bar.ys[0] * scale for bar in bars]
    errs = [
        [(bar.ys[0] - bar.lows[0]) * scale for bar in bars],
        [(bar.highs[0] - bar.ys[0]) * scale for bar in bars],
    ]
    ax.bar(names, values, yerr=errs, capsize=6)
    ax.set(title=title, ylabel=ylabel)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(store: Store, out_dir: Path, profiles: Sequence[str] | None = None) -> Path:
    """Write report.md and its PNG plots into out_dir; return the markdown's path."""
    latest = latest_runs(store, profiles)
    out_dir.mkdir(parents=True, exist_ok=True)
    images: list[str] = []
    plots = (
        ("decode.png", "decode", "ms_per_step", "Decode ms/step vs context", "context tokens",
         "ms per step"),
        ("prefill.png", "prefill", "prefill_tok_s", "Prefill tok/s vs prompt length",
         "prompt tokens", "tokens/s"),
        ("concurrency.png", "concurrency", "aggregate_tok_s", "Aggregate decode tok/s",
         "concurrent streams", "tokens/s"),
    )  # fmt: skip
    for name, gate, field, title, xlabel, ylabel in plots:
        data = curves(latest, gate, field)
        if data:
            _plot(out_dir / name, title, xlabel, ylabel, data)
            images.append(name)
    if bars := gsm8k_bars(latest):
        _plot_bars(
            out_dir / "gsm8k.png", bars, "GSM8K accuracy (Wilson 95% interval)", "accuracy %", 100
        )
        images.append("gsm8k.png")
    if bars := kld_bars(latest):
        _plot_bars(out_dir / "kld.png", bars, "KL divergence from the reference (± 1 s.e.)", "nats")
        images.append("kld.png")
    path = out_dir / "report.md"
    state.atomic_write(path, markdown(latest, images))
    return path
