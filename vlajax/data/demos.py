"""`python -m vlajax.train demos --suite NAME --episodes-per-task N --out DIR`: scripted
demonstrations in MJX, written as a LeRobot v3.0 dataset. A LIBERO suite (`--suite libero_spatial`)
records LIBERO's scripted expert on its worker processes instead (`vlajax.libero.demos`).

For every task of the suite (or `--env.task`), batches of `env.num_envs` randomized episodes
run the task's scripted expert (`vlajax.envs.experts`) for up to `env.episode_length` control
steps in one jitted `lax.scan`, rendering the policy's cameras at `env.image_size`. An episode
is kept from its first frame up to and including the step at which the task succeeded (as in
LIBERO's demonstrations); episodes that never succeed are dropped and counted. Batches repeat
until `data.episodes_per_task` successful episodes per task exist (at most 4x that many tries).

Frames: `observation.images.<camera>` uint8 [h, w, 3] (PNG image features, or AV1 video with
`--data.video`), `observation.state` float32 [8] (the env's proprioception), `action` float32 [4]
(what the expert sent), the instruction as the frame's task (`task_index`), fps = the control
rate. Writing is atomic (`vlajax.data.writer`): a killed run leaves only `<DIR>.partial-*`.

Episode seeds: task i, batch j use `fold_in(fold_in(key(seed), DEMO_STREAM + i), j)`; closed-loop
eval draws from a different stream, so no evaluation episode replays a demonstration's layout.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.data.build import dataset_dir
from vlajax.data.lerobot import DatasetError
from vlajax.data.writer import LeRobotWriter, policy_features
from vlajax.envs import experts, registry
from vlajax.envs.tabletop import tasks as tasks_lib
from vlajax.shared import compile_cache
from vlajax.shared.robots import INSTRUCTION_ID, STATE, image_key
from vlajax.training.logging import PLAIN_LINES, Progress

log = logging.getLogger(__name__)

DEMO_STREAM = 1000  # rng stream offset of demonstrations (eval uses vlajax.evaluation.closed_loop.EVAL_STREAM)
BASE_CONTROL_HZ = 50  # TabletopConfig: 5 physics steps of 4 ms per control step


def make_env(cfg: TrainConfig, task: str, obs_mode: str = "pixels"):
    """The unwrapped MJX env of `task` for the config's env section (pixels at env.image_size)."""
    over = registry.config_from_env_config(cfg.env)
    over["obs_mode"] = obs_mode
    return registry.load(task, over)


PERTURB_STREAM = 77  # rng stream (folded off an episode batch's key) of the demo perturbations
PERTURB_MIN_Z = 0.05  # perturbations start only with the fingertips above this height (m)


def perturbed_actions(rng: jax.Array, expert: jax.Array, left: jax.Array, move: jax.Array, prob: float,
                      max_steps: int, allowed: jax.Array | bool = True):
    """One control step of DART-style perturbations for a batch (see `DataConfig.demo_perturb_prob`).

    expert [N, 4] the expert's actions, left int32 [N] steps of the running perturbation still to go,
    move [N, 3] its direction -> (executed actions [N, 4], left, move). A new perturbation starts
    with probability `prob` where none runs and `allowed` (bool [N]): a random direction (unit xy,
    z in [-0.3, 0.3]) at full speed for 1..`max_steps` steps; the gripper command stays the expert's."""
    n = expert.shape[0]
    k_start, k_len, k_dir, k_z = jax.random.split(rng, 4)
    start = (left <= 0) & allowed & (jax.random.uniform(k_start, (n,)) < prob)
    angle = jax.random.uniform(k_dir, (n,), minval=0.0, maxval=2 * jnp.pi)
    new_move = jnp.stack([jnp.cos(angle), jnp.sin(angle), jax.random.uniform(k_z, (n,), minval=-0.3, maxval=0.3)], -1)
    move = jnp.where(start[:, None], new_move, move)
    left = jnp.where(start, jax.random.randint(k_len, (n,), 1, max_steps + 1), left)
    active = left > 0
    executed = jnp.where(active[:, None], jnp.concatenate([move, expert[:, 3:]], -1), expert)
    return executed, jnp.maximum(left - 1, 0), move


