"""`make quickstart`: demos -> SFT -> RL -> eval on the CPU presets, then a report folder.

Phases (each is the documented command, run as its own process):
  1. demos  scripted experts on the `goal` suite -> a LeRobot v3.0 dataset
  2. sft    `sft-small` (1.5M-param VLA, 32x32 pixels) with the token head (64 bins per action
            dim) on those demos
  3. rl     GRPO through the asynchronous pipeline (`--pipeline.enabled`) from the SFT
            checkpoint with the preset `rl-grpo-tokens` (token head, progress reward, 8 groups
            of 4), rollouts sampled at temperature 0.5 and a KL penalty (0.04) to the SFT policy,
            train-async at staleness 1 (rollout runs one policy version ahead of the
            trainer) with decoupled PPO (proximal log-probs recomputed, behaviour weights
            truncated). It is evaluated closed-loop at update 0 (= the SFT policy), every 5 updates
            and at the end: before/after and a curve. Why this recipe, and what it lifts over fresh
            seeds against its synchronous pair: experiments/quickstart/README.md.
  4. report `report/README.md` (success per task before and after RL with 95% intervals, the
            evaluation curve, the commands to go further), `curves.png` (evaluation success at
            updates 0 / 5 / 10 / 15 / 20 with intervals, per-task before/after, training success,
            losses, env steps/s, idle ratios, staleness), `summary.json`, GIFs of the episodes
            (`vlajax/quickstart/report.py`; `python -m vlajax.quickstart.report <out>` rewrites it)

Each phase's output streams to the terminal (indented; the RL phase reports updates, env
steps/s, staleness and success at least every 30 s) and to `<out>/logs/<phase>.log`.
`VLAJAX_QUICKSTART_DIR` sets the output folder (default `runs/quickstart`; a previous run
there is deleted first); `VLAJAX_QUICKSTART_SEED` (an integer >= 0, default 0) is the root seed
(`--seed`) of every phase: the demos' episodes, SFT's init and batches, RL's streams and its
evaluation episodes; `VLAJAX_QUICKSTART_SIZE=smoke` shrinks every phase to a few steps (a wiring
check, not a learning run). An invalid value stops it with one `error:` line before anything runs.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time

from vlajax.quickstart import report as quickstart_report

OUT = os.environ.get("VLAJAX_QUICKSTART_DIR", "runs/quickstart")

SIZES = {
    # episodes per task, SFT steps, RL iterations, RL evaluations every N updates (and at 0), eval episodes per task.
    # The default evaluates at 5, 10 and 15 besides before and after: a curve for ~15-25 s of work per evaluation
    "default": dict(episodes=5, sft_steps=500, rl_iterations=20, eval_every=5, eval_episodes=20),
    "smoke": dict(episodes=2, sft_steps=4, rl_iterations=2, eval_every=1, eval_episodes=1),
}


PIPELINE_FLAGS = [
    # train-async at staleness 1 with decoupled PPO: the staleness that learns as much as sync
    # (experiments/async-equivalence/README.md); the main job shows the asynchronous pipeline
    "--pipeline.enabled", "--pipeline.staleness-threshold", "1", "--pipeline.no-use-rollout-log-probs",
]
RL_FLAGS = [
    # rollouts at temperature 0.5 (closer to the greedy policy the report evaluates) and a KL penalty to the SFT
    # policy (DeepSeekMath's beta 0.04, estimated per token) that anchors the visited states to the SFT policy
    "--rl.temperature", "0.5", "--rl.kl-coef", "0.04",
]
# The RL phase's flags on top of the preset `rl-grpo-tokens` (the sync pair, experiments/quickstart_seeds.py: RL_FLAGS)
RL_RECIPE = PIPELINE_FLAGS + RL_FLAGS


def rl_command(sft_checkpoints: str, out: str, size_name: str, seed: int, sync: bool = False) -> list[str]:
    """The RL phase's `vlajax.train` arguments; `sync=True`: the same without the pipeline (the synchronous loop)."""
    size = SIZES[size_name]
    args = ["rl", "--preset", "rl-grpo-tokens", "--rl.init-from", sft_checkpoints, "--output-dir", out,
            "--rl.num-iterations", str(size["rl_iterations"]), "--rl.eval-every", str(size["eval_every"]),
            "--rl.eval-episodes-per-task", str(size["eval_episodes"]), "--logging.video-every", "1",
            "--logging.progress", "plain", "--seed", str(seed), *(RL_FLAGS if sync else RL_RECIPE)]
    if size_name == "smoke":
        args += ["--env.num-envs", "8", "--rl.group-size", "4", "--env.episode-length", "40"]
    return args


