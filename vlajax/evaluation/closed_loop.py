"""`python -m vlajax.train eval --checkpoint DIR --suite NAME`: closed-loop evaluation in MJX.

Every task of the suite (or `--env.task`) runs `--episodes-per-task N` (default
`sft.eval_episodes_per_task`) randomized episodes, all tasks in one batch and one jitted
`lax.scan`: the policy predicts an action chunk from the current observation (deterministic:
the ODE sampler / argmax tokens), the env executes its first `sft.eval_replan_steps` actions
(0 = the whole chunk), repeat until `env.episode_length` control steps. An episode succeeds
when the task's success predicate held at any step; it is frozen from then on.

Seeds are fixed: episode e of task t (index in `tasks.TASKS`) resets with
`fold_in(fold_in(key(seed), EVAL_STREAM + t), e)` (a stream the demonstrations never use), so
two evaluations of the same checkpoint see the same initial states.

Outputs (`result_dir`): beside the evaluated run, `<run>/eval/<suite>-step-<N>` (`<run>` holds the checkpoint
directory); under `--out DIR` as `DIR/<run name>-<suite>-step-<N>`; under a command line's `--output-dir` as
`<output_dir>/eval/<run name>-<suite>-step-<N>`. An existing result is never replaced: the new one is
`<name>-2`, `-3`, ... unless `--overwrite`. Files: `eval.json` (`per_task` success, `mean_success`, `episodes`,
`seeds`, per-episode success, steps and instruction, `physics`: the simulator the episodes stepped, 'jax' (MJX),
'c' (C MuJoCo) or 'warp'; `env.physics_impl='auto'` evaluates on MJX), `eval.md` (the per-task table: task, the
instructions its episodes were given, success with failure count, total success rate, total episodes) and one
GIF per task (`<task>.gif`: its first episodes side by side, upscaled to >= 256 px tall, each framed green from
the step it succeeded or red over its last second when it failed; `vlajax.envs.video.outcome_clip`).

`evaluate(cfg, bridge, model, params)` is the same evaluation as a function (SFT and the RL
loop call it for periodic evaluation).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.envs.video import outcome_clip
from vlajax.envs.wrappers import select
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.policies.run_files import checkpoint_dir, load_run_policy
from vlajax.shared import compile_cache
from vlajax.shared.atomic_files import write_json, write_text
from vlajax.shared.robots import image_key
from vlajax.training.logging import write_gif

log = logging.getLogger(__name__)

EVAL_STREAM = 5000  # rng stream offset of evaluation episodes (demos use vlajax.data.demos.DEMO_STREAM)
GIF_EPISODES = 4  # episodes per task shown side by side in its GIF
_RUNNERS: dict = {}  # the last (env, policy) setup's jitted closed loop


def episode_keys(seed: int, task_ids: np.ndarray, episodes_per_task: int) -> jax.Array:
    """Raw keys [T * E, 2]: episode e of task t -> fold_in(fold_in(key(seed), EVAL_STREAM + t), e)."""
    root = jax.random.key(seed)
    keys = [jax.random.fold_in(jax.random.fold_in(root, EVAL_STREAM + int(t)), e)
            for t in task_ids for e in range(episodes_per_task)]
    return jax.random.key_data(jnp.stack(keys))


def closed_loop(env, bridge: Bridge, model: VLA, params, keys, task_ids, gif_index, levels=None, *,
                episode_length: int, replan: int, camera: str, instructions: bool = False):
    """Run the policy on a batch of episodes. keys [N, 2], task_ids int32 [N], gif_index int [G];
    levels float32 [perturb.NUM_AXES] (optional, traced): every episode perturbed at these levels.

    Returns success bool [N], steps-to-success int32 [N] (episode_length when failed) and
    frames uint8 [S, G, h, w, 3] of `camera` for episodes `gif_index`; with `instructions`, also each
    episode's instruction id int32 [N] (`TaskSpec.instructions()[id]` is its text).
    """
    variables = {"params": params}
    n = task_ids.shape[0]
    h = bridge.model.action_horizon
    replan = h if replan <= 0 else min(replan, h)
    num_chunks = -(-episode_length // replan)
    state = jax.vmap(lambda k, t: env.reset_task(k, t, levels=levels))(keys, task_ids)
    vstep = jax.vmap(env.step)

    def control(carry, a):
        state, done, steps, t = carry
        nxt = vstep(state, a)
        nxt = select(done, state, nxt)  # finished episodes stay put (their physics by MJX's merge)
        live = (~done) & (t < episode_length)
        success = live & (nxt.metrics["success"] > 0)
        steps = steps + live.astype(jnp.int32)
        done = done | success | (nxt.done > 0) | (t + 1 >= episode_length)
        frame = state.obs[image_key(camera)][gif_index]
        return (nxt, done, steps, t + 1), (success, frame)

    def chunk(carry, i):
        state = carry[0]
        rng = jax.random.fold_in(jax.random.key(0), i)
        actions = bridge.act(model, variables, state, rng, deterministic=True)[..., :env.action_size]  # [N, H, 4]
        carry, (success, frames) = jax.lax.scan(control, carry, jnp.moveaxis(actions[:, :replan], 1, 0))
        return carry, (success.any(0), frames)

    init = (state, jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32), jnp.int32(0))
    (_, _, steps, _), (success, frames) = jax.lax.scan(chunk, init, jnp.arange(num_chunks))
    frames = frames.reshape(-1, *frames.shape[2:])[:episode_length]
    if instructions:
        return success.any(0), steps, frames, state.info["episode"]["instruction_id"]
    return success.any(0), steps, frames


def table_markdown(result: dict[str, Any]) -> str:
    """The per-task table (seed 000's Table 2 shape): No. | Task | Instruction | Success."""
    lines = ["| No. | Task | Instruction | Success |", "|---:|---|---|---:|"]
    for i, (name, rate) in enumerate(result["per_task"].items(), 1):
        fails = result["failures"][name]
        cell = f"{100 * rate:.0f}%" + (f" ({fails} failure{'s' if fails != 1 else ''})" if fails else "")
        lines.append(f"| {i} | {name} | {instruction_cell(result['instructions'][name])} | {cell} |")
    lines.append(f"| | **Total success rate** | | **{result['mean_success']:.3f}** |")
    lines.append(f"| | **Total episodes** | | **{result['episodes']}** |")
    return "\n".join(lines) + "\n"


def instruction_cell(texts: str | list[str], shown: int = 3) -> str:
    """A task's instructions for its table cell: the distinct texts its episodes were given, the first
    `shown` of them and how many more."""
    if isinstance(texts, str):
        return texts
    distinct = list(dict.fromkeys(texts))
    more = len(distinct) - shown
    return "; ".join(distinct[:shown]) + (f" (+{more} more)" if more > 0 else "")


def evaluate(cfg: TrainConfig, bridge: Bridge, model: VLA, params, *, episodes_per_task: int | None = None,
             out_dir: str | None = None, gifs: bool = True, mesh=None) -> dict[str, Any]:
    """Closed-loop success of `params` on the config's suite (see the module docstring).

    Writes eval.json / eval.md / GIFs into `out_dir` when given. -> the result dict.
    """
    result, frames = run_episodes(cfg, bridge, model, params, episodes_per_task=episodes_per_task)
    if out_dir:
        write_outputs(out_dir, result, frames if gifs else None)
    return result


def run_episodes(cfg: TrainConfig, bridge: Bridge, model: VLA, params, *,
                 episodes_per_task: int | None = None) -> tuple[dict[str, Any], np.ndarray]:
    """The episodes of `evaluate`, nothing written. -> (result, frames uint8 [S, T*g, h, w, 3]: the GIF
    episodes, g = `result['gif_episodes']` per task, tasks in `result['per_task']` order)."""
    from vlajax.data.demos import make_env
    from vlajax.envs import registry
    from vlajax.envs.tabletop import tasks as tasks_lib

    if cfg.env.randomize:  # evaluation runs the training distribution (a robustness eval passes levels)
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, randomize=""))
    try:
        names = registry.tasks_for(cfg.env)
    except KeyError as e:
        raise ConfigError(str(e.args[0])) from None
    e_per = episodes_per_task or cfg.sft.eval_episodes_per_task
    task_ids = np.asarray([registry.ALL_ENVS.index(n) for n in names], np.int32)
    env_cfg = cfg.env
    if tuple(sorted(env_cfg.cameras)) != bridge.cameras and not set(bridge.cameras) <= set(env_cfg.cameras):
        raise ConfigError(f"the policy reads cameras {bridge.cameras}; env.cameras={env_cfg.cameras} lacks some")
    camera = "agentview" if "agentview" in env_cfg.cameras else env_cfg.cameras[0]
    cache_key = (env_cfg, tuple(names), bridge, model.cfg, cfg.sft.eval_replan_steps, camera)
    if cache_key not in _RUNNERS:  # periodic evals (SFT, RL) reuse the env and the jitted loop
        env = make_env(cfg, names[0])
        _RUNNERS.clear()
        _RUNNERS[cache_key] = jax.jit(functools.partial(
            closed_loop, env, bridge, model, episode_length=env_cfg.episode_length,
            replan=cfg.sft.eval_replan_steps, camera=camera, instructions=True))
    run = _RUNNERS[cache_key]
    keys = episode_keys(cfg.seed, task_ids, e_per)
    per_episode_task = np.repeat(task_ids, e_per)
    g = min(GIF_EPISODES, e_per)
    gif_index = np.asarray([i * e_per + k for i in range(len(names)) for k in range(g)], np.int32)
    t0 = time.perf_counter()
    success, steps, frames, iid = jax.device_get(run(params, keys, jnp.asarray(per_episode_task),
                                                     jnp.asarray(gif_index)))
    seconds = time.perf_counter() - t0
    success = np.asarray(success).reshape(len(names), e_per)
    steps = np.asarray(steps).reshape(len(names), e_per)
    iid = np.asarray(iid).reshape(len(names), e_per)
    texts = {n: [tasks_lib.TASKS[t].instructions()[int(k)] for k in iid[i]]
             for i, (n, t) in enumerate(zip(names, task_ids))}
    per_task = {n: float(success[i].mean()) for i, n in enumerate(names)}
    result = {
        "suite": env_cfg.suite if not env_cfg.task else env_cfg.task,
        "per_task": per_task,
        "mean_success": float(np.mean(list(per_task.values()))),
        "episodes": int(success.size),
        "episodes_per_task": e_per,
        "failures": {n: int((~success[i]).sum()) for i, n in enumerate(names)},
        "instructions": {n: list(dict.fromkeys(v)) for n, v in texts.items()},  # distinct, in episode order
        "episode_instructions": texts,
        "instruction_templates": {n: tasks_lib.TASKS[t].template for n, t in zip(names, task_ids)},
        "seeds": {"seed": cfg.seed, "stream": EVAL_STREAM,
                  "rule": "episode e of task t: fold_in(fold_in(key(seed), stream + t), e)",
                  "task_index": {n: int(t) for n, t in zip(names, task_ids)}},
        "episode_success": {n: success[i].astype(int).tolist() for i, n in enumerate(names)},
        "episode_steps": {n: steps[i].tolist() for i, n in enumerate(names)},
        "episode_length": env_cfg.episode_length,
        "replan_steps": cfg.sft.eval_replan_steps or bridge.model.action_horizon,
        "seconds": round(seconds, 1),
        "gif_episodes": g,
        "physics": registry.physics_impl(env_cfg),
    }
    return result, np.asarray(frames)


