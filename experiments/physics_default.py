"""May a one-device CPU host's RL rollout default to C MuJoCo? The same policies on both simulators.

    .venv/bin/python experiments/physics_default.py run --dry-run      # the commands, nothing runs
    nice -n 19 .venv/bin/python experiments/physics_default.py run     # 5 checkpoints x 2 simulators, ~10 min
    .venv/bin/python experiments/physics_default.py report             # the verdict, from the JSONs only

Pre-registered (this docstring, committed before any run of it; the verdict: experiments/physics-default/README.md):

`env.physics_impl='auto'` steps C MuJoCo in the RL rollout of a one-device CPU host (`bench rollout --physics
mjx c`: 2.23-2.46x MJX's decisions/s) and MJX elsewhere. The default stays 'jax' unless the policies the
quickstart trains act the same on both simulators. C steps the same MJCF in float64 with its own solver: it
follows MJX closely, not bit for bit, so a closed-loop episode may end otherwise.

- Policies: the SFT checkpoints of the quickstart seeds 200-204 (`runs/quickstart-seeds45/seed-k/sft`,
  the starts of `results/runs/quickstart-seeds45/`).
- Episodes: each seed's RL evaluation protocol (`rl-grpo-tokens`: goal suite, 20 episodes per task = 80,
  episode seeds = the run's seed k, 4 actions executed per decision, greedy tokens), on `--env.physics-impl jax`
  (MJX) and `c`, run back to back per seed. `eval` writes each episode's success.
- Check: the MJX arm must reproduce the quickstart's update-0 evaluation of seed k exactly
  (`async-seed{k}.json` `before`); else the protocol differs and the comparison is void.
- Test: the per-episode difference C - MJX (400 paired episodes). Its 90% percentile-bootstrap interval
  (10,000 resamples, seed 0, resampling episodes within each checkpoint) inside [-5, +5] points -> the
  policies act the same on both simulators: `env.physics_impl` defaults to 'auto'. Otherwise it stays 'jax'.
  The margin is half of the async equivalence test's 10 points: a simulator difference must be small
  beside RL's own spread.
- Reported beside it, deciding nothing: per-seed differences, per-episode agreement, each eval's wall time
  (loading and compiles included).
- One look before this was written, which chose nothing but the command's form: seed 200's checkpoint with
  `eval`'s defaults (the whole chunk per decision, episode seed 0) gave MJX 75.0%, C 73.8% (40 s / 14 s).

`run` writes `<out>/{jax,c}-seed{k}.json` (the eval.json plus command, wall seconds, load, git commit); `report`
writes `<out>/summary.{json,md}` from those JSONs.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import subprocess
import sys
import time
from typing import Literal

import numpy as np
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments.outputs import git_state, loadavg, write_results  # noqa: E402
from vlajax.shared import cli  # noqa: E402

SEEDS = (200, 201, 202, 203, 204)
PHYSICS = ("jax", "c")
MARGIN = 0.05  # success, per episode, C - MJX
CONFIDENCE = 0.90  # two one-sided tests at 5%
RESAMPLES = 10_000


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    mode: tyro.conf.Positional[Literal["run", "report"]]
    seeds: tuple[int, ...] = SEEDS  # quickstart seeds whose SFT checkpoints are evaluated
    work: str = "runs/quickstart-seeds45"  # where experiments/quickstart_seeds.py left the runs (seed-k/sft)
    quickstart: str = "results/runs/quickstart-seeds45"  # its JSONs (the MJX arm's check)
    out: str = "results/runs/physics-default44"  # the per-eval JSONs and the summary
    replace: bool = False  # evaluate again even if the JSON exists
    dry_run: bool = False  # print the commands only


def command(a: Args, seed: int, physics: str, out_dir: str) -> list[str]:
    """The `eval` command of one checkpoint on one simulator (the RL phase's evaluation protocol)."""
    return [sys.executable, "-m", "vlajax.train", "eval", "--preset", "rl-grpo-tokens",
            "--checkpoint", os.path.join(a.work, f"seed-{seed}", "sft", "checkpoints"), "--suite", "goal",
            "--sft.eval-episodes-per-task", "20", "--sft.eval-replan-steps", "4", "--seed", str(seed),
            "--env.physics-impl", physics, "--output-dir", out_dir]


def run(a: Args) -> None:
    os.makedirs(a.out, exist_ok=True)
    for seed in a.seeds:
        for physics in PHYSICS:
            path = os.path.join(a.out, f"{physics}-seed{seed}.json")
            out_dir = os.path.join("runs", "physics-default44", f"{physics}-seed{seed}")
            argv = command(a, seed, physics, out_dir)
            if a.dry_run:
                print(" ".join(argv[1:]))
                continue
            if os.path.exists(path) and not a.replace:
                print(f"== {physics} seed {seed}: kept {path}", flush=True)
                continue
            load0, wall0, t0 = loadavg(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.time()
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"{physics} seed {seed} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            (found,) = glob.glob(os.path.join(out_dir, "eval", "goal-step-*", "eval.json"))
            with open(found) as f:
                ev = json.load(f)
            git = git_state()["commit"]  # the bare sha, as earlier records store it
            rec = {"physics": physics, "seed": seed, "eval": ev, "command": " ".join(argv[1:]),
                   "wall_seconds": round(time.time() - t0, 1), "loadavg": {"start": load0, "end": loadavg()},
                   "wall_clock_utc": [wall0, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())], "git": git}
            with open(path + ".tmp", "w") as f:
                json.dump(rec, f, indent=1)
            os.replace(path + ".tmp", path)
            print(f"== {physics} seed {seed}: {ev['mean_success']:.4f} in {rec['wall_seconds']} s -> {path}",
                  flush=True)


def _episodes(rec: dict) -> np.ndarray:
    """Per-episode success [80] in task order."""
    ev = rec["eval"]
    return np.concatenate([np.asarray(ev["episode_success"][n], np.float64) for n in ev["per_task"]])


def stratified_bootstrap(diffs: list[np.ndarray], *, resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                         seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of the pooled per-episode differences; each resample draws every group's episodes
    with replacement from that group (a checkpoint's episodes stay its own)."""
    rng = np.random.default_rng(seed)
    total = sum(d.size for d in diffs)
    sums = np.zeros(resamples)
    for d in diffs:
        sums += d[rng.integers(0, d.size, size=(resamples, d.size))].sum(axis=1)
    lo, hi = np.quantile(sums / total, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(np.concatenate(diffs).mean()), float(lo), float(hi)


def summarize(a: Args) -> dict:
    """The check, the test and what is reported beside it (see the module docstring)."""
    recs: dict[tuple[str, int], dict] = {}
    for path in glob.glob(os.path.join(a.out, "*-seed*.json")):
        with open(path) as f:
            r = json.load(f)
        recs[r["physics"], int(r["seed"])] = r
    seeds = sorted(s for s in a.seeds if all((p, s) in recs for p in PHYSICS))
    if not seeds:
        raise ValueError(f"no seed with both {PHYSICS} JSONs in {a.out}")
    per_seed, diffs, void = [], [], []
    for s in seeds:
        mjx, c = _episodes(recs["jax", s]), _episodes(recs["c", s])
        with open(os.path.join(a.quickstart, f"async-seed{s}.json")) as f:
            before = json.load(f)["before"]["mean"]
        if abs(recs["jax", s]["eval"]["mean_success"] - before) > 1e-9:
            void.append(s)
        diffs.append(c - mjx)
        per_seed.append({"seed": s, "mjx": float(mjx.mean()), "c": float(c.mean()), "diff": float((c - mjx).mean()),
                         "agreement": float((c == mjx).mean()), "quickstart_update0": before,
                         "wall_seconds": {p: recs[p, s]["wall_seconds"] for p in PHYSICS}})
    mean, lo, hi = stratified_bootstrap(diffs)
    inside = lo >= -MARGIN and hi <= MARGIN
    if void:
        verdict = f"VOID (the MJX arm does not reproduce the quickstart's update-0 evaluation of seeds {void})"
    elif len(seeds) < len(a.seeds):
        verdict = f"INCOMPLETE ({len(seeds)} of {len(a.seeds)} seeds)"
    else:
        verdict = "SAME (default 'auto')" if inside else "NOT SHOWN THE SAME (default stays 'jax')"
    return {"seeds": seeds, "per_seed": per_seed, "episodes": int(sum(d.size for d in diffs)),
            "diff": {"mean": mean, "low": lo, "high": hi, "confidence": CONFIDENCE, "margin": MARGIN},
            "agreement": float(np.mean(np.concatenate(diffs) == 0)), "verdict": verdict}


def markdown(r: dict) -> str:
    lines = ["| seed | MJX | C MuJoCo | C - MJX (points) | episodes that agree | quickstart update 0 "
             "| wall s MJX / C |", "|---|---:|---:|---:|---:|---:|---|"]
    for p in r["per_seed"]:
        lines.append(f"| {p['seed']} | {p['mjx'] * 100:.1f}% | {p['c'] * 100:.1f}% | {p['diff'] * 100:+.1f} | "
                     f"{p['agreement'] * 100:.0f}% | {p['quickstart_update0'] * 100:.1f}% | "
                     f"{p['wall_seconds']['jax']:.0f} / {p['wall_seconds']['c']:.0f} |")
    d = r["diff"]
    lines += ["", f"C - MJX over {r['episodes']} paired episodes: {d['mean'] * 100:+.2f} points, "
              f"{d['confidence']:.0%} interval [{d['low'] * 100:+.2f}, {d['high'] * 100:+.2f}] "
              f"(margin +-{d['margin'] * 100:.0f}); episodes that agree {r['agreement'] * 100:.1f}%.",
              "", f"Verdict: **{r['verdict']}**."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    a = cli.parse(Args, argv, description=__doc__.split("\n")[0])
    if a.mode == "run":
        run(a)
        if a.dry_run:
            return
    try:
        r = summarize(a)
    except ValueError as e:
        cli.error(str(e))
    write_results(r, markdown(r), os.path.join(a.out, "summary.json"))  # and summary.md beside it


if __name__ == "__main__":
    main()
