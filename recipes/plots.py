"""The comparison's PNG plots (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def loss_curves(losses: dict[str, list[float]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in losses.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name, marker="." if len(ys) < 60 else None)
    ax.set(xlabel="optimizer step", ylabel="loss (global mean)", title="Loss curves")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def loss_diff(abs_diff: dict[str, list[float]], reference: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in abs_diff.items():
        ax.plot(range(1, len(ys) + 1), [max(y, 1e-12) for y in ys], label=f"{name} - {reference}", marker=".")
    ax.set(xlabel="optimizer step", ylabel="|loss difference|", yscale="log", title=f"Loss difference against {reference}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def throughput_memory(names: list[str], tokens_per_s: list[float], peak_gib: list[float], path: Path) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4))
    a.bar(names, tokens_per_s, color="tab:blue")
    a.set(ylabel="tokens/s (median step)", title="Throughput")
    b.bar(names, peak_gib, color="tab:orange")
    b.set(ylabel="GiB (max over ranks)", title="Peak memory per rank")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
