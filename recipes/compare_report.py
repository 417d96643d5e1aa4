"""report.md of `recipe compare`, rendered from metrics.json's content."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from shardlab.core.compare import MAX_STEP_SPREAD, MIN_MEASURED_STEPS
from shardlab.core.resolved import write_atomic


def write_report(path: Path, m: dict[str, Any]) -> None:
    ref = m["reference"]
    lines = [f"# {' vs '.join(m['strategies'])}", "", f"**{m['verdict']}**", "",
             f"Precision {m['precision']}; tolerance {m['tolerance']:g} relative per step (see core/compare.py "
             f"for how it was set); {'aligned' if m['aligned'] else 'not aligned (--no-align)'}.", "",
             "| strategy | tokens/s (median) | step time s, min / median / max (measured steps) | step-time spread | "
             f"peak memory per rank (GiB) | final loss | max abs loss diff vs {ref} | max rel loss diff | "
             "max abs weight diff (hf/) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in m["strategies"].items():
        peaks = ", ".join(f"{b / 2**30:.2f}" for b in s["peak_memory_bytes"])
        t = s["step_time"]
        mad = max(s["abs_loss_diff"]) if s["abs_loss_diff"] else 0.0
        mrd = max(s["rel_loss_diff"]) if s["rel_loss_diff"] else 0.0
        diffs = ("identical", "identical") if s.get("identical_to_reference") else (f"{mad:.2e}", f"{mrd:.2e}")
        lines.append(f"| {name} | {s['tokens_per_s']:,.0f} | {t['min_s']:.3f} / {t['median_s']:.3f} / {t['max_s']:.3f} "
                     f"({t['measured']}) | {s['step_time_spread']:.1%} | {peaks} | {s['final_loss']:.5f} | "
                     f"{diffs[0] if name != ref else '-'} | {diffs[1] if name != ref else '-'} | "
                     + (f"{s['max_abs_weight_diff']:.2e} |" if s['max_abs_weight_diff'] is not None else "- |"))
    lines += ["", f"Throughput {m['throughput']['note']}. Spread: (p90 - p10) / median of the step times after "
              f"warm-up; a ranking needs at least {MIN_MEASURED_STEPS} measured steps and a spread of at most "
              f"{MAX_STEP_SPREAD:.0%} for every strategy."]
    others = [n for n in m["strategies"] if n != ref]
    lines += ["", f"## Loss per step, and its difference from {ref} (absolute / relative)", "",
              "| step | " + " | ".join(m["strategies"]) + " | " + " | ".join(f"{n} - {ref}" for n in others) + " |",
              "|---" * (len(m["strategies"]) + len(others) + 1) + "|"]
    n = max(len(s["losses"]) for s in m["strategies"].values())
    for i in range(n):
        row = [f"{s['losses'][i]:.6f}" if i < len(s["losses"]) else "-" for s in m["strategies"].values()]
        for o in others:
            s = m["strategies"][o]
            row.append("-" if i >= len(s["abs_loss_diff"]) else "identical" if s["abs_loss_diff"][i] == 0 else
                       f"{s['abs_loss_diff'][i]:.1e} / {s['rel_loss_diff'][i]:.1e}")
        lines.append(f"| {i + 1} | " + " | ".join(row) + " |")
    val = m.get("validation")
    if val:
        lines += ["", "## Validation loss", "", f"**{val['verdict']}**", "",
                  "| step | " + " | ".join(val["losses"]) + " | " + " | ".join(f"{n} - {ref} (relative)" for n in others) + " |",
                  "|---" * (len(val["losses"]) + len(others) + 1) + "|"]
        for i, step in enumerate(val["steps"]):
            row = [f"{v[i]:.6f}" if i < len(v) else "-" for v in val["losses"].values()]
            row += ["-" if i >= len(val["rel_loss_diff"][o]) else "identical" if val["rel_loss_diff"][o][i] == 0 else
                    f"{val['rel_loss_diff'][o][i]:.1e}" for o in others]
            lines.append(f"| {step} | " + " | ".join(row) + " |")
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