def write_outputs(out_dir: str, result: dict[str, Any], frames: np.ndarray | None) -> None:
    """eval.json / eval.md into `out_dir`, and one GIF per task from `run_episodes`' frames (None: no GIFs)."""
    write_report(out_dir, "eval", result, table_markdown(result))
    if frames is not None:
        g = result["gif_episodes"]
        for i, n in enumerate(result["per_task"]):
            ok, steps = result.get("episode_success", {}).get(n), result.get("episode_steps", {}).get(n)
            clip = outcome_clip(frames[:, i * g:(i + 1) * g], None if ok is None else ok[:g],
                                None if steps is None else steps[:g])  # [S, H, g*W, 3]
            write_gif(os.path.join(out_dir, n.replace("/", "__") + ".gif"), clip, fps=25)


def result_dir(cfg: TrainConfig, stem: str, step: int) -> str:
    """Where `eval` writes the result of checkpoint step `step` (`stem`: `<suite>` or `robustness-<suite>`):
    `--out DIR` -> `DIR/<run name>-<stem>-step-<N>`; else a command line's `--output-dir` (one that differs
    from the preset's) -> `<output_dir>/eval/<run name>-<stem>-step-<N>`; else beside the evaluated run,
    `<run>/eval/<stem>-step-<N>`. `<run>` is the directory holding the checkpoint directory, its name the
    run name (the checkpoint directory's own name when it is not `checkpoints`). Then `free_dir`."""
    from vlajax.config.schema import get_config, preset_names

    ckpt = os.path.abspath(os.path.expanduser(checkpoint_dir(cfg)))
    if os.path.basename(ckpt).isdigit() and os.path.isfile(os.path.join(os.path.dirname(ckpt), "policy.json")):
        ckpt = os.path.dirname(ckpt)  # a step directory <dir>/<step>
    run_dir = os.path.dirname(ckpt)
    run = os.path.basename(run_dir if os.path.basename(ckpt) == "checkpoints" else ckpt) or "run"
    own = f"{stem}-step-{step}" if os.path.basename(ckpt) == "checkpoints" else f"{run}-{stem}-step-{step}"
    preset_out = get_config(cfg.name).output_dir if cfg.name in preset_names() else cfg.output_dir
    if cfg.logging.eval_out:
        out = os.path.join(os.path.expanduser(cfg.logging.eval_out), f"{run}-{stem}-step-{step}")
    elif os.path.abspath(cfg.output_dir) not in (os.path.abspath(preset_out), run_dir):
        out = os.path.join(cfg.output_dir, "eval", f"{run}-{stem}-step-{step}")
    else:
        out = os.path.join(run_dir, "eval", own)
    return free_dir(out, cfg.logging.overwrite)


