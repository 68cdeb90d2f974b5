"""`make quickstart-libero`: LIBERO demos -> SFT -> async RL -> evaluation before / during / after, then a report.

    python -m vlajax.quickstart.libero                                  # = make quickstart-libero
    VLAJAX_QUICKSTART_SIZE=smoke python -m vlajax.quickstart.libero     # the wiring check the tests run

Phases (each the documented command, run as its own process; docs/libero-training.md, "Quickstart"):
  1. demos  `demos --suite libero_spatial`: the scripted expert on LIBERO's workers, initial states 25.. of
            every task (LIBERO's 25..49 are the demo states; evaluation uses 0..), a LeRobot v3.0 dataset in
            openpi's LIBERO layout rendered at the policy's size
  2. sft    `sft --preset sft-libero-small` (the smoke: `sft-libero-tiny`) with the token head (64 bins a dim)
  3. rl     `rl --suite libero_spatial --preset rl-grpo-libero-small --rl.init-from <sft>`: GRPO on LIBERO's
            sparse success, asynchronous at staleness 1, evaluated in the run on its own workers
            (`--rl.eval-every`): the SFT policy (update 0), every `eval_every` updates and the final version, each
            on the held-out initial states 0..K-1 of every task with the greedy sampler `eval --checkpoint` serves
            (argmax tokens), LIBERO's own success check; the rows in `rl/libero_rl.jsonl`
  4. report `report/README.md` (per-task success before and after RL with Wilson 95% intervals, the curve,
            links to the final policy's GIFs, the commands to go further), `curves.png`, `summary.json`
            (`vlajax.quickstart.report`'s table and figure, as `make quickstart` writes them) and the GIFs: the
            final version's evaluation records held-out initial state 0 of each task
            (`rl/videos/<suite>_task<k>_init<i>_<success|failure>.gif`, named in its row), copied into `report/`

`VLAJAX_QUICKSTART_DIR` (default `runs/quickstart-libero`; a previous run there is deleted first),
`VLAJAX_QUICKSTART_SEED` (integer >= 0, default 0: every phase's `--seed`), `VLAJAX_QUICKSTART_SIZE`
(`default` | `smoke`). An invalid value stops it with one `error:` line before anything runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time

from vlajax.quickstart import report as qr
from vlajax.quickstart.run import _run, _start

SUITE = "libero_spatial"
OUT = os.environ.get("VLAJAX_QUICKSTART_DIR", "runs/quickstart-libero")

SIZES = {
    # demos per task, SFT steps, RL updates, evaluate every N updates (and at 0 and the end), held-out inits per task
    # in each evaluation, tasks (() = every task of the suite), step limits (0 = the suite's), SFT preset, LIBERO
    # worker processes of every phase
    "default": dict(episodes=4, sft_steps=2000, rl_iterations=6, eval_every=3, eval_inits=3, tasks=(),
                    demo_max_steps=0, max_steps=0, sft_preset="sft-libero-small", workers=2),
    # one episode at a time: a second worker only adds its start to the two cores
    "smoke": dict(episodes=1, sft_steps=2, rl_iterations=1, eval_every=1, eval_inits=1, tasks=(0,),
                  demo_max_steps=12, max_steps=10, sft_preset="sft-libero-tiny", workers=1),
}


def demos_command(out: str, size: dict, seed: int) -> list[str]:
    args = ["demos", "--preset", size["sft_preset"], "--suite", SUITE, "--episodes-per-task", str(size["episodes"]),
            "--out", out, "--data.demo-workers", str(size["workers"]), "--seed", str(seed)]
    if size["tasks"]:
        args += ["--env.task", ",".join(map(str, size["tasks"]))]
    if size["demo_max_steps"]:  # the smoke: short episodes the expert does not finish, kept anyway
        args += ["--data.demo-max-steps", str(size["demo_max_steps"]), "--data.demo-keep-failures"]
    return args


def sft_command(demos: str, out: str, size: dict, seed: int) -> list[str]:
    return ["sft", "--preset", size["sft_preset"], "--data.dataset-dir", demos, "--output-dir", out,
            "--model.action-head", "tokens", "--model.num-bins", "64", "--sft.num-steps", str(size["sft_steps"]),
            "--sft.eval-every", "-1", "--logging.progress", "plain", "--seed", str(seed)]


def rl_command(init_from: str, out: str, size: dict, seed: int) -> list[str]:
    """The RL phase, evaluated in the run at update 0, every `eval_every` updates and at the end."""
    args = ["rl", "--suite", SUITE, "--preset", "rl-grpo-libero-small", "--rl.init-from", init_from,
            "--output-dir", out, "--rl.num-iterations", str(size["rl_iterations"]),
            "--rl.eval-every", str(size["eval_every"]), "--libero.episodes-per-task", str(size["eval_inits"]),
            "--libero.workers", str(size["workers"]), "--seed", str(seed)]
    if size["tasks"]:  # (none given: libero.tasks' default, every task of the suite)
        args += ["--libero.tasks", *map(str, size["tasks"])]
    if size["max_steps"]:  # the smoke: groups of 2, one group an update, short episodes
        args += ["--libero.max-steps", str(size["max_steps"]), "--rl.group-size", "2",
                 "--pipeline.require-batches", "1"]
    return args


def _interval(row: dict) -> dict:
    """An evaluation's (or one task's) `{'successes', 'episodes', ...}` -> {'success', 'successes', 'episodes', 'low',
    'high'} (`qr.wilson`: the tabletop report's interval)."""
    lo, hi = qr.wilson(row["successes"], row["episodes"])
    return {"success": row["successes"] / row["episodes"], "successes": row["successes"], "episodes": row["episodes"],
            "low": lo, "high": hi}


def read_rl(rl_dir: str) -> tuple[list[dict], list[dict]]:
    """The RL run's `libero_rl.jsonl` -> (its per-update rows, its evaluations as the report reads them:
    {'update', 'version', 'mean', 'low', 'high', 'episodes', 'successes', 'per_task': {task: {'success', 'low',
    'high', 'episodes', 'successes'}}, 'outcomes', 'videos': its GIFs relative to `rl_dir`}), each in update order."""
    rows, evals = [], []
    path = os.path.join(rl_dir, "libero_rl.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line) if line.strip() else {}
                if "eval" in rec:
                    ev = rec["eval"]
                    whole = _interval(ev)
                    evals.append({"update": ev["update"], "version": ev["version"], "mean": whole["success"],
                                  **{k: whole[k] for k in ("low", "high", "episodes", "successes")},
                                  "per_task": {t: _interval(r) for t, r in ev["tasks"].items()},
                                  "outcomes": ev["outcomes"], "videos": ev.get("videos", [])})
                elif "update" in rec:
                    rows.append(rec)
    by_update = lambda xs: sorted({x["update"]: x for x in xs}.values(), key=lambda x: x["update"])  # noqa: E731
    return by_update(rows), by_update(evals)


def gif_lines(rl_dir: str, after: dict, report: str, name) -> list[str]:
    """The final evaluation's GIFs (`after['videos']`, under `rl_dir`) copied into `report`, as the tabletop report
    keeps its episodes beside its README -> a Markdown line per GIF (`name(task)`, the initial state, the outcome,
    the image), or one line saying there are none."""
    lines = []
    for rel in after["videos"]:
        base = os.path.basename(rel)
        m = re.fullmatch(r".+_task(\d+)_init(\d+)_(success|failure)\.gif", base)
        if m is None:
            raise ValueError(f"{rel}: not a GIF name of the LIBERO evaluation (<suite>_task<k>_init<i>_<outcome>.gif)")
        shutil.copy(os.path.join(rl_dir, rel), os.path.join(report, base))
        lines.append(f"- {name(m.group(1))}, held-out initial state {m.group(2)}, {m.group(3)}: ![{base}]({base})")
    return lines or [f"- none: the evaluation at update {after['update']} recorded no GIF"]


def write_report(run_dir: str, meta: dict) -> dict:
    """report/README.md, curves.png, summary.json and the final policy's GIFs of the run in `run_dir` (its
    evaluations and updates: `<run>/rl/libero_rl.jsonl`, the GIFs its final evaluation names under `<run>/rl/`; the
    pipeline's metrics: `<run>/rl/async_metrics.jsonl`; the task instructions: `<run>/demos/demos.json`)."""
    report = os.path.join(run_dir, "report")
    os.makedirs(report, exist_ok=True)
    rows, evals = read_rl(os.path.join(run_dir, "rl"))
    if len(evals) < 2:
        raise ValueError(f"{run_dir}: the report needs the evaluations before and after RL, found "
                         f"{[e['update'] for e in evals]}")
    with open(os.path.join(run_dir, "demos", "demos.json")) as f:
        instructions = {t: d["instruction"] for t, d in json.load(f)["tasks"].items()}
    train = {r["update"]: r["train"] for r in rows}
    sft = qr.read_tb(os.path.join(run_dir, "sft", "tb"), ("train/loss",))
    _, pipe = qr.read_async_metrics(os.path.join(run_dir, "rl"))  # the pipeline's (env steps/s, idle, staleness)
    titles = qr.plot(os.path.join(report, "curves.png"), evals, train, pipe, sft)
    before, after = evals[0], evals[-1]
    summary = {"meta": meta, "before": before, "after": after, "lift": after["mean"] - before["mean"], "evals": evals,
               "train_success": {r["update"]: r["train"].get("success") for r in rows},
               "staleness_max": max((max(r["staleness"]) for r in rows if r.get("staleness")), default=None)}
    with open(os.path.join(report, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    name = lambda t: f"{t}: {instructions.get(t, '')}"  # noqa: E731
    table = qr.table(before, after, name=name)
    gifs = gif_lines(os.path.join(run_dir, "rl"), after, report, name)
    lines = [
        "# vlajax LIBERO quickstart report", "",
        f"demos -> SFT -> async RL -> eval on {SUITE} in {meta['minutes']:.1f} minutes (seed {meta['seed']}, size "
        f"{meta['size']}: {meta['episodes']} expert demos per task from initial states 25.., {meta['sft_steps']} SFT "
        f"steps of {meta['sft_preset']}, {meta['rl_iterations']} GRPO updates on LIBERO's success reward, "
        f"asynchronous at staleness 1, {meta['eval_inits']} held-out initial states (0..{meta['eval_inits'] - 1}) "
        "per task in each evaluation, LIBERO's own success check).", "",
        *table, "",
        "Success of the greedy policy (argmax tokens, what `eval --checkpoint` serves) on the same held-out episodes "
        "(task, initial state) before and after RL, evaluated in the RL run on its workers; [Wilson 95% interval] "
        "over those episodes. It does not include the seed-to-seed spread of the run "
        "(experiments/libero-learning/README.md measures RL's lift over seeds).", "",
        f"Evaluation during RL: {qr.curve(evals)}.", "",
        "`curves.png`: " + "; ".join(titles) + ".", "`summary.json`: the numbers behind them.", "",
        f"## Episodes after RL (update {after['update']})", "",
        "The final policy's episode from held-out initial state 0 of each task, recorded in its evaluation (the "
        "agentview camera as the policy saw it, one frame per decision; `rl/videos/`, copied here). The `eval` "
        "command below writes one per episode.", "",
        *gifs, "",
        "## Going further", "",
        "```bash",
        f"python -m vlajax.train eval --suite {SUITE} --checkpoint {run_dir}/rl/checkpoints --episodes-per-task 25",
        f"python -m vlajax.train rl --suite {SUITE} --preset rl-grpo-libero-small --rl.init-from "
        f"{run_dir}/sft/checkpoints --rl.num-iterations 50 --rl.eval-every 10 --libero.tasks 0 1 2 3 4 5 6 7 8 9 "
        "--libero.workers 2",
        f"python -m vlajax.train demos --suite {SUITE} --episodes-per-task 25 --data.demo-image-size 64 --out DIR",
        f"python -m vlajax.serve --checkpoint {run_dir}/rl/checkpoints --keys libero --port 8000   # openpi clients",
        "```",
    ]
    with open(os.path.join(report, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    summary["readme_head"] = "\n".join(lines[:len(table) + 4])
    return summary


def main() -> int:
    size_name, seed, logs, report = _start(OUT, SIZES, "quickstart-libero")
    size = SIZES[size_name]
    t0 = time.time()
    demos, sft, rl = (os.path.join(OUT, p) for p in ("demos", "sft", "rl"))
    phases = {"demos": _run("1/3 demos", demos_command(demos, size, seed), os.path.join(logs, "demos.log")),
              "sft": _run("2/3 sft", sft_command(demos, sft, size, seed), os.path.join(logs, "sft.log"))}
    phases["rl"] = _run("3/3 rl (evaluated at update 0, every eval_every updates and at the end)",
                        rl_command(os.path.join(sft, "checkpoints"), rl, size, seed), os.path.join(logs, "rl.log"))
    meta = {"seed": seed, "size": size_name, **{k: v for k, v in size.items() if k != "tasks"},
            "tasks": list(size["tasks"]), "minutes": round((time.time() - t0) / 60, 2),
            "phase_seconds": {k: round(v, 1) for k, v in phases.items()}, "load": os.getloadavg()}
    summary = write_report(OUT, meta)
    print(summary["readme_head"])
    print(f"[quickstart-libero] report: {os.path.join(report, 'README.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