def _settings(environ, sizes=SIZES) -> tuple[str, int]:
    """(size, seed) from `VLAJAX_QUICKSTART_SIZE` (a key of `sizes`) / `VLAJAX_QUICKSTART_SEED`; SystemExit with one
    `error:` line when either is invalid."""
    size = environ.get("VLAJAX_QUICKSTART_SIZE", "default")
    if size not in sizes:
        raise SystemExit(f"error: VLAJAX_QUICKSTART_SIZE must be one of {', '.join(sizes)}, got {size!r}")
    raw = environ.get("VLAJAX_QUICKSTART_SEED", "0")
    try:
        seed = int(raw.strip())
    except ValueError:
        seed = -1
    if seed < 0 or seed >= 2**31:
        raise SystemExit(f"error: VLAJAX_QUICKSTART_SEED must be an integer in [0, 2**31), got {raw!r}")
    return size, seed


def _run(phase: str, args: list[str], log_path: str) -> float:
    """Run one phase's command; its output goes to the terminal (indented) and to `log_path` as it comes.
    -> its wall seconds."""
    cmd = [sys.executable, "-m", "vlajax.train", *args]
    print(f"[quickstart] {phase}: {' '.join(cmd[2:])}", flush=True)
    t0 = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                      text=True, bufsize=1, env=env) as proc:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            print(f"  {line}", end="", flush=True)
    if proc.returncode:
        with open(log_path) as f:
            tail = f.read().splitlines()[-20:]
        raise SystemExit(f"[quickstart] {phase} failed (exit {proc.returncode}); last lines of {log_path}:\n"
                         + "\n".join(tail))
    seconds = time.time() - t0
    print(f"[quickstart] {phase} done in {seconds:.0f} s (log: {log_path})", flush=True)
    return seconds


def _check_report_deps() -> None:
    """The report needs the `report` extra; say so before the phases run, not after."""
    missing = [m for m in ("matplotlib", "tensorboard") if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"error: the quickstart's report needs {' and '.join(missing)}: "
                         "pip install 'vlajax[report]' (`make quickstart` installs it)")


def _start(out: str, sizes: dict, tag: str = "quickstart") -> tuple[str, int, str, str]:
    """(size, seed, logs folder, report folder): the settings (`_settings`), the report's dependencies, then `out`
    made afresh (a previous run there is deleted) with its `logs` and `report` folders."""
    size_name, seed = _settings(os.environ, sizes)
    _check_report_deps()
    if os.path.isdir(out):
        print(f"[{tag}] removing the previous quickstart run in {out}", flush=True)
        shutil.rmtree(out)
    logs, report = os.path.join(out, "logs"), os.path.join(out, "report")
    os.makedirs(logs)
    os.makedirs(report)
    return size_name, seed, logs, report


def main() -> int:
    size_name, seed, logs, report = _start(OUT, SIZES)
    size = SIZES[size_name]
    t_start = time.time()
    demos, sft, rl = (os.path.join(OUT, p) for p in ("demos", "sft", "rl"))
    smoke = size_name == "smoke"
    seed_args = ["--seed", str(seed)]
    sft_preset = "sft-tiny" if smoke else "sft-small"

    # ---- 1. Demonstrations ----------------------------------------------------------------
    _run("1/3 demos", ["demos", "--preset", sft_preset, "--suite", "goal",
                       "--episodes-per-task", str(size["episodes"]), "--out", demos, *seed_args],
         os.path.join(logs, "demos.log"))
    # ---- 2. SFT ---------------------------------------------------------------------------
    _run("2/3 sft", ["sft", "--preset", sft_preset, "--data.dataset-dir", demos, "--output-dir", sft,
                     "--model.action-head", "tokens", "--model.num-bins", "64",
                     "--sft.num-steps", str(size["sft_steps"]), "--sft.eval-every", "-1",
                     "--logging.progress", "plain", *seed_args], os.path.join(logs, "sft.log"))
    # ---- 3. RL from the SFT checkpoint (evaluated at update 0, every eval_every, and at the end) ----
    iters = size["rl_iterations"]
    _run("3/3 rl", rl_command(os.path.join(sft, "checkpoints"), rl, size_name, seed), os.path.join(logs, "rl.log"))

    # ---- 4. Report ------------------------------------------------------------------------
    for src in glob.glob(os.path.join(rl, "eval", f"iteration-{iters}", "*.gif")):
        shutil.copy(src, report)
    meta = {"seed": seed, "size": size_name, **size, "minutes": round((time.time() - t_start) / 60, 2),
            "rl_recipe": RL_RECIPE}
    summary = quickstart_report.write(OUT, meta)
    print(summary["readme_head"])
    print(f"[quickstart] report: {os.path.join(report, 'README.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
