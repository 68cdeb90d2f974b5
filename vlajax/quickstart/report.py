"""The quickstart's report folder: what the run did, readable at a glance.

    python -m vlajax.quickstart.report runs/quickstart      # (re)writes runs/quickstart/report/

Reads the phases' outputs (no training state is unpickled; everything is JSON or TensorBoard events):
  <run>/rl/eval/iteration-<u>/eval.json   closed-loop evaluations (greedy policy, fixed episodes)
  <run>/rl/async_metrics.jsonl            per update: train metrics ({"update", "train"}) and the
                                          pipeline's (env steps/s, idle ratios, staleness)
  <run>/sft/tb                            SFT's TensorBoard scalars (train/loss)
  <run>/report/meta.json                  what the quickstart ran (seed, sizes, minutes), its own writing

Writes into <run>/report/:
  curves.png    8 panels: evaluation success over updates with 95% intervals; per-task success after SFT
                and after RL; sampled (training) success; SFT loss; RL losses and KLs; env steps/s; the
                trainer's and rollouter's idle ratios; staleness
  summary.json  the numbers behind them (what `experiments/quickstart_seeds.py` collects per seed)
  README.md     the before/after table with per-task intervals, the evaluation curve, what the intervals
                mean, the commands to go further

Intervals: Wilson score 95% intervals over the evaluation's episodes (20 per task, 80 in all): how much
another draw of evaluation episodes could move the figure for this one trained policy. They do not
include the spread between seeds (`results/runs/quickstart-seeds-c/summary.md`: 5 fresh seeds lifted +18.8 to
+43.8).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import sys

from vlajax.shared import stats

Z95 = 1.959964


def wilson(k: float, n: int) -> tuple[float, float]:
    """(low, high): the Wilson score interval of k successes of n at z = Z95 (`vlajax.shared.stats.wilson`)."""
    return stats.wilson(k, n, Z95)


def read_evals(rl_dir: str) -> list[dict]:
    """Every evaluation of the RL run, by update: {'update', 'mean', 'low', 'high', 'episodes', 'per_task':
    {task: {'success', 'low', 'high', 'episodes'}}} (intervals: `wilson` over the episodes)."""
    out = []
    for path in glob.glob(os.path.join(rl_dir, "eval", "iteration-*", "eval.json")):
        m = re.search(r"iteration-(\d+)", path)
        with open(path) as f:
            ev = json.load(f)
        n = int(ev.get("episodes_per_task", 0))
        per = {t: {"success": s, "episodes": n, **dict(zip(("low", "high"), wilson(round(s * n), n), strict=True))}
               for t, s in ev["per_task"].items()}
        total = n * len(per)
        lo, hi = wilson(round(ev["mean_success"] * total), total)
        out.append({"update": int(m.group(1)), "mean": ev["mean_success"], "low": lo, "high": hi, "episodes": total,
                    "per_task": per})
    return sorted(out, key=lambda e: e["update"])


def read_async_metrics(rl_dir: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """({update: train metrics}, {update: pipeline metrics}) from `async_metrics.jsonl` ({}, {} without it)."""
    train, pipe = {}, {}
    path = os.path.join(rl_dir, "async_metrics.jsonl")
    if not os.path.exists(path):
        return train, pipe
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            if "train" in rec:
                train[int(rec["update"])] = rec["train"]
            elif "update" in rec:
                pipe[int(rec["update"])] = rec
    return train, pipe


def read_tb(tb_dir: str, tags: tuple[str, ...]) -> dict[str, tuple[list[int], list[float]]]:
    """{tag: (steps, values)} of the TensorBoard scalars `tags` under `tb_dir` (those that exist)."""
    if not os.path.isdir(tb_dir):
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    have = set(acc.Tags()["scalars"])
    return {t: ([e.step for e in acc.Scalars(t)], [e.value for e in acc.Scalars(t)]) for t in tags if t in have}


def _series(by_update: dict[int, dict], key: str) -> tuple[list[int], list[float]]:
    us = [u for u in sorted(by_update) if key in by_update[u]]
    return us, [float(by_update[u][key]) for u in us]


def plot(path: str, evals: list[dict], train: dict, pipe: dict, sft: dict) -> list[str]:
    """The 8-panel figure; -> the panel titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5))
    ax = axes.flat
    titles = []

    from matplotlib.ticker import MaxNLocator

    def panel(a, title, xlabel="RL update"):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.set_title(title, fontsize=9)
        a.set_xlabel(xlabel, fontsize=8)
        a.tick_params(labelsize=7)
        a.grid(alpha=0.3)
        titles.append(title)

    def empty(a, what):
        a.text(0.5, 0.5, f"{what}\nnot logged", ha="center", va="center", fontsize=9, transform=a.transAxes)

    # 1. evaluation success over updates, with its interval, per task faintly
    a = next(ax)
    if evals:
        u = [e["update"] for e in evals]
        a.fill_between(u, [e["low"] for e in evals], [e["high"] for e in evals], color="tab:blue", alpha=0.2,
                       label="95% interval (episodes)")
        a.plot(u, [e["mean"] for e in evals], "o-", color="tab:blue", lw=2, label=f"mean, {evals[0]['episodes']} ep.")
        for t in evals[0]["per_task"]:
            a.plot(u, [e["per_task"].get(t, {}).get("success", math.nan) for e in evals], lw=0.8, ls=":",
                   label=t.split("/")[-1])
        a.legend(fontsize=6, loc="best")
        a.set_ylim(-0.03, 1.03)
    else:
        empty(a, "evaluations")
    panel(a, "evaluation success (greedy policy)")
    # 2. per task, after SFT vs after RL
    a = next(ax)
    if len(evals) >= 2:
        first, last = evals[0], evals[-1]
        tasks = list(first["per_task"])
        for i, (ev, name, c) in enumerate(((first, "after SFT", "tab:gray"), (last, "after RL", "tab:green"))):
            vals = [ev["per_task"][t] for t in tasks]
            x = [j + (i - 0.5) * 0.38 for j in range(len(tasks))]
            a.bar(x, [v["success"] for v in vals], width=0.38, color=c, label=f"{name} (update {ev['update']})",
                  yerr=[[v["success"] - v["low"] for v in vals], [v["high"] - v["success"] for v in vals]],
                  capsize=3, error_kw={"lw": 0.8})
        a.set_xticks(range(len(tasks)), [t.split("/")[-1] for t in tasks], fontsize=7)
        a.set_ylim(0, 1.05)
        a.legend(fontsize=7)
    else:
        empty(a, "two evaluations")
    panel(a, "success per task, 95% intervals", xlabel="task")
    # 3. training success (sampled rollouts)
    a = next(ax)
    x, y = _series(train, "success")
    a.plot(x, y, ".-", color="tab:green") if x else empty(a, "train/success")
    a.set_ylim(-0.03, 1.03)
    panel(a, "training success (sampled rollouts)")
    # 4. SFT loss
    a = next(ax)
    if "train/loss" in sft:
        steps, loss = sft["train/loss"]
        a.plot(steps, loss, color="tab:purple")
        if min(loss) > 0 and max(loss) / min(loss) > 20:
            a.set_yscale("log")
    else:
        empty(a, "SFT train/loss")
    panel(a, "SFT loss", xlabel="SFT step")
    # 5. RL loss terms and KLs
    a = next(ax)
    drawn = False
    for key, c in (("loss", "k"), ("policy_loss", "tab:red"), ("kl_ref", "tab:orange"), ("approx_kl", "tab:cyan")):
        x, y = _series(train, key)
        if x:
            a.plot(x, y, ".-", color=c, lw=1, label=key)
            drawn = True
    a.legend(fontsize=7) if drawn else empty(a, "RL losses")
    panel(a, "RL loss, policy loss, KL to SFT, approx KL")
    # 6. env steps/s
    a = next(ax)
    x, y = _series(pipe, "env/steps_per_s")
    a.plot(x, y, ".-", color="tab:brown") if x else empty(a, "env/steps_per_s")
    panel(a, "env steps/s (per update window)")
    # 7. idle ratios
    a = next(ax)
    drawn = False
    for key, c in (("trainer/idle_ratio", "tab:red"), ("rollouter/idle_ratio", "tab:blue")):
        x, y = _series(pipe, key)
        if x:
            a.plot(x, y, ".-", color=c, label=key.split("/")[0])
            drawn = True
    if drawn:
        a.legend(fontsize=7)
        a.set_ylim(-0.03, 1.03)
    else:
        empty(a, "idle ratios")
    panel(a, "idle ratio (fraction of the update window waiting)")
    # 8. staleness
    a = next(ax)
    drawn = False
    for key, c, ls in (("staleness/mean", "tab:purple", "-"), ("staleness/max", "k", ":")):
        x, y = _series(pipe, key)
        if x:
            a.plot(x, y, marker=".", ls=ls, color=c, label=key.split("/")[1])
            drawn = True
    a.legend(fontsize=7) if drawn else empty(a, "staleness")
    panel(a, "staleness of the samples trained on (policy versions)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return titles


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _ci(d: dict) -> str:
    """A task's 'success' as '40% [22, 61]', the mean as '41.2% [31, 52]' (per cent, 95% interval)."""
    v = f"{d['success'] * 100:.0f}%" if "success" in d else _pct(d["mean"])
    return f"{v} [{d['low'] * 100:.0f}, {d['high'] * 100:.0f}]"


def table(before: dict, after: dict, name=str) -> list[str]:
    """The before/after Markdown table: a row per task of `before['per_task']` (first column `name(task)`), the
    success with its interval after SFT and after RL, the change in points; then the mean's row."""
    b, a = before["per_task"], after["per_task"]
    rows = [f"| {name(t)} | {_ci(b[t])} | {_ci(a[t])} | {(a[t]['success'] - b[t]['success']) * 100:+.0f} |" for t in b]
    return [f"| task | after SFT (update {before['update']}) | after RL (update {after['update']}) | change (points) |",
            "|---|---:|---:|---:|", *rows,
            f"| **mean** | **{_ci(before)}** | **{_ci(after)}** | **{(after['mean'] - before['mean']) * 100:+.1f}** |"]


def curve(evals: list[dict]) -> str:
    """'41.2% (update 0) -> 55.0% (update 5) -> ...': the mean success of every evaluation."""
    return " -> ".join(f"{_pct(e['mean'])} (update {e['update']})" for e in evals)


def write(run_dir: str, meta: dict | None = None) -> dict:
    """Write `report/curves.png`, `summary.json` and `README.md` for the quickstart run in `run_dir`;
    `meta` (seed, sizes, minutes; saved as report/meta.json, read back when None). -> the summary."""
    report = os.path.join(run_dir, "report")
    os.makedirs(report, exist_ok=True)
    meta_path = os.path.join(report, "meta.json")
    if meta is None:
        if not os.path.exists(meta_path):
            raise ValueError(f"{meta_path} not found: {run_dir} is not a quickstart output folder "
                             "(`python -m vlajax.quickstart` writes it)")
        with open(meta_path) as f:
            meta = json.load(f)
    else:
        with open(meta_path, "w") as f:
            json.dump(meta, f, indent=1)
    rl_dir = os.path.join(run_dir, "rl")
    evals = read_evals(rl_dir)
    if len(evals) < 2:
        raise ValueError(f"{rl_dir}: the report needs the evaluations before and after RL, found "
                         f"{[e['update'] for e in evals]}")
    train, pipe = read_async_metrics(rl_dir)
    sft = read_tb(os.path.join(run_dir, "sft", "tb"), ("train/loss",))
    titles = plot(os.path.join(report, "curves.png"), evals, train, pipe, sft)
    before, after = evals[0], evals[-1]
    x, succ = _series(train, "success")
    summary = {"meta": meta, "before": before, "after": after, "lift": after["mean"] - before["mean"],
               "evals": evals, "train_success": dict(zip(x, succ, strict=True)),
               "env_steps_per_s_median": _median(_series(pipe, "env/steps_per_s")[1][1:]),
               "staleness_max": max(_series(pipe, "staleness/max")[1], default=None)}
    with open(os.path.join(report, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    rows = table(before, after)
    lines = [
        "# vlajax quickstart report", "",
        f"demos -> SFT -> RL -> eval on the goal suite in {meta.get('minutes', float('nan')):.1f} minutes "
        f"(seed {meta.get('seed')}, {meta.get('episodes')} demos per task, {meta.get('sft_steps')} SFT steps, "
        f"{meta.get('rl_iterations')} GRPO updates trained asynchronously (staleness 1: rollout runs one policy "
        "version ahead) from rollouts sampled at temperature 0.5 with a KL penalty to the SFT policy, "
        f"{meta.get('eval_episodes')} evaluation episodes per task).", "",
        *rows, "",
        "Success of the greedy policy on the same evaluation episodes before and after RL; [95% interval] over "
        "those episodes (Wilson): another draw of episodes could move each figure that much. It does not "
        "include the seed-to-seed spread of the whole run, which is larger (docs/results.md, \"Quickstart\").", "",
        f"Evaluation during RL: {curve(evals)}.", "",
        "`curves.png`: " + "; ".join(titles) + ".",
        "`summary.json`: the numbers behind the table and the figure.",
        "Episodes after RL: the GIFs in this folder (agentview camera).", "",
        "## Going further", "",
        "```bash",
        f"tensorboard --logdir {run_dir}",
        "python -m vlajax.train sft --preset sft-small --help      # every knob",
        "python -m vlajax.train rl --preset rl-grpo-tokens --rl.init-from <sft>/checkpoints",
        "python -m vlajax.train rl --preset rl-ppo-flow --pipeline.enabled ...   # asynchronous RL",
        "python -m vlajax.bench async --regimes mjx --repeats 1 --json async.json   # sync vs async throughput",
        "```",
    ]
    with open(os.path.join(report, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    summary["readme_head"] = "\n".join(lines[:len(rows) + 6])
    return summary


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: python -m vlajax.quickstart.report RUN_DIR   (a quickstart output folder)", file=sys.stderr)
        sys.exit(2)
    try:
        print(write(sys.argv[1])["readme_head"])
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
