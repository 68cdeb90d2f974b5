"""`make quickstart-libero`: LIBERO demos -> SFT -> async RL -> evaluation before / during / after, then a report.

    python -m vlajax.quickstart.libero                                  # = make quickstart-libero
    VLAJAX_QUICKSTART_SIZE=smoke python -m vlajax.quickstart.libero     # the wiring check the tests run

Phases (each the documented command, run as its own process; docs/libero.md, "Train on LIBERO"):
  1. demos  `demos --suite libero_spatial`: the scripted expert on LIBERO's workers, initial states 25.. of
            every task (LIBERO's 25..49 are the demo states; evaluation uses 0..), a LeRobot v3.0 dataset in
            openpi's LIBERO layout rendered at the policy's size
  2. sft    `sft --preset sft-libero-small` (the smoke: `sft-libero-tiny`) with the token head (64 bins a dim)
  3. eval   `eval --suite libero_spatial --checkpoint <sft>` on held-out initial states 0..K-1 of every task:
            update 0
  4. rl     `rl --suite libero_spatial --preset rl-grpo-libero-small --rl.init-from <sft>`: GRPO on LIBERO's
            sparse success, asynchronous at staleness 1, run in segments of `eval_every` updates (each resumes
            the previous one's checkpoint), each segment's checkpoint evaluated as in 3 (during / after)
  5. report `report/README.md` (per-task success before and after RL with Wilson 95% intervals, the curve,
            the commands to go further), `curves.png`, `summary.json`, GIFs of the last evaluation's episodes

`VLAJAX_QUICKSTART_DIR` (default `runs/quickstart-libero`; a previous run there is deleted first),
`VLAJAX_QUICKSTART_SEED` (integer >= 0, default 0: every phase's `--seed`), `VLAJAX_QUICKSTART_SIZE`
(`default` | `smoke`). An invalid value stops it with one `error:` line before anything runs.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import time

from vlajax.quickstart.report import read_tb, wilson
from vlajax.quickstart.run import _check_report_deps, _run, _settings

SUITE = "libero_spatial"
OUT = os.environ.get("VLAJAX_QUICKSTART_DIR", "runs/quickstart-libero")

SIZES = {
    # demos per task, SFT steps, RL updates, evaluate every N updates (and at 0), held-out inits per task in each
    # evaluation, tasks (() = every task of the suite), step limits (0 = the suite's), SFT preset
    "default": dict(episodes=5, sft_steps=2000, rl_iterations=6, eval_every=3, eval_inits=3, tasks=(),
                    demo_max_steps=0, max_steps=0, sft_preset="sft-libero-small"),
    "smoke": dict(episodes=1, sft_steps=2, rl_iterations=1, eval_every=1, eval_inits=1, tasks=(0,),
                  demo_max_steps=12, max_steps=10, sft_preset="sft-libero-tiny"),
}
WORKERS = 2  # LIBERO worker processes of every phase (this machine's 2 cores)


def demos_command(out: str, size: dict, seed: int) -> list[str]:
    args = ["demos", "--preset", size["sft_preset"], "--suite", SUITE, "--episodes-per-task", str(size["episodes"]),
            "--out", out, "--data.demo-workers", str(WORKERS), "--seed", str(seed)]
    if size["tasks"]:
        args += ["--env.task", ",".join(map(str, size["tasks"]))]
    if size["demo_max_steps"]:  # the smoke: short episodes the expert does not finish, kept anyway
        args += ["--data.demo-max-steps", str(size["demo_max_steps"]), "--data.demo-keep-failures"]
    return args


def sft_command(demos: str, out: str, size: dict, seed: int) -> list[str]:
    return ["sft", "--preset", size["sft_preset"], "--data.dataset-dir", demos, "--output-dir", out,
            "--model.action-head", "tokens", "--model.num-bins", "64", "--sft.num-steps", str(size["sft_steps"]),
            "--sft.eval-every", "-1", "--logging.progress", "plain", "--seed", str(seed)]


def eval_command(checkpoint: str, out: str, size: dict) -> list[str]:
    args = ["eval", "--suite", SUITE, "--checkpoint", checkpoint, "--episodes-per-task", str(size["eval_inits"]),
            "--workers", str(WORKERS), "--out", out]
    if size["tasks"]:
        args += ["--tasks", *map(str, size["tasks"])]
    if size["max_steps"]:
        args += ["--max-steps", str(size["max_steps"])]
    return args


def rl_command(init_from: str, out: str, size: dict, updates: int, seed: int) -> list[str]:
    tasks = size["tasks"] or tuple(range(10))
    args = ["rl", "--suite", SUITE, "--preset", "rl-grpo-libero-small", "--rl.init-from", init_from,
            "--output-dir", out, "--rl.num-iterations", str(updates), "--libero.tasks", *map(str, tasks),
            "--libero.workers", str(WORKERS), "--seed", str(seed)]
    if size["max_steps"]:  # the smoke: groups of 2, one group an update, short episodes
        args += ["--libero.max-steps", str(size["max_steps"]), "--rl.group-size", "2",
                 "--pipeline.require-batches", "1"]
    return args


def read_eval(path: str) -> dict:
    """A LIBERO eval.json -> {'mean', 'low', 'high', 'episodes', 'per_task': {task: {'success', 'low', 'high',
    'episodes', 'instruction'}}} (Wilson 95% intervals over the episodes)."""
    with open(path) as f:
        ev = json.load(f)
    per = {}
    for row in ev["tasks"]:
        lo, hi = wilson(row["successes"], row["episodes"])
        per[str(row["task"])] = {"success": row["success_rate"], "low": lo, "high": hi, "episodes": row["episodes"],
                                 "successes": row["successes"], "instruction": row["instruction"]}
    s = ev["suites"][0]
    lo, hi = wilson(s["successes"], s["episodes"])
    return {"mean": s["success_rate"], "low": lo, "high": hi, "episodes": s["episodes"], "successes": s["successes"],
            "per_task": per}


def read_rl(rl_dir: str) -> list[dict]:
    """The RL run's per-update rows (`libero_rl.jsonl`), in update order."""
    path = os.path.join(rl_dir, "libero_rl.jsonl")
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return sorted({r["update"]: r for r in rows}.values(), key=lambda r: r["update"])