def swap_target(env, state, k: jax.Array):
    """One env's reset `state` with cube 0 and cube `k` (int32 [], may be traced; 0 = unchanged)
    exchanged: their poses and colours trade places, so the scene looks the same (the same three
    coloured cubes at the same places) while the task's target -- cube 0 on the object suite --
    is now the cube that stood at `k`'s place; the instruction is re-derived from the new colours
    (it names the new target's colour) and the cameras re-rendered. For `data.demo_target_swap`."""
    from mujoco import mjx

    idx = env.idx
    adr = jnp.asarray(idx.cube_qpos)
    a0, ak = adr[0] + jnp.arange(7), adr[k] + jnp.arange(7)
    qpos = state.data.qpos
    qpos = qpos.at[a0].set(qpos[ak]).at[ak].set(qpos[a0])
    data = state.data.replace(qpos=qpos)
    data = mjx.camlight(env.mjx_model, mjx.kinematics(env.mjx_model, data))
    ep = state.info["episode"]
    perm = jnp.arange(4).at[0].set(k).at[k].set(0)  # (cube0, cube1, cube2, zone) palette slots
    colors = ep["colors"][perm]
    geoms = jnp.asarray(idx.cube_geom)
    g0, gk = geoms[0], geoms[k]
    rgba = ep["geom_rgba"]
    rgba = rgba.at[g0].set(rgba[gk]).at[gk].set(rgba[g0])
    params = tasks_lib.task_params(ep["task_id"])
    ep = {**ep, "colors": colors, "geom_rgba": rgba, "instruction_id": tasks_lib.instruction_id(params, colors)}
    state = state.replace(data=data, info={**state.info, "episode": ep})
    return env.observe(state)


