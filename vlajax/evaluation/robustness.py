"""Robustness evaluation: `python -m vlajax.train eval --robustness SPEC --checkpoint DIR`.

For each perturbation axis and level of `SPEC` (`env.robustness`: 'all', 'camera,lighting',
'camera=1:3,noise=2'; see `vlajax.envs.perturb`) and once unperturbed (level 0), every task of the
suite runs the same fixed-seed episodes as `vlajax.evaluation.closed_loop` (`episode_keys`: the initial states
differ only by the perturbation). The levels are a traced argument of one jitted closed loop, so
all axes and levels share one compile; level 0 is bit-identical to the plain evaluation.

Outputs in `--output-dir` (default `<output_dir>/eval/robustness-<suite or task with / as __>-step-<step>`):
`robustness.json` (per axis, level and task: success; the summary; seeds), `robustness.md` (the
task x axis x level table and the summary: success drop per axis), `robustness.png` (success
against level, one line per axis; needs matplotlib, the `report` extra) and
`failure__<axis>.gif` (one failed episode at the axis's highest failing level, as the policy saw it).

Every file is written atomically once all levels ran (robustness.json last, once): a SIGTERM / Ctrl-C
during the levels leaves no file at all (`run`: the `eval --checkpoint` stop contract).

`evaluate_robustness(cfg, bridge, model, params, ...)` is the same as a function; the RL loops call
it at every evaluation when `env.robustness` is set (`vlajax.rl.setup`).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.data.demos import make_env
from vlajax.envs import perturb, registry
from vlajax.evaluation import closed_loop, remote
from vlajax.evaluation.closed_loop import EVAL_STREAM, episode_keys, result_dir, stop_cleanly, write_report
from vlajax.policies.run_files import checkpoint_dir, load_run_policy
from vlajax.shared import compile_cache
from vlajax.shared.atomic_files import write_bytes
from vlajax.training.logging import write_gif

log = logging.getLogger(__name__)

BASELINE = "none"  # the row of the unperturbed episodes (every axis at level 0)
_RUNNERS: dict = {}  # the last setup's jitted closed loop (levels are its argument)


def plan(spec: str) -> list[tuple[str, int]]:
    """[(axis, level)] to run: the baseline first, then every axis's levels of `spec`."""
    try:
        axes = perturb.parse_eval(spec)
    except ValueError as e:
        raise ConfigError(f"env.robustness: {e}") from None
    return [(BASELINE, 0)] + [(a, lv) for a, levels in axes.items() for lv in levels]


def evaluate_robustness(cfg: TrainConfig, bridge, model, params, *, spec: str | None = None,
                        episodes_per_task: int | None = None, out_dir: str | None = None,
                        gifs: bool = True) -> dict[str, Any]:
    """Success per (axis, level, task) of `params` (see the module docstring). -> the result dict:
    `success[axis][level][task]`, `mean[axis][level]`, `summary[axis]` (drop at the highest level
    and mean drop over levels, in success-rate points), `episodes_per_task`, `seeds`. Its files are
    written into `out_dir` when given (`write_outputs`)."""
    result, clips = run_levels(cfg, bridge, model, params, spec=spec, episodes_per_task=episodes_per_task, gifs=gifs)
    if out_dir:
        write_outputs(out_dir, result, clips)
    return result