def plot(path: str, evals: list[dict], rl: list[dict], sft: dict) -> list[str]:
    """4 panels: evaluation success over updates (95% intervals), per-task before / after, the sampled groups'
    success per update, the SFT loss. -> the panel titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    titles = ["evaluation success (greedy policy, held-out inits)", "success per task, 95% intervals",
              "training success (sampled groups)", "SFT loss"]
    a = axes[0]
    u = [e["update"] for e in evals]
    a.fill_between(u, [e["low"] for e in evals], [e["high"] for e in evals], color="tab:blue", alpha=0.2)
    a.plot(u, [e["mean"] for e in evals], "o-", color="tab:blue", lw=2, label=f"mean, {evals[0]['episodes']} ep.")
    a.set_ylim(-0.03, 1.03)
    a.set_xlabel("RL update")
    a.legend(fontsize=7)
    a = axes[1]
    first, last = evals[0], evals[-1]
    tasks = list(first["per_task"])
    for i, (ev, name, c) in enumerate(((first, "after SFT", "tab:gray"), (last, "after RL", "tab:green"))):
        vals = [ev["per_task"][t] for t in tasks]
        x = [j + (i - 0.5) * 0.38 for j in range(len(tasks))]
        a.bar(x, [v["success"] for v in vals], width=0.38, color=c, label=f"{name} (update {ev['update']})",
              yerr=[[v["success"] - v["low"] for v in vals], [v["high"] - v["success"] for v in vals]], capsize=3)
    a.set_xticks(range(len(tasks)), tasks)
    a.set_xlabel("task")
    a.set_ylim(0, 1.05)
    a.legend(fontsize=7)
    a = axes[2]
    xs = [r["update"] for r in rl if "success" in r.get("train", {})]
    a.plot(xs, [r["train"]["success"] for r in rl if "success" in r.get("train", {})], ".-", color="tab:green")
    a.set_ylim(-0.03, 1.03)
    a.set_xlabel("RL update")
    a = axes[3]
    if "train/loss" in sft:
        a.plot(*sft["train/loss"], color="tab:purple")
    a.set_xlabel("SFT step")
    for a, t in zip(axes, titles, strict=True):
        a.set_title(t, fontsize=9)
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return titles


def _ci(d: dict) -> str:
    return f"{d['success' if 'success' in d else 'mean'] * 100:.0f}% [{d['low'] * 100:.0f}, {d['high'] * 100:.0f}]"


def write_report(run_dir: str, meta: dict) -> dict:
    """report/README.md, curves.png, summary.json of the run in `run_dir` (evaluations in `<run>/eval/update-<u>`)."""
    report = os.path.join(run_dir, "report")
    os.makedirs(report, exist_ok=True)
    evals = []
    for path in glob.glob(os.path.join(run_dir, "eval", "update-*", "eval.json")):
        u = int(os.path.basename(os.path.dirname(path)).split("-")[1])
        evals.append({"update": u, **read_eval(path)})
    evals.sort(key=lambda e: e["update"])
    if len(evals) < 2:
        raise ValueError(f"{run_dir}: the report needs the evaluations before and after RL, found "
                         f"{[e['update'] for e in evals]}")
    rl = read_rl(os.path.join(run_dir, "rl"))
    sft = read_tb(os.path.join(run_dir, "sft", "tb"), ("train/loss",))
    titles = plot(os.path.join(report, "curves.png"), evals, rl, sft)
    before, after = evals[0], evals[-1]
    summary = {"meta": meta, "before": before, "after": after, "lift": after["mean"] - before["mean"], "evals": evals,
               "train_success": {r["update"]: r["train"].get("success") for r in rl},
               "staleness_max": max((max(r["staleness"]) for r in rl if r.get("staleness")), default=None)}
    with open(os.path.join(report, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    b, a = before["per_task"], after["per_task"]
    rows = [f"| {t}: {b[t]['instruction']} | {_ci(b[t])} | {_ci(a[t])} | "
            f"{(a[t]['success'] - b[t]['success']) * 100:+.0f} |" for t in b]
    curve = " -> ".join(f"{e['mean'] * 100:.1f}% (update {e['update']})" for e in evals)
    lines = [
        "# vlajax LIBERO quickstart report", "",
        f"demos -> SFT -> async RL -> eval on {SUITE} in {meta['minutes']:.1f} minutes (seed {meta['seed']}, size "
        f"{meta['size']}: {meta['episodes']} expert demos per task from initial states 25.., {meta['sft_steps']} SFT "
        f"steps of {meta['sft_preset']}, {meta['rl_iterations']} GRPO updates on LIBERO's success reward, "
        f"asynchronous at staleness 1, {meta['eval_inits']} held-out initial states (0..{meta['eval_inits'] - 1}) "
        "per task in each evaluation, LIBERO's own success check).", "",
        f"| task | after SFT (update {before['update']}) | after RL (update {after['update']}) | change (points) |",
        "|---|---:|---:|---:|", *rows,
        f"| **mean** | **{_ci(before)}** | **{_ci(after)}** | **{summary['lift'] * 100:+.1f}** |", "",
        "Success of the greedy policy on the same held-out episodes (task, initial state) before and after RL; "
        "[Wilson 95% interval] over those episodes. It does not include the seed-to-seed spread of the run "
        "(experiments/libero-learning/README.md measures RL's lift over seeds).", "",
        f"Evaluation during RL: {curve}.", "",
        "`curves.png`: " + "; ".join(titles) + ".", "`summary.json`: the numbers behind them.",
        "The GIFs: the last evaluation's episodes (the agentview images the policy read).", "",
        "## Going further", "",
        "```bash",
        f"python -m vlajax.train eval --suite {SUITE} --checkpoint {run_dir}/rl/checkpoints --episodes-per-task 25",
        f"python -m vlajax.train rl --suite {SUITE} --preset rl-grpo-libero-small --rl.init-from "
        f"{run_dir}/sft/checkpoints --rl.num-iterations 50 --libero.tasks 0 1 2 3 4 5 6 7 8 9 --libero.workers 2",
        f"python -m vlajax.train demos --suite {SUITE} --episodes-per-task 25 --data.demo-image-size 64 --out DIR",
        f"python -m vlajax.serve --checkpoint {run_dir}/rl/checkpoints --keys libero --port 8000   # openpi clients",
        "```",
    ]
    with open(os.path.join(report, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    summary["readme_head"] = "\n".join(lines[:len(rows) + 7])
    return summary


def main() -> int:
    size_name, seed = _settings(os.environ)
    size = SIZES[size_name]
    _check_report_deps()
    if os.path.isdir(OUT):
        print(f"[quickstart-libero] removing the previous run in {OUT}", flush=True)
        shutil.rmtree(OUT)
    logs, report = os.path.join(OUT, "logs"), os.path.join(OUT, "report")
    os.makedirs(logs)
    os.makedirs(report)
    t0 = time.time()
    demos, sft, rl = (os.path.join(OUT, p) for p in ("demos", "sft", "rl"))
    sft_ckpt, rl_ckpt = os.path.join(sft, "checkpoints"), os.path.join(rl, "checkpoints")
    ev = lambda u: os.path.join(OUT, "eval", f"update-{u}")  # noqa: E731
    _run("1/4 demos", demos_command(demos, size, seed), os.path.join(logs, "demos.log"))
    _run("2/4 sft", sft_command(demos, sft, size, seed), os.path.join(logs, "sft.log"))
    _run("3/4 eval (update 0)", eval_command(sft_ckpt, ev(0), size), os.path.join(logs, "eval-0.log"))
    total, every = size["rl_iterations"], size["eval_every"]
    for u in [*range(every, total, every), total]:  # segments; each resumes the previous checkpoint
        _run(f"4/4 rl (to update {u})", rl_command(sft_ckpt, rl, size, u, seed), os.path.join(logs, f"rl-{u}.log"))
        _run(f"4/4 eval (update {u})", eval_command(rl_ckpt, ev(u), size), os.path.join(logs, f"eval-{u}.log"))
    for gif in glob.glob(os.path.join(ev(total), "videos", "*.gif")):
        shutil.copy(gif, report)
    meta = {"seed": seed, "size": size_name, **{k: v for k, v in size.items() if k != "tasks"},
            "tasks": list(size["tasks"]), "minutes": round((time.time() - t0) / 60, 2), "load": os.getloadavg()}
    summary = write_report(OUT, meta)
    print(summary["readme_head"])
    print(f"[quickstart-libero] report: {os.path.join(report, 'README.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