def free_dir(path: str, overwrite: bool = False) -> str:
    """`path`, or when it already holds files and not `overwrite`, the first of `path-2`, `path-3`, ... that
    does not: an evaluation never replaces another's result unless told to (`--overwrite`)."""
    if overwrite:
        return path
    candidate, n = path, 1
    while os.path.isdir(candidate) and os.listdir(candidate) or os.path.isfile(candidate):
        n += 1
        candidate = f"{path}-{n}"
    if candidate != path:
        log.warning("eval: %s already holds a result; writing %s (--overwrite replaces it)", path, candidate)
    return candidate


def write_report(out_dir: str, stem: str, result: dict[str, Any], markdown: str) -> None:
    """`<out_dir>/<stem>.json` (the result) and `<stem>.md` (its table), each written atomically."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, f"{stem}.json"), result)
    write_text(os.path.join(out_dir, f"{stem}.md"), markdown)


# model fields `eval --model.X` may change on a loaded policy: how it samples, not its parameters
SAMPLING_FIELDS = ("flow_x1", "num_denoise_steps")


def sampling_overrides(cfg: TrainConfig, bridge: Bridge, model):
    """(bridge, model) with the `SAMPLING_FIELDS` the command line set (they differ from the preset's)
    replacing the checkpoint's (`policy.json`); e.g. `--model.flow-x1 zeros` on an imported openpi policy."""
    from vlajax.config.schema import get_config, preset_names
    from vlajax.models.build import build_model
    from vlajax.policies.run_files import inference_model

    if cfg.name not in preset_names():
        return bridge, model
    preset = get_config(cfg.name).model
    changed = {f: getattr(cfg.model, f) for f in SAMPLING_FIELDS
               if getattr(cfg.model, f) != getattr(preset, f) and getattr(cfg.model, f) != getattr(bridge.model, f)}
    if not changed:
        return bridge, model
    log.info("eval: the command line's %s replace the checkpoint's %s", changed,
             {f: getattr(bridge.model, f) for f in changed})
    m = dataclasses.replace(bridge.model, **changed)
    return dataclasses.replace(bridge, model=m), inference_model(build_model(m))


def run(cfg: TrainConfig) -> int:
    """The `eval` command. SIGTERM / Ctrl-C while loading, compiling or running the episodes abandons the
    evaluation at once and writes nothing (exit 0, one line); during the writing it finishes the report."""
    def episodes():
        compile_cache.enable(cfg.compilation_cache_dir)
        bridge, model, params, train_cfg, step = load_run_policy(cfg)
        bridge, model = sampling_overrides(cfg, bridge, model)
        result, frames = run_episodes(cfg, bridge, model, params)
        result["checkpoint"] = {"dir": checkpoint_dir(cfg), "step": step, "preset": train_cfg.name}
        return result_dir(cfg, (cfg.env.task or cfg.env.suite).replace("/", "__"), step), result, frames

    out_dir, result, _ = stop_cleanly(episodes, lambda got: write_outputs(*got), report="eval.json")
    print_result(result, out_dir)
    return 0


EVAL_PHASE = "the evaluation (loading, compiles, episodes)"  # what a stop line names before the report


def stop_cleanly(episodes: Callable[[], tuple], write: Callable[[tuple], None], *, report: str,
                 cleanup: Callable[[], str] | None = None) -> tuple:
    """The stop contract of every `eval` route (`eval --checkpoint`, `--robustness`, `--policy-server`):
    `got = episodes()` (loading, compiles, episodes; -> a tuple whose first item is the output directory),
    then `write(got)` (the report, atomically). The first SIGTERM / Ctrl-C inside `episodes` abandons the
    evaluation at once: `cleanup()` (e.g. close a server connection; -> what it did, for the line), one line
    (`eval: SIGTERM during the evaluation (...): abandoned it; nothing written (...); exit 0`), exit 0, nothing
    written. One during `write` lets the report finish, then one line (`... during writing the report:
    finished it in DIR; exit 0`) and the command ends normally. -> `got`."""
    from vlajax.training.preemption import stop_request

    did: list[str] = []

    def clean() -> None:
        if cleanup is not None:
            did.append(cleanup())

    def kept() -> str:
        article = "an" if report[0] in "aeiou" else "a"
        return "; ".join([*did, f"nothing written ({article} {report} is always a whole evaluation; a rerun runs "
                                "every episode)"])

    with stop_request("eval") as stop:
        with stop.abandonable(EVAL_PHASE, kept, clean):
            got = episodes()
        write(got)  # a signal now: the report is finished first
        if stop.local():
            stop.report("writing the report", f"finished it in {got[0]}")
    return got


def print_result(result: dict[str, Any], out_dir: str) -> None:
    """The `eval` command's output: the per-task table, then one JSON line (success, episodes, out_dir)."""
    print(table_markdown(result), flush=True)
    print(json.dumps({"mean_success": result["mean_success"], "per_task": result["per_task"],
                      "episodes": result["episodes"], "out_dir": out_dir}), flush=True)
