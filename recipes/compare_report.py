"""report.md of `recipe compare`, rendered from metrics.json's content."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from shardlab.core.resolved import write_atomic


def write_report(path: Path, m: dict[str, Any]) -> None:
    ref = m["reference"]
    lines = [f"# {' vs '.join(m['strategies'])}", "", f"**{m['verdict']}**", "",
             f"Precision {m['precision']}; tolerance {m['tolerance']:g} relative per step (see core/compare.py "
             f"for how it was set); {'aligned' if m['aligned'] else 'not aligned (--no-align)'}.", "",
             "| strategy | tokens/s (median) | step-time spread | peak memory per rank (GiB) | final loss | "
             f"max abs loss diff vs {ref} | max rel loss diff | max abs weight diff (hf/) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in m["strategies"].items():
        peaks = ", ".join(f"{b / 2**30:.2f}" for b in s["peak_memory_bytes"])
        mad = max(s["abs_loss_diff"]) if s["abs_loss_diff"] else 0.0
        mrd = max(s["rel_loss_diff"]) if s["rel_loss_diff"] else 0.0
        lines.append(f"| {name} | {s['tokens_per_s']:,.0f} | {s['step_time_spread']:.1%} | {peaks} | "
                     f"{s['final_loss']:.5f} | {mad:.2e} | {mrd:.2e} | {s['max_abs_weight_diff']:.2e} |")
    others = [n for n in m["strategies"] if n != ref]
    lines += ["", f"## Loss per step, and its difference from {ref} (absolute / relative)", "",
              "| step | " + " | ".join(m["strategies"]) + " | " + " | ".join(f"{n} - {ref}" for n in others) + " |",
              "|---" * (len(m["strategies"]) + len(others) + 1) + "|"]
    n = max(len(s["losses"]) for s in m["strategies"].values())
    for i in range(n):
        row = [f"{s['losses'][i]:.6f}" if i < len(s["losses"]) else "-" for s in m["strategies"].values()]
        for o in others:
            s = m["strategies"][o]
            row.append(f"{s['abs_loss_diff'][i]:.1e} / {s['rel_loss_diff'][i]:.1e}" if i < len(s["abs_loss_diff"]) else "-")
        lines.append(f"| {i + 1} | " + " | ".join(row) + " |")
    lines += ["", "## Precision audit", "", "| strategy | compute | master weights | gradient reduction | optimizer states |",
              "|---|---|---|---|---|"]
    for name, a in m["audit"].items():
        lines.append(f"| {name} | {a['compute']} | {a['master']} | {a['grad_reduce']} | {a['optimizer_states']} |")
    lines += ["", "Alignment: " + "; ".join(m["alignment_notes"]) + ".",
              "", "Mismatches before alignment: " + ("; ".join(m["mismatches_before_alignment"]) or "none") + ".",
              "", "Likely causes of divergence still present: " + ("; ".join(m["suspects"]) or "none") + ".",
              "", "Plots: `loss_curves.png`, `loss_diff.png`, `throughput_memory.png`. Data: `metrics.json`.",
              "", "## Command", "", "```", m["command"], "```", ""]
    write_atomic(path, "\n".join(lines))
