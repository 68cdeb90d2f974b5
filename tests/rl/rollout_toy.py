"""A tiny jittable env with the tabletop env's contract (reset_task, success, episode info), so
rollout and loop tests compile in seconds instead of minutes.

Point reaching in 2-D: the point starts uniformly in [-1, 1]^2, the goal is the task's corner
(task 0: (0.5, 0.5), task 1: (-0.5, -0.5)) plus a random offset; each low-level step moves the
point by `0.2 * clip(a[:2], -1, 1)` and pays `-|x - g|`, plus 10 on success (|x - g| < 0.15),
which ends the episode. obs float32 [6] = x, g, one-hot task; with `pixels=True` the tabletop's
pixels dict instead: `{'pixels/agentview': uint8 [16, 16, 3]` (point red, goal green),
`'state': [8]` (x, g, zeros), `'instruction_id': []}`.
"""

import jax
import jax.numpy as jnp

from vlajax.envs.base import Env, State
from vlajax.envs.wrappers import ActionChunkWrapper, EpisodeWrapper, VmapWrapper
from vlajax.rl.rollout import SuiteEnv

OBS_DIM, ACTION_DIM = 6, 4
CORNERS = jnp.asarray([[0.5, 0.5], [-0.5, -0.5]])


IMAGE = 16


class PointEnv(Env):
    """One env; `task_id` (maybe traced) picks the goal corner."""

    def __init__(self, pixels: bool = False):
        self.pixels = pixels

    @property
    def action_size(self) -> int:
        return ACTION_DIM

    def reset(self, rng, observe=True):
        return self.reset_task(rng, jnp.int32(0))

    def reset_task(self, rng, task_id, observe=True):
        rng, k_x, k_g = jax.random.split(rng, 3)
        x = jax.random.uniform(k_x, (2,), minval=-1.0, maxval=1.0)
        g = CORNERS[task_id] + jax.random.uniform(k_g, (2,), minval=-0.2, maxval=0.2)
        episode = {"task_id": jnp.asarray(task_id, jnp.int32), "instruction_id": jnp.int32(0), "goal": g}
        data = {"x": x}
        z = jnp.float32(0.0)
        return State(data, self._obs(x, episode), z, z, {"success": z}, {"rng": rng, "episode": episode})

    def observe(self, state):
        return state.replace(obs=self._obs(state.data["x"], state.info["episode"]))

    def step(self, state, action, observe=True):
        self.check_action(action)
        x = state.data["x"] + 0.2 * jnp.clip(action[:2], -1.0, 1.0)
        dist = jnp.linalg.norm(x - state.info["episode"]["goal"])
        success = (dist < 0.15).astype(jnp.float32)
        reward = -dist + 10.0 * success
        return state.replace(data={"x": x}, obs=self._obs(x, state.info["episode"]), reward=reward, done=success,
                             metrics={"success": success})

    def _obs(self, x, episode):
        g = episode["goal"]
        if not self.pixels:
            return jnp.concatenate([x, g, jax.nn.one_hot(episode["task_id"], 2)]).astype(jnp.float32)
        grid = (jnp.arange(IMAGE) + 0.5) / IMAGE * 2.0 - 1.0
        blob = lambda p: jnp.exp(-((grid[None, :] - p[0]) ** 2 + (grid[:, None] - p[1]) ** 2) / 0.05)
        img = jnp.stack([blob(x), blob(g), jnp.zeros((IMAGE, IMAGE))], -1)
        state = jnp.concatenate([x, g, jnp.zeros(4)]).astype(jnp.float32)
        privileged = jnp.concatenate([x, g, jax.nn.one_hot(episode["task_id"], 2)]).astype(jnp.float32)
        return {"pixels/agentview": (255 * img).astype(jnp.uint8), "state": state,
                "instruction_id": episode["instruction_id"], "privileged": privileged}


def make_env(num_envs, action_horizon=2, episode_length=12, task_ids=(0, 1), pixels=False):
    env = SuiteEnv(PointEnv(pixels), task_ids)
    return VmapWrapper(ActionChunkWrapper(EpisodeWrapper(env, episode_length), action_horizon), num_envs)
