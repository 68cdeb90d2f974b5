"""Scripted experts for every task: vectorizable waypoint state machines in JAX.

An expert reads the privileged simulator state (cube, square and button poses) and returns an
action `[4]` plus its own small state (`phase`, steps spent in it). Each family is a list of
phases; a phase gives an end-effector target, a gripper command, and when to move on.

    act = experts.make_expert(env)                # one env; vmap for a batch
    es = experts.init_state()                     # or jax.vmap over a batch
    action, es = act(state, es)

`scripts/expert_success.py [--episodes 50]` prints the per-task success table.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from vlajax.envs import registry
from vlajax.envs.tabletop import scene, tasks

OPEN, CLOSE = -1.0, 1.0
HIGH = 0.11  # travel height of the fingertips (m)
GRASP_Z = 0.008  # fingertip height when grasping a cube on the table
GRIP_OFFSET = 0.012  # cube centre above the fingertips when grasped
PUSH_SPEED = 0.8  # action magnitude while pushing (a fast push makes the cube slide past the square)


def init_state() -> dict[str, jax.Array]:
    return {"phase": jnp.int32(0), "steps": jnp.int32(0)}


NUM_PHASES = 8


def _pad(rows):
    """Give every row a speed limit (default 1) and repeat the last row up to NUM_PHASES."""
    rows = [r if len(r) == 6 else (*r, 1.0) for r in rows]
    return rows + [rows[-1]] * (NUM_PHASES - len(rows))


def _phases(params, ee, cubes, zone, button):
    """Per-phase arrays for the task's family: targets `[P, 3]`, grips `[P]`, tolerances `[P]`,
    minimum steps `[P]`, extra exit conditions `[P]`, speed limits `[P]`, restart-from-phase-0
    conditions `[P]`, last phase `[]` (P = NUM_PHASES; all families
    are built and the task's is selected, so `params` may be traced)."""
    tgt, ref = cubes[params["target"]], cubes[params["ref"]]
    at = lambda xy, z: jnp.concatenate([xy, jnp.reshape(z, (1,))])
    never, inf = jnp.bool_(False), jnp.float32(jnp.inf)

    def pick_and_place(goal_xy, place_z):
        return _pad([
            (at(tgt[:2], HIGH), OPEN, 0.012, 0, never),
            (at(tgt[:2], GRASP_Z), OPEN, 0.006, 0, never),
            (at(tgt[:2], GRASP_Z), CLOSE, inf, 8, never),
            (at(ee[:2], HIGH), CLOSE, 0.015, 0, never),
            (at(goal_xy, HIGH), CLOSE, 0.008, 0, never),
            (at(goal_xy, place_z), CLOSE, 0.006, 3, never),
            (at(goal_xy, place_z), OPEN, inf, 8, never),
            (at(goal_xy, HIGH), OPEN, 0.0, 0, never),
        ])

    pick = pick_and_place(zone, scene.CUBE_HALF - GRIP_OFFSET + 0.006)
    stack = pick_and_place(ref[:2], ref[2] + 2 * scene.CUBE_HALF - GRIP_OFFSET + 0.008)
    d = zone - tgt[:2]
    d = d / jnp.maximum(jnp.linalg.norm(d), 1e-6)
    start = tgt[:2] - d * (scene.CUBE_HALF + 0.03)
    contact = tgt[:2] - d * (scene.CUBE_HALF + 0.008)  # fingertip centre when pushing through the cube centre
    off = ee[:2] - contact
    off_line = jnp.linalg.norm(off - d * jnp.dot(off, d)) > 0.015  # lost the cube: approach again
    # Done once the cube is near the centre or has passed it along the push direction.
    pushed = (jnp.linalg.norm(tgt[:2] - zone) < 0.015) | (jnp.dot(tgt[:2] - zone, d) > 0.0)
    push = _pad([
        (at(start, HIGH), CLOSE, 0.012, 0, never),
        (at(start, 0.012), CLOSE, 0.008, 0, never),
        (at(contact + d * 0.03, 0.012), CLOSE, 0.0, 0, pushed, PUSH_SPEED),
        (at(ee[:2] - d * 0.03, 0.012), CLOSE, inf, 4, never),
        (at(ee[:2], HIGH), CLOSE, 0.0, 0, never),
    ])
    press = _pad([
        (at(button, HIGH), CLOSE, 0.008, 0, never),
        (at(button, 0.0), CLOSE, inf, 12, never),
        (at(button, HIGH), CLOSE, 0.0, 0, never),
    ])
    families = (pick, push, stack, press)  # tasks.FAMILIES order
    last = jnp.asarray([NUM_PHASES - 1, 4, NUM_PHASES - 1, 2], jnp.int32)
    f = params["family"]
    col = lambda i, dtype=jnp.float32: jnp.stack(
        [jnp.stack([jnp.asarray(r[i], dtype) for r in rows]) for rows in families])[f]
    no = jnp.bool_(False)
    restart = jnp.stack([no, off_line, no, no])[f] & (jnp.arange(NUM_PHASES) == 2)
    return col(0), col(1), col(2), col(3, jnp.int32), col(4, bool), col(5), restart, last[f]


def make_expert(env):
    """`act(state, expert_state) -> (action [4], expert_state)` for one env of `env.unwrapped`'s task."""
    base = env.unwrapped
    max_delta = base.config.max_delta

    def act(state, es):
        ee, _, cubes, zone, button, _ = base._parts(state.data)
        params = tasks.task_params(state.info["episode"]["task_id"])
        targets, grips, tols, mins, extra, speed, restart, last = _phases(params, ee, cubes, zone, button)
        p = es["phase"]
        target = targets[p]
        err = target - ee
        move = jnp.clip(err / max_delta, -speed[p], speed[p])
        reached = (jnp.linalg.norm(err) < tols[p]) | extra[p] | ((tols[p] == jnp.inf) & (es["steps"] >= mins[p]))
        advance = reached & (es["steps"] >= mins[p]) & (p < last)
        phase = jnp.where(restart[p], 0, jnp.where(advance, p + 1, p))
        new = {"phase": phase, "steps": jnp.where(advance | restart[p], 0, es["steps"] + 1)}
        return jnp.concatenate([move, grips[p][None]]), new

    return act


def rollout(env, rng: jax.Array, task_id: jax.Array, num_episodes: int, episode_length: int):
    """Run the expert on `num_episodes` envs of task `task_id` for `episode_length` steps (no auto-reset).

    Returns (states with leaves `[T, N, ...]`, actions `[T, N, 4]`, success `[N]` bool: ever succeeded).
    """
    act = jax.vmap(make_expert(env))
    reset = jax.vmap(lambda k: env.unwrapped.reset_task(k, task_id))
    step = jax.vmap(env.step)

    def body(carry, _):
        state, es, ever = carry
        action, es = act(state, es)
        nxt = step(state, action)
        ever = ever | (nxt.metrics["success"] > 0)
        return (nxt, es, ever), (state, action)

    state = reset(jax.random.split(rng, num_episodes))
    es = jax.vmap(lambda _: init_state())(jnp.arange(num_episodes))
    ever = jnp.zeros((num_episodes,), bool)
    (_, _, ever), (states, actions) = jax.lax.scan(body, (state, es, ever), None, length=episode_length)
    return states, actions, ever


def success_table(names, num_episodes: int, episode_length: int, seed: int = 0) -> dict[str, float]:
    """Expert success rate per task over `num_episodes` randomized episodes (state observations)."""
    out = {}
    env = registry.load(names[0], obs_mode="state")  # one compiled rollout; the task id is an input
    run = jax.jit(functools.partial(rollout, env, num_episodes=num_episodes, episode_length=episode_length))
    for i, name in enumerate(names):
        t0 = time.time()
        task_id = jnp.int32(registry.ALL_ENVS.index(name))
        _, _, ever = run(jax.random.PRNGKey(seed + i), task_id)
        out[name] = float(jnp.mean(ever))
        print(f"{name:32s} {out[name] * 100:6.1f}%   ({time.time() - t0:.1f} s)", flush=True)
    return out
