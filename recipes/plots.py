"""The comparison's PNG plots (matplotlib, headless)."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

# One line style and marker per strategy: curves that are identical stay visible on top of each other.
STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "x"), ((0, (5, 1)), "D"), ((0, (1, 3)), "v")]


def loss_curves(losses: dict[str, list[float]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    seen: list[str] = []
    for i, (name, ys) in enumerate(losses.items()):
        same = next((s for s in seen if losses[s] == ys), None)
        line, marker = STYLES[i % len(STYLES)]
        ax.plot(range(1, len(ys) + 1), ys, label=name + (f" (identical to {same})" if same else ""), linestyle=line,
                marker=marker, markevery=max(1, len(ys) // 20), fillstyle="none", markersize=6 + 2 * i)
        seen.append(name)
    ax.set(xlabel="optimizer step", ylabel="loss (global mean)", title="Loss curves")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def loss_diff(rel_diff: dict[str, list[float]], reference: str, tolerance: float, path: Path) -> None:
    fig = loss_diff_figure(rel_diff, reference, tolerance)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def loss_diff_figure(rel_diff: dict[str, list[float]], reference: str, tolerance: float):
    """Relative difference per step against the tolerance the verdict uses. An exact 0 has no place on a log scale:
    it is said in words ("identical"), not drawn."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.axhline(tolerance, color="tab:red", linestyle="--", label=f"tolerance {tolerance:g}")
    notes, drawn = [], [tolerance]
    for i, (name, ys) in enumerate(rel_diff.items()):
        zeros = sum(1 for y in ys if y == 0)
        if ys and zeros == len(ys):
            notes.append(f"{name}: identical to {reference} at every step (difference exactly 0)")
            continue
        line, marker = STYLES[i % len(STYLES)]
        label = f"{name} vs {reference}" + (f" (exactly 0 at {zeros} step(s), not drawn)" if zeros else "")
        ax.plot(range(1, len(ys) + 1), [y if y > 0 else math.nan for y in ys], label=label, linestyle=line,
                marker=marker, fillstyle="none")
        drawn += [y for y in ys if y > 0 and math.isfinite(y)]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="optimizer step", ylabel="|loss difference| / reference loss", yscale="log",
           title=f"Loss difference against {reference}", ylim=(min(drawn) / 10, max(drawn) * 10))
    if notes:
        ax.text(0.02, 0.04, "\n".join(notes), transform=ax.transAxes, fontsize=9, va="bottom")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def throughput_memory(names: list[str], tokens_per_s: list[float], step_times: list[dict[str, Any]],
                      peak_gib: list[float], not_ranked: Optional[str], path: Path) -> None:
    """Median tokens/s with bars from the slowest to the fastest measured step; not_ranked: why there is no ranking."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4.5))
    low = [t - t * s["median_s"] / s["max_s"] for t, s in zip(tokens_per_s, step_times)]
    high = [t * s["median_s"] / s["min_s"] - t for t, s in zip(tokens_per_s, step_times)]
    a.bar(names, tokens_per_s, color="tab:blue", yerr=[low, high], capsize=6)
    counts = ", ".join(str(s["measured"]) for s in step_times)
    a.set(ylabel="tokens/s (median step; bar: slowest-fastest)", title=f"Throughput ({counts} measured steps)")
    if not_ranked:
        a.text(0.5, 0.5, textwrap.fill(not_ranked, 40), transform=a.transAxes,
               ha="center", va="center", color="tab:red", fontsize=10, bbox={"facecolor": "white", "alpha": 0.8})
    b.bar(names, peak_gib, color="tab:orange")
    b.set(ylabel="GiB (max over ranks)", title="Peak memory per rank")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
