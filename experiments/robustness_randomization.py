"""Does randomizing camera and lighting during SFT buy robustness to them?

    .venv/bin/python experiments/robustness_randomization.py --json runs/experiments/robustness_randomization.json
    .venv/bin/python experiments/robustness_randomization.py --smoke --out /tmp/rr   # minutes, what the test runs

For each seed and each arm -- `plain` (demos at level 0) and `randomized` (demos drawn with
`--env.randomize camera=0:R,lighting=0:R`) -- this generates scripted demonstrations
(`vlajax.train demos`), trains an SFT policy on them (`vlajax.train sft`, the seed sets the data
shuffle and the init) and evaluates it with `vlajax.train eval --robustness camera,lighting`
(the same fixed-seed episodes unperturbed and at every camera and lighting level). Reported per arm,
axis and level: mean success over the seeds and a 95% t-interval (n = seeds), and the
randomized-minus-plain difference. Everything runs in this process through `vlajax.train.main`.

`--smoke`: the first seed only, one task (`goal/press_button`), 2 demos (80 control steps), 2 SFT
steps of `sft-tiny`, 4-step evaluation episodes at 16 px: checks the pipeline end to end, its numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from vlajax import train  # noqa: E402
from vlajax.shared import cli  # noqa: E402

ARMS = ("plain", "randomized")
AXES = ("camera", "lighting")


@dataclasses.dataclass(frozen=True)
class Args:
    out: str = "runs/experiments/robustness_randomization"  # working directory (demos, checkpoints, evals)
    json: str = ""  # also write the summary here ('' = <out>/summary.json only)
    seeds: tuple[int, ...] = (0, 1, 2)  # one demos + SFT + eval run per seed and arm
    preset: str = "sft-small"  # SFT preset (README's recipe)
    suite: str = "goal"  # task suite of demos and evaluation
    task: str = ""  # one task instead of the suite ('' = the whole suite)
    episodes_per_task: int = 5  # demonstrations per task
    sft_steps: int = 0  # SFT steps (0 = the preset's)
    randomize_level: float = 3.0  # the randomized arm draws camera and lighting levels from [0, this]
    eval_episodes_per_task: int = 10  # evaluation episodes per task, axis and level
    episode_length: int = 0  # control steps per evaluation episode (0 = the preset's)
    demo_episode_length: int = 0  # control steps the expert gets per demonstration (0 = the preset's)
    image_size: int = 0  # rendered image side (0 = the preset's)
    action_head: str = ""  # 'tokens' or 'flow' ('' = the preset's); the quickstart's SFT uses tokens
    num_bins: int = 0  # action-token bins with the token head (0 = the preset's; the quickstart's 64)
    smoke: bool = False  # a minutes-long end-to-end check (see the docstring); numbers mean nothing


def smoke_args(a: Args) -> Args:
    return dataclasses.replace(a, preset="sft-tiny", task="goal/press_button", episodes_per_task=2, sft_steps=2,
                               eval_episodes_per_task=2, episode_length=4, demo_episode_length=80, image_size=16,
                               seeds=a.seeds[:1])


def _main(argv: list[str]) -> None:
    code = train.main(argv)
    if code != 0:
        raise RuntimeError(f"python -m vlajax.train {' '.join(argv)} exited {code}")


def run_one(a: Args, arm: str, seed: int) -> dict:
    """Demos, SFT and the camera/lighting robustness eval of one (arm, seed). -> robustness.json's dict."""
    root = os.path.join(a.out, f"{arm}-seed{seed}")
    env = ["--env.suite", a.suite, "--seed", str(seed)]
    if a.task:
        env += ["--env.task", a.task]
    if a.image_size:
        env += ["--env.image-size", str(a.image_size)]
    common = ["--preset", a.preset, "--output-dir", root, *env]
    model = (["--model.action-head", a.action_head] if a.action_head else []) + (
        ["--model.num-bins", str(a.num_bins)] if a.num_bins else [])
    demos = os.path.join(root, "demos")
    if not os.path.isfile(os.path.join(demos, "meta", "info.json")):
        lv = f"{a.randomize_level:g}"
        rand = ["--env.randomize", f"camera=0:{lv},lighting=0:{lv}"] if arm == "randomized" else []
        length = ["--env.episode-length", str(a.demo_episode_length)] if a.demo_episode_length else []
        _main(["demos", *common, "--episodes-per-task", str(a.episodes_per_task), "--out", demos, *rand, *length])
    ckpt = os.path.join(root, "checkpoints")
    sft = ["--sft.num-steps", str(a.sft_steps)] if a.sft_steps else []
    if not os.path.isfile(os.path.join(ckpt, "policy.json")):
        _main(["sft", *common, *model, "--data.dataset-dir", demos, *sft, "--sft.eval-every", "-1"])
    length = ["--env.episode-length", str(a.episode_length)] if a.episode_length else []
    # eval reads the model from the checkpoint (it refuses --model.* flags)
    _main(["eval", *common, *length, "--checkpoint", ckpt, "--robustness", ",".join(AXES),
           "--episodes-per-task", str(a.eval_episodes_per_task)])
    evals = os.path.join(root, "eval")
    (sub,) = [d for d in os.listdir(evals) if d.startswith("robustness-")]  # robustness-<suite>-step-<n>
    with open(os.path.join(evals, sub, "robustness.json")) as f:
        return json.load(f)


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% t-interval (half width 0 for one value)."""
    from scipy import stats

    v = np.asarray(values, np.float64)
    if len(v) < 2:
        return float(v.mean()), float(v.mean()), float(v.mean())
    half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(v.mean() - half), float(v.mean() + half)


def summarize(runs: dict[str, dict[int, dict]]) -> dict:
    """{arm: {seed: robustness result}} -> rows (arm, axis, level, mean, lo, hi, per-seed values)."""
    rows = []
    first = next(iter(next(iter(runs.values())).values()))
    cells = [("none", "0")] + [(ax, lv) for ax in AXES for lv in first["mean"][ax]]
    for arm, by_seed in runs.items():
        for axis, level in cells:
            vals = [r["mean"][axis][level] for r in by_seed.values()]
            mean, lo, hi = interval(vals)
            rows.append({"arm": arm, "axis": axis, "level": int(level), "mean": mean, "lo": lo, "hi": hi,
                         "per_seed": vals})
    return {"rows": rows, "seeds": sorted(next(iter(runs.values()))),
            "episodes_per_task": first["episodes_per_task"], "tasks": first["tasks"]}


def table_markdown(summary: dict) -> str:
    by = {(r["arm"], r["axis"], r["level"]): r for r in summary["rows"]}
    lines = ["| axis | level | plain: mean [95% CI] | randomized: mean [95% CI] | randomized - plain |",
             "|---|---:|---:|---:|---:|"]
    for axis, level in dict.fromkeys((r["axis"], r["level"]) for r in summary["rows"]):
        p, q = by["plain", axis, level], by["randomized", axis, level]
        cell = lambda r: f"{100 * r['mean']:.1f}% [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]"
        lines.append(f"| {axis} | {level} | {cell(p)} | {cell(q)} | {100 * (q['mean'] - p['mean']):+.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    a = cli.parse(Args, argv, prog="experiments/robustness_randomization.py", description=__doc__.split("\n")[0])
    if a.smoke:
        a = smoke_args(a)
    if not a.seeds:
        cli.error("--seeds needs at least one seed")
    t0 = time.perf_counter()
    runs = {arm: {s: run_one(a, arm, s) for s in a.seeds} for arm in ARMS}
    summary = summarize(runs) | {"args": dataclasses.asdict(a), "seconds": round(time.perf_counter() - t0, 1)}
    os.makedirs(a.out, exist_ok=True)
    for path in filter(None, (os.path.join(a.out, "summary.json"), a.json)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)
    md = table_markdown(summary)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(md)
    print(md, flush=True)
    return summary


if __name__ == "__main__":
    main()