def expert_rollout(env, rng: jax.Array, task_id: jax.Array, num_episodes: int, episode_length: int,
                   perturb_prob: float = 0.0, perturb_steps: int = 6, target_swap: bool = False):
    """Expert episodes of task `task_id` (traced). Returns time-major arrays:
    obs {key: [T, N, ...]} (the observation *before* each action), actions [T, N, 4] (the expert's
    labels), success [T, N] bool (the task is solved after action t).

    `perturb_prob` > 0: the env executes `perturbed_actions` (random full-speed moves of 1..
    `perturb_steps` steps) while the recorded action stays the expert's, so the episode shows the
    expert recovering from states off its own path (DART, Laskey et al. 2017). A perturbation starts
    only while the fingertips are above `PERTURB_MIN_Z` (reaching, lifting, carrying), never during a
    grasp or a placement near the table.

    `target_swap`: episode i starts from scene i // 3 (its reset key) with cube i % 3 swapped in as
    the target (`swap_target`): every scene appears with each of its three cubes as the target, the
    instruction naming that cube's colour (object suite: the same first frame, three different
    trajectories, told apart only by the colour word)."""
    act = jax.vmap(experts.make_expert(env))
    reset = jax.vmap(lambda k: env.reset_task(k, task_id))
    step = jax.vmap(env.step)
    k_perturb = jax.random.fold_in(rng, PERTURB_STREAM)

    def body(carry, t):
        state, es, left, move = carry
        action, es = act(state, es)
        executed = action
        if perturb_prob > 0:
            high = state.data.qpos[:, env.idx.gripper_qpos[2]] > PERTURB_MIN_Z  # fingertip-centre z
            executed, left, move = perturbed_actions(jax.random.fold_in(k_perturb, t), action, left, move,
                                                     perturb_prob, perturb_steps, high)
        nxt = step(state, executed)
        return (nxt, es, left, move), (state.obs, action, nxt.metrics["success"] > 0)

    keys = jax.random.split(rng, num_episodes)
    if target_swap:
        i = jnp.arange(num_episodes)
        state = jax.vmap(lambda s, k: swap_target(env, s, k))(reset(keys[i // 3]), (i % 3).astype(jnp.int32))
    else:
        state = reset(keys)
    es = jax.vmap(lambda _: experts.init_state())(jnp.arange(num_episodes))
    left, move = jnp.zeros((num_episodes,), jnp.int32), jnp.zeros((num_episodes, 3))
    _, (obs, actions, success) = jax.lax.scan(body, (state, es, left, move), jnp.arange(episode_length))
    return obs, actions, success


GROUNDING_STREAM = 3000  # rng stream offset of `grounding_frames` scenes (demos: DEMO_STREAM, eval: EVAL_STREAM)


def first_frames(env, num_scenes: int, root: jax.Array, batch: int = 48) -> dict:
    """First frames of `num_scenes` object-suite scenes, each three times with each of its cubes the
    named target (`swap_target`: the same picture, another colour word). Scene s has reset key
    `fold_in(root, s)` and task `SUITES['object'][s % 4]`. M = 3 * num_scenes frames, frame i = scene
    i // 3 with cube i % 3 swapped in:

        images       {camera: uint8 [M, h, w, 3]}   the env's cameras (gripper at home)
        state        float32 [M, S]                  the env's proprioception at reset
        instructions list[str] [M]                   naming the target's colour
        cubes        float32 [M, 3, 2]                cube xy, cube 0 = the named target
        zone         float32 [M, 2]                   the square's xy (where the target goes)
        scene        int64 [M]
    """

    tids = np.asarray([registry.ALL_ENVS.index(n) for n in registry.SUITES["object"]], np.int32)
    cams = tuple(env.config.cameras)

    @jax.jit
    def make(keys, task_ids, ks):
        st = jax.vmap(lambda k, t: env.reset_task(k, t, observe=False))(keys, task_ids)  # swap_target renders
        st = jax.vmap(lambda s, k: swap_target(env, s, k))(st, ks)
        cubes = jnp.stack([st.data.qpos[:, a:a + 2] for a in env.idx.cube_qpos], 1)
        return (st.obs, st.info["episode"]["instruction_id"], cubes,
                st.data.mocap_pos[:, env.idx.zone_mocap, :2])

    out: dict[str, list] = {"state": [], "instructions": [], "cubes": [], "zone": [], "scene": [],
                            **{c: [] for c in cams}}
    m = 3 * num_scenes
    for start in range(0, m, batch):
        i = np.arange(start, start + batch)  # padded to a whole batch (one compile), cut below
        scene_i = i // 3
        keys = jax.vmap(lambda j: jax.random.fold_in(root, j))(jnp.asarray(scene_i))
        task_ids = tids[scene_i % len(tids)]
        obs, iid, cubes, zone = jax.device_get(make(keys, jnp.asarray(task_ids), jnp.asarray(i % 3, jnp.int32)))
        n = min(batch, m - start)
        for c in cams:
            out[c].append(obs[image_key(c)][:n])
        out["state"].append(np.asarray(obs[STATE][:n], np.float32))
        out["instructions"] += [tasks_lib.TASKS[int(t)].instructions()[int(k)] for t, k in zip(task_ids[:n], iid[:n])]
        out["cubes"].append(cubes[:n])
        out["zone"].append(zone[:n])
        out["scene"].append(scene_i[:n].astype(np.int64))
    cat = {k: (v if k == "instructions" else np.concatenate(v)) for k, v in out.items()}
    return {"images": {c: cat.pop(c) for c in cams}, **cat}


def check_grounding(cfg: TrainConfig) -> None:
    """ConfigError unless `data.grounding_fraction`'s frames fit the run: they train only
    `model.aux_target='grasp_place'` and are object-suite scenes (called by `vlajax.sft.loop` before anything
    compiles, and by `grounding_frames`)."""
    f = cfg.data.grounding_fraction
    if cfg.model.aux_target != "grasp_place":
        raise ConfigError(f"data.grounding_fraction={f} needs model.aux_target='grasp_place' (its frames train "
                          f"only that head), got {cfg.model.aux_target!r}")
    if cfg.env.suite != "object" and not cfg.env.task.startswith("object/"):
        raise ConfigError(f"data.grounding_fraction={f} renders object-suite scenes (a colour-named cube); "
                          f"env.suite={cfg.env.suite!r}, env.task={cfg.env.task!r}")


def grounding_frames(cfg: TrainConfig) -> dict:
    """`data.grounding_fraction`'s frames: `first_frames` of `data.grounding_scenes` object-suite scenes
    in the config's env (cameras, image size), scene s from key `fold_in(fold_in(key(seed),
    GROUNDING_STREAM), s)` -- never a demonstration's or an evaluation episode's layout."""
    check_grounding(cfg)
    env = make_env(cfg, "object/pick_red")
    root = jax.random.fold_in(jax.random.key(cfg.seed), GROUNDING_STREAM)
    t0 = time.perf_counter()
    frames = first_frames(env, cfg.data.grounding_scenes, root)
    log.info("grounding frames: %d scenes x 3 rendered in %.1f s", cfg.data.grounding_scenes,
             time.perf_counter() - t0)
    return frames


def episode_lengths(success: np.ndarray) -> np.ndarray:
    """success bool [T, N] -> frames to keep per episode [N]: up to the first success (0 = failed)."""
    hit = success.any(axis=0)
    first = np.argmax(success, axis=0)
    return np.where(hit, first + 1, 0).astype(np.int64)


def generate(cfg: TrainConfig, out: str, *, progress: str = "plain") -> dict:
    """Write the dataset at `out`. Returns a summary (episodes, frames, success rate per task)."""

    try:
        names = registry.tasks_for(cfg.env)
    except KeyError as e:
        raise ConfigError(str(e.args[0])) from None
    if cfg.data.demo_target_swap and any(not n.startswith("object/") for n in names):
        raise ConfigError("data.demo_target_swap is for the object suite (cube 0 is the colour-named target); "
                          f"got tasks {names}")
    if os.path.exists(out):
        raise ConfigError(f"--out {out} already exists; remove it or choose another directory")
    e = cfg.env
    n, want, cap = e.num_envs, cfg.data.episodes_per_task, e.episode_length
    env = make_env(cfg, names[0])
    cams = tuple(e.cameras)
    run = jax.jit(functools.partial(expert_rollout, env, num_episodes=n, episode_length=cap,
                                    perturb_prob=cfg.data.demo_perturb_prob,
                                    perturb_steps=cfg.data.demo_perturb_steps,
                                    target_swap=cfg.data.demo_target_swap))
    features = policy_features(cams, e.image_size, 8, env.action_size, video=cfg.data.video)
    fps = BASE_CONTROL_HZ // max(1, e.action_repeat)
    root = jax.random.key(cfg.seed)
    summary: dict = {"suite": e.suite, "tasks": {}, "episodes": 0, "frames": 0,
                     "perturb": {"prob": cfg.data.demo_perturb_prob, "steps": cfg.data.demo_perturb_steps},
                     "target_swap": cfg.data.demo_target_swap}
    t0 = time.perf_counter()
    with (LeRobotWriter(out, fps=fps, features=features, robot_type="vlajax_tabletop") as writer,
          Progress(len(names) * want, f"demos {e.suite}", progress, every=1, heartbeat_s=cfg.logging.heartbeat_s,
                   max_lines=PLAIN_LINES) as bar):
        for i, name in enumerate(names):
            task_id = registry.ALL_ENVS.index(name)
            instructions = tasks_lib.TASKS[task_id].instructions()
            kept = tried = succeeded = 0  # succeeded: expert successes among all `tried` episodes
            lengths_all = []
            j = 0
            while kept < want:
                if tried >= 4 * want:
                    raise RuntimeError(f"task {name}: the expert succeeded in only {kept} of {tried} episodes "
                                       f"within env.episode_length={cap}; raise it or check the expert")
                key = jax.random.fold_in(jax.random.fold_in(root, DEMO_STREAM + task_id), j)
                phase = (bar.phase(f"compiling the expert rollout ({n} envs, {cap} steps)") if i == j == 0
                         else contextlib.nullcontext())
                with phase:
                    obs, actions, success = jax.device_get(run(key, jnp.int32(task_id)))
                j += 1
                tried += n
                lengths = episode_lengths(np.asarray(success))
                succeeded += int(np.sum(lengths > 0))
                keep = np.flatnonzero(lengths > 0)[: want - kept]
                if len(keep) == 0:
                    continue
                bm = lambda x, keep=keep: np.swapaxes(np.asarray(x), 0, 1)[keep]  # time-major -> batch-major
                frames = {f"observation.images.{c}": bm(obs[image_key(c)]) for c in cams}
                frames["observation.state"] = bm(obs[STATE]).astype(np.float32)
                frames["action"] = bm(actions).astype(np.float32)
                iid = np.asarray(obs[INSTRUCTION_ID])[0, keep]
                writer.add_episodes(frames, lengths[keep], [instructions[int(k)] for k in iid])
                kept += len(keep)
                lengths_all += lengths[keep].tolist()
                bar.update(i * want + kept, {"task": i, "expert_success": succeeded / tried})
            summary["tasks"][name] = {"episodes": kept, "tried": tried, "expert_success": succeeded / tried,
                                      "mean_length": float(np.mean(lengths_all))}
            summary["episodes"] += kept
            summary["frames"] += int(np.sum(lengths_all))
            log.info("demos: %s: %d episodes (expert success %.0f%% of %d), mean length %.1f", name, kept,
                     100 * succeeded / tried, tried, np.mean(lengths_all))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["out"] = out
    return summary


def run(cfg: TrainConfig) -> int:
    """`python -m vlajax.train demos` on a tabletop suite (after `vlajax.preflight`, which refuses the LIBERO-only
    data.demo_* fields here)."""
    out = os.path.abspath(os.path.expanduser(dataset_dir(cfg)))
    compile_cache.enable(cfg.compilation_cache_dir)
    try:
        summary = generate(cfg, out, progress=cfg.logging.progress)
    except DatasetError as e:
        raise ConfigError(str(e)) from None
    print(json.dumps(summary), flush=True)
    return 0
