"""The env contract: a stateless `Env` with `reset(rng) -> State` and `step(state, action) -> State`.

It follows brax / MuJoCo Playground closely enough that brax's own training wrappers and PPO run
on it unchanged: `State` exposes `pipeline_state` (an alias of `data`) and `replace` accepts it.
Everything that varies per episode (the RNG, randomized colours/poses/brightness, the instruction
id) lives in `State.info`; the env object holds only constants and is never mutated.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from mujoco import mjx

Observation = jax.Array | dict[str, jax.Array]


@struct.dataclass
class State:
    """One env's (or a batch's) state. Leaves carry any leading batch axes `*b`.

    data: `mjx.Data`; obs: `[*b, obs_size]` (state mode) or a dict of arrays (pixels mode);
    reward/done: `[*b]` float32; metrics: dict of `[*b]` float32 (`reward/<term>`, `success`);
    info: dict with `rng` `[*b, 2]` and the per-episode parameters under `info["episode"]`.
    """

    data: mjx.Data
    obs: Observation
    reward: jax.Array
    done: jax.Array
    metrics: dict[str, jax.Array] = struct.field(default_factory=dict)
    info: dict[str, Any] = struct.field(default_factory=dict)

    @property
    def pipeline_state(self) -> mjx.Data:
        """brax's name for `data` (brax's `AutoResetWrapper` reads and writes it)."""
        return self.data


def _replace(self: State, **changes: Any) -> State:
    """`dataclasses.replace` that also accepts brax's `pipeline_state=` for `data=`."""
    if "pipeline_state" in changes:
        changes["data"] = changes.pop("pipeline_state")
    return dataclasses.replace(self, **changes)


State.replace = _replace  # flax.struct installs its own `replace`; extend it with the alias.


class Env(abc.ABC):
    """A stateless MJX env. Subclasses set `mj_model`/`mjx_model` in `__init__` and never mutate."""

    @abc.abstractmethod
    def reset(self, rng: jax.Array) -> State:
        """`rng` `[2]` (a raw PRNG key) -> the first `State` of a new randomized episode."""

    @abc.abstractmethod
    def step(self, state: State, action: jax.Array) -> State:
        """`action` `[action_size]` float in [-1, 1] (values outside are clipped) -> next `State`."""

    @property
    @abc.abstractmethod
    def action_size(self) -> int:
        """Number of action dimensions."""

    @functools.cached_property
    def observation_size(self) -> int | dict[str, tuple[int, ...]]:
        """From `jax.eval_shape(reset)`: an int for array observations, else `{key: shape}`."""
        obs = jax.eval_shape(self.reset, jax.random.PRNGKey(0)).obs
        if isinstance(obs, dict):
            return {k: v.shape for k, v in obs.items()}
        return obs.shape[-1]

    @property
    def backend(self) -> str:
        return "mjx"

    @property
    def unwrapped(self) -> Env:
        return self

    def check_action(self, action: jax.Array) -> None:
        """Raise at trace time unless `action` is a float array of shape `[action_size]`."""
        check_action(action, (self.action_size,))


def check_action(action: Any, shape: tuple[int, ...]) -> None:
    """Fail loudly (at trace time) on a wrong action shape or a non-float dtype."""
    if not hasattr(action, "shape") or tuple(action.shape) != tuple(shape):
        raise ValueError(f"action must have shape {shape}, got {getattr(action, 'shape', type(action))}")
    if not jnp.issubdtype(action.dtype, jnp.floating):
        raise TypeError(f"action must be a float array, got dtype {action.dtype}")