def run_levels(cfg: TrainConfig, bridge, model, params, *, spec: str | None = None,
               episodes_per_task: int | None = None, gifs: bool = True) -> tuple[dict[str, Any], dict]:
    """The episodes of `evaluate_robustness`, nothing written. -> (result, failure clips: `{axis: (level,
    task, frames uint8 [S, h, w, 3])}`, one failed episode per perturbed axis at its highest failing level)."""

    spec = spec or cfg.env.robustness or "all"
    runs = plan(spec)
    if any(a == "dynamics" for a, _ in runs) and cfg.env.physics_impl not in ("jax", "auto"):
        raise ConfigError("env.robustness: the dynamics axis needs env.physics_impl='jax'")
    if cfg.env.randomize:  # the env's own randomization would override nothing, but keep resets plain
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, randomize=""))
    try:
        names = registry.tasks_for(cfg.env)
    except KeyError as e:
        raise ConfigError(str(e.args[0])) from None
    if not set(bridge.cameras) <= set(cfg.env.cameras):
        raise ConfigError(f"the policy reads cameras {bridge.cameras}; env.cameras={cfg.env.cameras} lacks some")
    e_per = episodes_per_task or cfg.sft.eval_episodes_per_task
    task_ids = np.asarray([registry.ALL_ENVS.index(n) for n in names], np.int32)
    camera = "agentview" if "agentview" in cfg.env.cameras else cfg.env.cameras[0]
    key = (cfg.env, tuple(names), bridge, model.cfg, cfg.sft.eval_replan_steps, camera)
    if key not in _RUNNERS:
        _RUNNERS.clear()
        _RUNNERS[key] = jax.jit(functools.partial(
            closed_loop, make_env(cfg, names[0]), bridge, model, episode_length=cfg.env.episode_length,
            replan=cfg.sft.eval_replan_steps, camera=camera))
    run = _RUNNERS[key]
    keys = episode_keys(cfg.seed, task_ids, e_per)
    tids = jnp.asarray(np.repeat(task_ids, e_per))
    every = jnp.arange(len(task_ids) * e_per, dtype=jnp.int32)  # frames of every episode (small on CPU)

    success: dict[str, dict[int, dict[str, float]]] = {}
    failure_clip: dict[str, tuple[int, str, np.ndarray]] = {}
    t0 = time.perf_counter()
    for axis, level in runs:
        lv = perturb.levels() if axis == BASELINE else perturb.levels(**{axis: level})
        ok, _, frames = jax.device_get(run(params, keys, tids, every, jnp.asarray(lv)))
        ok = np.asarray(ok).reshape(len(names), e_per)
        success.setdefault(axis, {})[level] = {n: float(ok[i].mean()) for i, n in enumerate(names)}
        failed = np.flatnonzero(~ok.reshape(-1))
        if gifs and axis != BASELINE and len(failed):  # keep the highest failing level's first failure
            failure_clip[axis] = (level, names[failed[0] // e_per], np.asarray(frames)[:, failed[0]])
        log.info("robustness: %s level %d mean success %.3f", axis, level, ok.mean())
    seconds = time.perf_counter() - t0

    mean = {a: {lv: float(np.mean(list(per.values()))) for lv, per in by.items()} for a, by in success.items()}
    base = mean[BASELINE][0]
    summary = {a: {"max_level": max(by), "success_at_max": by[max(by)], "drop_at_max": base - by[max(by)],
                   "mean_drop": float(np.mean([base - v for v in by.values()]))}
               for a, by in mean.items() if a != BASELINE}
    result = {
        "suite": cfg.env.task or cfg.env.suite, "spec": spec, "tasks": list(names), "baseline": base,
        "success": success, "mean": mean, "summary": summary,
        "axes": {a.name: a.effect for a in perturb.AXES if a.name in success},
        "episodes_per_task": e_per, "episodes": int(len(runs) * len(names) * e_per),
        "seeds": {"seed": cfg.seed, "stream": EVAL_STREAM,
                  "rule": "episode e of task t: fold_in(fold_in(key(seed), stream + t), e); the same keys at "
                          "every axis and level"},
        "episode_length": cfg.env.episode_length, "seconds": round(seconds, 1),
        # actions executed per predicted chunk (sft.eval_replan_steps; 0 there = the whole chunk)
        "replan_steps": cfg.sft.eval_replan_steps or bridge.model.action_horizon,
        "physics": registry.physics_impl(cfg.env),  # the simulator ('auto': MJX)
    }
    return result, failure_clip


def write_outputs(out_dir: str, result: dict[str, Any], clips: dict) -> None:
    """robustness.png, failure__<axis>.gif (`run_levels`' clips), then robustness.md and robustness.json:
    every file written atomically (whole or absent), robustness.json last and once (it names the GIFs)."""
    os.makedirs(out_dir, exist_ok=True)
    plot(result, os.path.join(out_dir, "robustness.png"))
    for axis, (level, task, clip) in clips.items():
        write_gif(os.path.join(out_dir, f"failure__{axis}.gif"), clip[None], fps=25)
        result.setdefault("failure_gifs", {})[axis] = {"level": level, "task": task, "file": f"failure__{axis}.gif"}
    write_report(out_dir, "robustness", result, table_markdown(result))  # last: names the GIFs


def table_markdown(result: dict[str, Any]) -> str:
    """The task x axis x level table (one row per axis and level) and the per-axis summary."""
    tasks = result["tasks"]
    lines = ["| axis | level | " + " | ".join(t for t in tasks) + " | mean |",
             "|---|---:|" + "---:|" * (len(tasks) + 1)]
    for axis, by in result["success"].items():
        for level, per in by.items():
            cells = " | ".join(f"{100 * per[t]:.0f}%" for t in tasks)
            lines.append(f"| {axis} | {level} | {cells} | {100 * result['mean'][axis][level]:.1f}% |")
    lines += ["", f"Success drop per axis (points; unperturbed mean {100 * result['baseline']:.1f}%, "
              f"{result['episodes_per_task']} episodes per task and level):", "",
              "| axis | highest level | success there | drop there | mean drop over levels |",
              "|---|---:|---:|---:|---:|"]
    for axis, s in result["summary"].items():
        lines.append(f"| {axis} | {s['max_level']} | {100 * s['success_at_max']:.1f}% | "
                     f"{100 * s['drop_at_max']:+.1f} | {100 * s['mean_drop']:+.1f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: str) -> bool:
    """Success against level, one line per axis (all start at the unperturbed mean). False if
    matplotlib (the `report` extra) is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("robustness: matplotlib missing (pip install '.[report]'); no plot written")
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for axis, by in result["mean"].items():
        if axis == BASELINE:
            continue
        levels = [0, *by]
        ax.plot(levels, [100 * result["baseline"], *(100 * v for v in by.values())], marker="o", label=axis)
    ax.set_xlabel("perturbation level (0 = training distribution)")
    ax.set_ylabel("success (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"robustness: {result['suite']} ({result['episodes_per_task']} episodes per task and level)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_bytes(path, buf.getvalue())  # whole or absent
    return True


def eval_command(cfg: TrainConfig) -> int:
    """The `eval` command: this module's table when `env.robustness` is set, else
    `vlajax.evaluation.remote.run` (a checkpoint through `vlajax.evaluation.closed_loop.run`, or a policy server)."""
    if not cfg.env.robustness:
        return remote.run(cfg)
    if cfg.sft.eval_policy_server:
        raise ConfigError("--robustness evaluates a checkpoint (--checkpoint DIR), not --policy-server")
    return run(cfg)


def run(cfg: TrainConfig) -> int:
    """The `eval` command with `env.robustness` set. The stop contract of `eval --checkpoint`
    (`evaluation.stop_cleanly`): SIGTERM / Ctrl-C while loading, compiling or running any level's
    episodes abandons the whole table at once and writes nothing (exit 0, one line); during the
    writing the files are finished first (robustness.json last, once, with the checkpoint in it)."""
    plan(cfg.env.robustness)  # a bad spec fails before the checkpoint loads or anything compiles

    def episodes():
        compile_cache.enable(cfg.compilation_cache_dir)
        bridge, model, params, train_cfg, step = load_run_policy(cfg)
        name = (cfg.env.task or cfg.env.suite).replace("/", "__")
        result, clips = run_levels(cfg, bridge, model, params)
        result["checkpoint"] = {"dir": checkpoint_dir(cfg), "step": step, "preset": train_cfg.name}
        return result_dir(cfg, f"robustness-{name}", step), result, clips

    out_dir, result, _ = stop_cleanly(episodes, lambda got: write_outputs(*got), report="robustness.json")
    print(table_markdown(result), flush=True)
    print(json.dumps({"baseline": result["baseline"], "drop_at_max": {a: s["drop_at_max"] for a, s in
                      result["summary"].items()}, "episodes": result["episodes"], "out_dir": out_dir}), flush=True)
    return 0
