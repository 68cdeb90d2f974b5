"""Wrappers: vmap over a batch, episode length/truncation, auto-reset, action-chunk stepping.

Composition for RL on a batch of `B` envs with action chunks of `H` steps:

    env = wrap(TabletopEnv(...), episode_length=200, num_envs=B, action_horizon=H)
    state = env.reset(jax.random.split(rng, B))          # leaves [B, ...]
    state = env.step(state, actions)                     # actions [B, H, A]
    state.info["chunk_rewards"], state.info["chunk_dones"]  # [B, H] each

Wrappers hold only the inner env and constants; they never assign to env attributes, and all
bookkeeping lives in `State.info`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from mujoco import mjx

from vlajax.envs.base import Env, State, check_action


class Wrapper(Env):
    """Forwards everything to the inner env."""

    def __init__(self, env: Env):
        self.env = env

    def reset(self, rng: jax.Array, **kwargs) -> State:
        return self.env.reset(rng, **kwargs)

    def step(self, state: State, action: jax.Array, **kwargs) -> State:
        return self.env.step(state, action, **kwargs)

    @property
    def action_size(self) -> int:
        return self.env.action_size

    @property
    def observation_size(self):
        return self.env.observation_size

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.env, name)


def _where(done: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """`x` where `done` else `y`; `done` `[*b]` broadcasts over the trailing axes of `x`/`y`."""
    return jnp.where(done.reshape(done.shape + (1,) * (x.ndim - done.ndim)) > 0, x, y)


def select_data(done: jax.Array, x: mjx.Data, y: mjx.Data) -> mjx.Data:
    """Physics data `x` where `done` else `y`, per env: `done` bool or float (> 0) `[*b]`, the data's batch axes
    (`[]` inside `vmap`). MJX's own merge (`mjx.Data.where`): under MJX-Warp it leaves the fields Warp does not
    batch per world (the contact buffers, their counts) as `y`'s instead of selecting them per env. An env whose
    data is another pytree (the tests' toy envs) is merged leaf by leaf."""
    if not isinstance(x, mjx.Data):
        return jax.tree.map(lambda a, b: _where(done, a, b), x, y)
    done = done > 0
    merge = lambda d, a, b: b.where(d, a)  # noqa: E731 -- Data.where(done, other): other where done
    for _ in range(done.ndim):  # batch axes outside vmap: the scalar rule per env
        merge = jax.vmap(merge)
    return merge(done, x, y)


def select(done: jax.Array, x: State, y: State) -> State:
    """State `x` where `done` else `y`, per env (`done` `[*b]`, as `select_data`): the physics data merged by
    `select_data`, every other leaf by `jnp.where` broadcast over its trailing axes."""
    rest = jax.tree.map(lambda a, b: _where(done, a, b), x.replace(data=None), y.replace(data=None))
    return rest.replace(data=select_data(done, x.data, y.data))


class EpisodeWrapper(Wrapper):
    """Counts low-level steps in `info["steps"]`; at `episode_length` sets `done` and `info["truncation"]`."""

    def __init__(self, env: Env, episode_length: int):
        super().__init__(env)
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        self.episode_length = episode_length

    def reset(self, rng: jax.Array, **kwargs) -> State:
        state = self.env.reset(rng, **kwargs)
        zeros = jnp.zeros(rng.shape[:-1], jnp.float32)
        return state.replace(info={**state.info, "steps": zeros, "truncation": zeros})

    def step(self, state: State, action: jax.Array, **kwargs) -> State:
        state = self.env.step(state, action, **kwargs)
        steps = state.info["steps"] + 1
        out_of_time = steps >= self.episode_length
        truncation = jnp.where(out_of_time, 1.0 - state.done, 0.0)
        info = {**state.info, "steps": steps, "truncation": truncation}
        return state.replace(done=jnp.where(out_of_time, 1.0, state.done), info=info)


class ProgressRewardWrapper(Wrapper):
    """Potential-based shaping (Ng et al. 1999): `reward = success part + Phi(s') - Phi(s)`.

    `Phi(s)` is the sum of the env's shaped terms at `s` (the `reward/<term>` metrics, 0 after
    reset), so an episode's return telescopes to `success bonus + Phi(s_T)`: progress counts once,
    at the end, and hovering near the goal earns nothing (the plain shaped reward pays the terms at
    every step, which can outpay finishing when success ends the episode). Wrap the bare env,
    inside `EpisodeWrapper` / `ActionChunkWrapper`.
    """

    @staticmethod
    def _potential(state: State) -> jax.Array:
        terms = [v for k, v in state.metrics.items() if k.startswith("reward/")]
        return sum(terms) if terms else jnp.zeros_like(state.reward)

    def step(self, state: State, action: jax.Array, **kwargs) -> State:
        nxt = self.env.step(state, action, **kwargs)
        # env reward = success part + Phi(s'); subtract Phi(s)
        return nxt.replace(reward=nxt.reward - self._potential(state))


class AutoResetWrapper(Wrapper):
    """On `done`, the next `step` output is a fresh episode's first state.

    `full_reset=False` restores the episode's cached first state (cheap; brax-style: same initial
    state each time). `full_reset=True` calls `reset` with a new key split from `info["rng"]`, so every
    episode is newly randomized (costs a reset per step, selected with `where`). Either way the
    physics and episode parameters are selected first and the cameras rendered once, after.
    """

    def __init__(self, env: Env, full_reset: bool = True):
        super().__init__(env)
        self.full_reset = full_reset

    def reset(self, rng: jax.Array, **kwargs) -> State:
        state = self.env.reset(rng, **kwargs)
        if not self.full_reset:
            first = {"data": state.data, "episode": state.info["episode"]}
            state = state.replace(info={**state.info, "first": first})
        return state

    def step(self, state: State, action: jax.Array, observe: bool = True) -> State:
        info = dict(state.info)
        if "steps" in info:
            info["steps"] = jnp.where(state.done > 0, 0.0, info["steps"])
        state = self.env.step(state.replace(done=jnp.zeros_like(state.done), info=info), action, observe=False)
        done, info = state.done, dict(state.info)
        if self.full_reset:
            info["rng"], key = _split(info["rng"])
            fresh = self.env.reset(key, observe=False)
            first = {"data": fresh.data, "episode": fresh.info["episode"]}
        else:
            first = info["first"]
        info["episode"] = jax.tree.map(lambda x, y: _where(done, x, y), first["episode"], info["episode"])
        state = state.replace(data=select_data(done, first["data"], state.data), info=info)
        return self.env.observe(state) if observe else state


def _split(rng: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Split keys with any leading batch axes: `[*b, 2]` -> two `[*b, 2]`."""
    flat = rng.reshape(-1, rng.shape[-1])
    keys = jax.vmap(lambda k: jax.random.split(k, 2))(flat)
    return keys[:, 0].reshape(rng.shape), keys[:, 1].reshape(rng.shape)


class ActionChunkWrapper(Wrapper):
    """One `step` executes an action chunk `[H, A]` (an RL decision) as H low-level steps.

    After the first `done` inside a chunk the env is frozen (later actions are ignored), so the
    returned state is the terminal one and an outer `AutoResetWrapper` resets between chunks.
    Observations (camera images) are computed once, for the returned state, not at every step;
    the inner env must support `step(..., observe=False)` and `observe(state)` (TabletopEnv does).
    Writes `info["chunk_rewards"]` `[H]`, `info["chunk_dones"]` `[H]` (1 from the terminating step on)
    and `info["chunk_valid"]` `[H]` (1 for steps that were executed); `reward` is their sum.
    """

    def __init__(self, env: Env, action_horizon: int):
        super().__init__(env)
        if action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {action_horizon}")
        self.action_horizon = action_horizon

    def _with_chunk_info(self, state: State) -> State:
        h = jnp.zeros((self.action_horizon,), jnp.float32)
        return state.replace(info={**state.info, "chunk_rewards": h, "chunk_dones": h, "chunk_valid": h})

    def reset(self, rng: jax.Array, **kwargs) -> State:
        return self._with_chunk_info(self.env.reset(rng, **kwargs))

    def step(self, state: State, action: jax.Array, observe: bool = True) -> State:
        check_action(action, (self.action_horizon, self.env.action_size))
        chunk_keys = ("chunk_rewards", "chunk_dones", "chunk_valid")
        state = state.replace(info={k: v for k, v in state.info.items() if k not in chunk_keys})

        def body(carry, a):
            s, done = carry
            nxt = self.env.step(s, a, observe=False)  # render once, after the chunk
            nxt = select(done, s, nxt)
            reward = jnp.where(done > 0, 0.0, nxt.reward)
            valid = 1.0 - done
            done = jnp.maximum(done, nxt.done)
            return (nxt, done), (reward, done, valid)

        (state, _), (rewards, dones, valid) = jax.lax.scan(body, (state, state.done), action)
        info = {**state.info, "chunk_rewards": rewards, "chunk_dones": dones, "chunk_valid": valid}
        state = state.replace(reward=rewards.sum(), info=info)
        return self.env.observe(state) if observe else state


class VmapWrapper(Wrapper):
    """Vectorizes over a leading batch axis: `reset(rng [B, 2])`, `step(state, action [B, ...])`.

    If the inner env carries a Warp renderer, the batch must equal its `nworld` (checked here,
    because a mismatch makes MJX silently return `nworld` images).
    """

    def __init__(self, env: Env, num_envs: int):
        super().__init__(env)
        self.num_envs = num_envs
        renderer = getattr(env.unwrapped, "warp_renderer", None)
        if renderer is not None:
            renderer.check_batch(num_envs)

    def reset(self, rng: jax.Array, task_id: jax.Array | None = None, **kwargs) -> State:
        """rng [B, 2]; `task_id` int [B] (optional) is mapped with it: env i resets into task_id[i]."""
        if rng.ndim != 2 or rng.shape[0] != self.num_envs:
            raise ValueError(f"reset expects keys [num_envs={self.num_envs}, 2], got {rng.shape}")
        if task_id is None:
            return jax.vmap(functools.partial(self.env.reset, **kwargs))(rng)
        task_id = jnp.asarray(task_id, jnp.int32)
        if task_id.shape != (self.num_envs,):
            raise ValueError(f"reset expects task_id [num_envs={self.num_envs}], got {task_id.shape}")
        return jax.vmap(lambda r, t: self.env.reset(r, task_id=t, **kwargs))(rng, task_id)

    def step(self, state: State, action: jax.Array, **kwargs) -> State:
        if getattr(action, "shape", (None,))[0] != self.num_envs:
            raise ValueError(f"step expects actions with leading axis num_envs={self.num_envs}, got "
                             f"{getattr(action, 'shape', type(action))}")
        return jax.vmap(functools.partial(self.env.step, **kwargs))(state, action)

    def observe(self, state: State) -> State:
        return jax.vmap(self.env.observe)(state)


def wrap(
    env: Env,
    episode_length: int,
    num_envs: int,
    action_horizon: int | None = None,
    full_reset: bool = True,
) -> Env:
    """Episode length -> (action chunks) -> auto-reset -> vmap over `num_envs`."""
    env = EpisodeWrapper(env, episode_length)
    if action_horizon is not None:
        env = ActionChunkWrapper(env, action_horizon)
    env = AutoResetWrapper(env, full_reset=full_reset)
    return VmapWrapper(env, num_envs)
