"""The report of a protocol's saved runs (`experiments/async_protocol.py`): tables (markdown), the plot and a
JSON summary, with the criterion per async arm or the equivalence verdicts
(`experiments/async_stats.py`)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from experiments import async_stats

Protocol = Any  # an `experiments.async_protocol.Protocol` (not imported: that module imports this one)


def _ci(a: dict) -> str:
    return f"{a['mean']:.3f} [{a['low']:.3f}, {a['high']:.3f}]"


def report(p: Protocol, runs: dict, out_dir: str, plot_path: str) -> dict:
    """Tables (markdown), plot and JSON summary of the saved runs; the criterion per async arm."""
    curves = {arm: {s: r["curve"] for s, r in by.items()} for arm, by in runs.items() if by}
    rows = async_stats.point_table(curves)
    if p.delta:  # the equivalence test
        eq = async_stats.equivalence(curves, p.seeds, p.iterations, p.delta, p.pilot_pairs, p.max_pairs)
        verdicts = [v | {"pairs": v.get("pairs", 0)} for v in eq["verdicts"]]
    else:
        eq = None
        verdicts = [async_stats.criterion(rows, arm, p.iterations, p.min_pairs) for arm in p.arms
                    if arm != "sync" and any(arm in r["diff"] for r in rows)]
    arms = [a for a in p.arms if a in curves]
    md = ["Runs: " + ", ".join(f"{a} {len(curves[a])} seed(s) ({', '.join(map(str, sorted(curves[a])))})"
                                for a in arms) + ".", "",
          "Success per evaluation point: mean over seeds [95% bootstrap interval] (n seeds)", "",
          "| update | env steps (budget) | " + " | ".join(arms) + " |", "|---|---:|" + "---|" * len(arms)]
    for r in rows:
        md.append(f"| {r['update']} | {r['update'] * p.steps_per_update:,} | "
                  + " | ".join(f"{_ci(r['arms'][a])} ({r['arms'][a]['n']})" for a in arms) + " |")
    md += ["", "Paired difference async - sync (same seed) [95% bootstrap interval]; * = counts for the criterion "
           f"(update >= {p.iterations / 2:g})", "",
           "| update | arm | pairs | per-seed differences | mean [95% interval] |", "|---|---|---:|---|---|"]
    for r in rows:
        for arm, d in r["diff"].items():
            star = "*" if r["update"] >= p.iterations / 2 else ""
            md.append(f"| {r['update']}{star} | {arm} | {d['pairs']} | "
                      + ", ".join(f"{v:+.3f}" for v in d["values"]) + f" | {_ci(d)} |")
    md += ["", "Success against training wall time (mean over seeds, evaluation time excluded) and env steps "
           "consumed", "", "| update | arm | wall s (mean) | env steps consumed (mean) | success (mean) |",
           "|---|---|---:|---:|---:|"]
    for r in rows:
        for a in arms:
            x = r["arms"][a]
            md.append(f"| {r['update']} | {a} | {x['wall_s']:.0f} | {x['env_steps_consumed']:,.0f} | {x['mean']:.3f} |")
    md += ["", "| arm | seed | success at each eval | final | run s (with evals) | load start / end | staleness "
           "max / mean | date (UTC) |", "|---|---:|---|---:|---:|---|---|---|"]
    for a in arms:
        for s, rec in sorted(runs[a].items()):
            st = f"{rec['staleness_max']} / {rec['staleness_mean']:.2f}" if "staleness_max" in rec else "-"
            ld = lambda x: x.split()[0]  # noqa: E731
            md.append(f"| {a} | {s} | " + " / ".join(f"{c['success']:.3f}" for c in rec["curve"])
                      + f" | {rec['final_success']:.3f} | {rec['seconds']:.0f} | "
                      f"{ld(rec['loadavg']['start'])} / {ld(rec['loadavg']['end'])} | {st} | "
                      f"{rec['wall_clock_utc'][0][:16]} |")
    md += _diagnostics(runs, arms)
    if eq is not None:
        md += ["", f"## Issue 45: equivalence (margin {p.delta:g}, pre-registered)", "",
               async_stats.report_equivalence(eq)]
    else:
        md += [""] + [f"**{v['arm']}: {v['verdict']}** ({v['pairs']} pairs; {v['reason']})" for v in verdicts]
    text = "\n".join(md) + "\n"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(text)
    summary = {"protocol": dataclasses.asdict(p), "rows": rows, "verdicts": verdicts,
               "plan": eq["plan"] if eq else None,
               "runs": {a: sorted(by) for a, by in runs.items()}}
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if rows:
        plot(p, runs, rows, plot_path)
    print(text, end="", flush=True)
    for v in verdicts:
        print(f"criterion {p.name} {v['arm']}: {v['verdict']} ({v['reason']})", flush=True)
    return summary


# the async learner's per-update metrics that a run's JSON keeps (`per_update`), in the table's order
_DIAGNOSTICS = ("behaviour_kl", "behaviour_capped_frac", "behaviour_weight_max", "approx_kl", "clip_frac",
                "kl_stopped", "updates")


def _diagnostics(runs: dict, arms: list[str]) -> list[str]:
    """Markdown lines: per async arm, the median [min, max] over every update of every seed of each learner metric
    in `per_update` (descriptive, not part of any criterion); none when no run kept them (the sync loop keeps none;
    `kl_stopped` / `updates` exist only in runs saved after they were added)."""
    lines = []
    for a in arms:
        per = [u for rec in runs[a].values() for u in rec.get("per_update", [])]
        cells = []
        for k in _DIAGNOSTICS:
            v = [float(u[k]) for u in per if k in u]
            cells.append(f"{np.median(v):.4g} [{min(v):.4g}, {max(v):.4g}] ({len(v)})" if v else "-")
        if per:
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["", "Learner diagnostics per update, median [min, max] (updates), every seed (descriptive): behaviour "
            "KL and capped fraction compare the proximal policy with the rollout's; `kl_stopped` = rl.target_kl cut "
            "the update short; `updates` = minibatch steps applied", "",
            "| arm | " + " | ".join(_DIAGNOSTICS) + " |", "|---|" + "---|" * len(_DIAGNOSTICS), *lines]


_COLORS = {"sync": "tab:blue", "async-s1": "tab:red", "async-s2": "tab:orange"}


def plot(p: Protocol, runs: dict, rows: list[dict], path: str) -> None:
    """Three panels: success vs env steps (arm mean, 95% band, seeds), vs training wall time, paired differences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2), dpi=100)
    arms = [a for a in p.arms if runs.get(a)]
    x = np.asarray([r["update"] * p.steps_per_update for r in rows]) / 1e3
    for a in arms:
        c = _COLORS.get(a, "k")
        st = [r["arms"][a] for r in rows]
        ax1.fill_between(x, [s["low"] for s in st], [s["high"] for s in st], color=c, alpha=0.15)
        ax1.plot(x, [s["mean"] for s in st], color=c, lw=2, marker="o", ms=4, label=f"{a} (n={len(runs[a])})")
        for rec in runs[a].values():
            ax1.plot(x, [q["success"] for q in rec["curve"]], color=c, lw=0.6, ls=":", alpha=0.7)
            ax2.plot([q["wall_s"] / 60 for q in rec["curve"]], [q["success"] for q in rec["curve"]], color=c, lw=0.6,
                     ls=":", alpha=0.7)
        ax2.plot([s["wall_s"] / 60 for s in st], [s["mean"] for s in st], color=c, lw=2, marker="o", ms=4, label=a)
    for i, a in enumerate(a for a in arms if a != "sync"):
        pts = [(r["update"], r["diff"][a]) for r in rows if a in r["diff"]]
        u = np.asarray([q[0] for q in pts], float) + 0.25 * i
        m = np.asarray([q[1]["mean"] for q in pts])
        if p.delta:  # an equivalence protocol: the test's own interval (90%, the wider of t and bootstrap)
            ci = [async_stats.interval(q[1]["values"], 0.90) for q in pts]
            lo, hi = [c["low"] for c in ci], [c["high"] for c in ci]
        else:
            lo, hi = [q[1]["low"] for q in pts], [q[1]["high"] for q in pts]
        err = np.asarray([m - np.asarray(lo), np.asarray(hi) - m])
        ax3.errorbar(u, m, yerr=err, color=_COLORS.get(a, "k"), marker="o", capsize=4, ls="none",
                     label=f"{a} - sync ({min(q[1]['pairs'] for q in pts)} pairs)")
    ax3.axhline(0, color="k", lw=0.8)
    if p.delta:
        for y in (-p.delta, p.delta):
            ax3.axhline(y, color="k", lw=0.8, ls="--")
    ax3.axvspan(p.iterations / 2, p.iterations + 1, color="0.85", alpha=0.5,
                label=f"test: 90% interval inside +-{p.delta:g}" if p.delta else "criterion: interval reaches 0")
    ax1.set_xlabel("env steps (update budget, thousands)")
    ax2.set_xlabel("training wall time, evaluations excluded (min; shared 2-core CPU)")
    ax3.set_xlabel("update")
    ax1.set_ylabel(f"eval success ({p.eval_episodes} episodes per task, eval seed {p.eval_seed})")
    ax3.set_ylabel("paired difference, " + ("the test's 90% interval" if p.delta else "95% bootstrap interval"))
    for ax in (ax1, ax2):
        ax.set_ylim(-0.02, 1.02)
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    test = f"issue 45 equivalence test, margin {p.delta:g}" if p.delta else "issue 21 protocol"
    fig.suptitle(f"{p.name} ({p.preset}) on {p.suite}: async vs sync, paired by seed ({test})",
                 fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
