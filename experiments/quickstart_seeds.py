"""The quickstart's lift over fresh seeds, with a synchronous pair for the same recipe.

    .venv/bin/python experiments/quickstart_seeds.py run --dry-run              # the commands, nothing runs
    nice -n 19 .venv/bin/python experiments/quickstart_seeds.py run             # seeds 200-204: hours on 2 cores
    .venv/bin/python experiments/quickstart_seeds.py report                     # the table, from the JSONs only
    .venv/bin/python experiments/quickstart_seeds.py run --size smoke --seeds 0 --out /tmp/qs --work /tmp/qs/work

Per seed k, in order (a seed's JSON that exists is kept; `--replace` runs it again):

1. `async`: the quickstart as a user runs it, `VLAJAX_QUICKSTART_SEED=k VLAJAX_QUICKSTART_DIR=<work>/seed-k
   python -m vlajax.quickstart` (demos, SFT, then RL through the pipeline at staleness 1) ->
   `<out>/async-seed{k}.json`: its report's `summary.json` (every evaluation with per-task Wilson intervals,
   the lift) plus the command, minutes, load, git commit.
2. `sync`: the same RL phase without the pipeline (`vlajax.quickstart.run.rl_command(..., sync=True)`: the same
   preset, flags, seed, iterations and evaluations) from that run's SFT checkpoint, into `<work>/seed-k/rl-sync`
   -> `<out>/sync-seed{k}.json`. Both arms start from one checkpoint and are scored on the same evaluation
   episodes (`rl.eval_seed` -1: the run's seed, k in both), so `async` k and `sync` k are a pair; their update-0
   evaluations must be equal (checked by `report`).

`report` -> `<out>/summary.json` and `summary.md`: per arm the lift per seed (mean success after RL - after SFT)
with the mean and its 95% interval (the wider of Student's t and the percentile bootstrap,
`experiments.async_stats.interval`), and the paired difference async - sync of the success after RL.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Literal

import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.outputs import git_state, loadavg, write_results  # noqa: E402
from vlajax.quickstart import report as quickstart_report
from vlajax.quickstart import run as quickstart  # noqa: E402
from vlajax.shared import cli  # noqa: E402

SEEDS = (200, 201, 202, 203, 204)  # fresh: never used by a quickstart or a protocol before


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    mode: tyro.conf.Positional[Literal["run", "report"]]
    seeds: tuple[int, ...] = SEEDS  # quickstart seeds (VLAJAX_QUICKSTART_SEED), run in this order
    arms: tuple[Literal["async", "sync"], ...] = ("async", "sync")  # sync needs the seed's async run (its SFT)
    size: Literal["default", "smoke"] = "default"  # smoke: a wiring check (its --out must be outside docs/)
    out: str = "results/runs/quickstart-seeds-c"  # the per-seed JSONs and the summary (MJX-rollout set: ...-seeds45)
    work: str = "runs/quickstart-seeds-c"  # the runs themselves (demos, checkpoints, logs; not in git)
    replace: bool = False  # run a seed again even if its JSON exists
    dry_run: bool = False  # print the commands only


def commands(a: Args, seed: int) -> dict[str, tuple[dict, list[str]]]:
    """{arm: (extra environment, argv)} of one seed."""
    run_dir = os.path.join(a.work, f"seed-{seed}")
    env = {"VLAJAX_QUICKSTART_SEED": str(seed), "VLAJAX_QUICKSTART_DIR": run_dir, "VLAJAX_QUICKSTART_SIZE": a.size}
    sync = quickstart.rl_command(os.path.join(run_dir, "sft", "checkpoints"), os.path.join(run_dir, "rl-sync"),
                                 a.size, seed, sync=True)
    return {"async": (env, [sys.executable, "-m", "vlajax.quickstart.run"]),
            "sync": ({}, [sys.executable, "-m", "vlajax.train", *sync])}


def _record(arm: str, seed: int, env: dict, argv: list[str], t0: float, load0: str, wall0: str, git: dict,
            a: Args) -> dict:
    run_dir = os.path.join(a.work, f"seed-{seed}")
    if arm == "async":
        with open(os.path.join(run_dir, "report", "summary.json")) as f:
            s = json.load(f)
        body = {"before": s["before"], "after": s["after"], "lift": s["lift"], "evals": s["evals"],
                "train_success": s["train_success"], "quickstart_meta": s["meta"]}
    else:
        evals = quickstart_report.read_evals(os.path.join(run_dir, "rl-sync"))
        body = {"before": evals[0], "after": evals[-1], "lift": evals[-1]["mean"] - evals[0]["mean"], "evals": evals}
    policy_file = os.path.join(run_dir, "rl" if arm == "async" else "rl-sync", "checkpoints", "policy.json")
    with open(policy_file) as f:  # the simulator the RL rollouts stepped ('auto' resolved; older runs: absent)
        body["rollout_physics"] = json.load(f).get("rollout_physics")
    return {"arm": arm, "seed": seed, "size": a.size, **body,
            "command": " ".join([f"{k}={v}" for k, v in env.items()] + argv[1:]),
            "minutes": round((time.time() - t0) / 60, 2), "loadavg": {"start": load0, "end": loadavg()},
            "wall_clock_utc": [wall0, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())], "git": git}


def run(a: Args) -> None:
    os.makedirs(a.out, exist_ok=True)
    for seed in a.seeds:
        for arm, (env, argv) in commands(a, seed).items():
            if arm not in a.arms:
                continue
            path = os.path.join(a.out, f"{arm}-seed{seed}.json")
            line = " ".join([f"{k}={v}" for k, v in env.items()] + argv)
            if a.dry_run:
                print(line)
                continue
            if os.path.exists(path) and not a.replace:
                print(f"== {arm} seed {seed}: kept {path}", flush=True)
                continue
            if arm == "sync":  # an earlier sync run's checkpoints would be resumed (0 updates), its evals re-read
                shutil.rmtree(os.path.join(a.work, f"seed-{seed}", "rl-sync"), ignore_errors=True)
            print(f"== {arm} seed {seed} (load {loadavg()}, {time.strftime('%H:%M:%S')}): {line}", flush=True)
            t0, load0, wall0 = time.time(), loadavg(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            git = git_state("vlajax")  # the checkout the run starts from (HEAD may move while it runs)
            proc = subprocess.run(argv, env=dict(os.environ, **env))
            if proc.returncode:
                raise SystemExit(f"{arm} seed {seed} failed (exit {proc.returncode}): {line}")
            rec = _record(arm, seed, env, argv, t0, load0, wall0, git, a)
            with open(path + ".tmp", "w") as f:
                json.dump(rec, f, indent=1)
            os.replace(path + ".tmp", path)
            print(f"== {arm} seed {seed}: {rec['before']['mean']:.3f} -> {rec['after']['mean']:.3f} "
                  f"({rec['lift'] * 100:+.1f} points) in {rec['minutes']:.1f} min -> {path}", flush=True)


def summarize(out: str) -> dict:
    """The lifts and paired differences of the per-seed JSONs in `out` (see the module docstring)."""
    from experiments.async_stats import interval

    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(glob.glob(os.path.join(out, "*-seed*.json"))):
        with open(path) as f:
            rec = json.load(f)
        runs.setdefault(rec["arm"], {})[int(rec["seed"])] = rec
    if not runs:
        raise ValueError(f"no <arm>-seed<k>.json in {out}")
    result: dict = {"arms": {}, "paired": None}
    for arm, by in runs.items():
        seeds = sorted(by)
        lifts = [by[s]["lift"] for s in seeds]
        result["arms"][arm] = {"seeds": seeds, "lifts": lifts, "before": [by[s]["before"]["mean"] for s in seeds],
                               "after": [by[s]["after"]["mean"] for s in seeds], "lift": interval(lifts, 0.95),
                               "minutes": [by[s]["minutes"] for s in seeds]}
    both = sorted(set(runs.get("async", {})) & set(runs.get("sync", {})))
    if both:
        before = {arm: {s: runs[arm][s]["before"]["mean"] for s in both} for arm in ("async", "sync")}
        unequal = [s for s in both if abs(before["async"][s] - before["sync"][s]) > 1e-9]
        if unequal:
            raise ValueError(f"seeds {unequal}: the pair's update-0 evaluations differ (another start or episodes)")
        d = [runs["async"][s]["after"]["mean"] - runs["sync"][s]["after"]["mean"] for s in both]
        result["paired"] = {"seeds": both, "values": d, "diff": interval(d, 0.95)}
    return result


def markdown(r: dict) -> str:
    f = lambda d: f"{d['mean'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]"  # noqa: E731
    lines = ["| arm | seeds | success after SFT | after RL | lift per seed (points) | mean lift [95% interval] "
             "| minutes per seed |", "|---|---|---|---|---|---|---|"]
    for arm, x in r["arms"].items():
        lines.append(f"| {arm} | {', '.join(map(str, x['seeds']))} | "
                     + ", ".join(f"{v * 100:.1f}%" for v in x["before"]) + " | "
                     + ", ".join(f"{v * 100:.1f}%" for v in x["after"]) + " | "
                     + ", ".join(f"{v * 100:+.1f}" for v in x["lifts"]) + f" | {f(x['lift'])} | "
                     + ", ".join(f"{m:.0f}" for m in x["minutes"]) + " |")
    if r["paired"]:
        p = r["paired"]
        lines += ["", f"Paired difference async - sync in success after RL, seeds {p['seeds']}: "
                  + ", ".join(f"{v * 100:+.1f}" for v in p["values"]) + f" points; mean {f(p['diff'])}."]
    lines += ["", "Intervals: the wider of Student's t and the percentile bootstrap (95%) over seeds."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    a = cli.parse(Args, argv, description=__doc__.split("\n")[0])
    if a.size == "smoke" and os.path.abspath(a.out).startswith(os.path.abspath("results")):
        cli.error("--size smoke is a wiring check: pass --out outside results/")
    if a.mode == "run":
        run(a)
        if a.dry_run:
            return
    try:
        r = summarize(a.out)
    except ValueError as e:
        cli.error(str(e))
    write_results(r, markdown(r), os.path.join(a.out, "summary.json"))  # and summary.md beside it


if __name__ == "__main__":
    main()
