"""Advantage estimators over chunk-level decisions, registered by name.

One decision = one action chunk. Arrays are time-major: `[T, B]` is T decisions of B envs.
The low-level math (`gae`, `group_relative`, `rloo`, `zero_variance_groups`) takes plain
arrays; the registered estimators (`ADVANTAGE_ESTIMATORS`, `get_estimator`) wrap them behind
one signature, `estimator(config, AdvantageInputs) -> AdvantageResult`, so a trainer picks
one by name (`RLConfig.advantage`). Everything here is jittable; group sizes are static.

Conventions
- `done = terminated | truncated`. `terminated`: the MDP ended (success or failure), the
  future is worth 0. `truncated`: a time limit cut the episode, the future is still worth
  `V(final observation)`, so GAE bootstraps from it.
- `next_values[k]` is `V(s_{k+1})`, the value of the observation reached by decision k. On a
  step that ended the episode it is the value of the *final* observation (before any
  auto-reset); `bootstrap_values` builds it from the per-step values.
- GRPO layout: env `b` belongs to group `b // group_size` (groups are contiguous); all envs of
  a group were reset from the same seed. Each env runs one episode in the window, and `valid`
  marks its decisions (False after the episode ended).
"""

from __future__ import annotations

from collections.abc import Callable

import flax.struct
import jax
import jax.numpy as jnp

from vlajax.config.schema import ConfigError, RLConfig

__all__ = [
    "gae", "bootstrap_values", "episode_returns", "group_relative", "rloo", "zero_variance_groups",
    "AdvantageInputs", "AdvantageResult", "ADVANTAGE_ESTIMATORS", "register_estimator", "get_estimator",
    "estimator_name",
]


# ----------------------------------------------------------------------------------------
# GAE (PPO)
# ----------------------------------------------------------------------------------------


def bootstrap_values(values: jax.Array, last_value: jax.Array, final_values: jax.Array | None = None,
                     done: jax.Array | None = None) -> jax.Array:
    """`V(s_{k+1})` for every decision.

    values: [T, B] `V(s_k)`; last_value: [B] `V(s_T)` (the observation after the last decision);
    final_values: [T, B] or None, `V` of the final observation of the episode that ended at k
    (only read where `done[k]`); done: [T, B] bool. Returns [T, B].

    Without `final_values` the next row is used on done steps too: right only when envs do not
    auto-reset (a finished env keeps its final observation), wrong for truncation with
    auto-reset, where row k+1 already shows the next episode.
    """
    shifted = jnp.concatenate([values[1:], last_value[None]], axis=0)
    if final_values is None:
        return shifted
    if done is None:
        raise ValueError("bootstrap_values: final_values needs done")
    return jnp.where(done, final_values, shifted)


def gae(rewards: jax.Array, values: jax.Array, next_values: jax.Array, terminated: jax.Array,
        done: jax.Array, gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalized advantage estimation over decisions.

    rewards, values, next_values: float [T, B]; terminated, done: bool [T, B].
    `delta_k = r_k + gamma * next_values_k * (1 - terminated_k) - values_k`,
    `A_k = delta_k + gamma * lam * (1 - done_k) * A_{k+1}` with `A_T = 0`.
    Returns `(advantages [T, B], returns [T, B])`, `returns = advantages + values` (the value
    targets). A truncated step (done, not terminated) bootstraps from `next_values`, and its
    advantage does not leak into the previous episode's decisions (or vice versa).
    """
    rewards, values, next_values = (jnp.asarray(x, jnp.float32) for x in (rewards, values, next_values))
    not_term = 1.0 - jnp.asarray(terminated, jnp.float32)
    not_done = 1.0 - jnp.asarray(done, jnp.float32)
    deltas = rewards + gamma * next_values * not_term - values

    def step(carry, x):
        delta, nd = x
        adv = delta + gamma * lam * nd * carry
        return adv, adv

    _, adv = jax.lax.scan(step, jnp.zeros_like(deltas[0]), (deltas, not_done), reverse=True)
    return adv, adv + values


# ----------------------------------------------------------------------------------------
# Group-relative estimators (GRPO, RLOO)
# ----------------------------------------------------------------------------------------


def episode_returns(rewards: jax.Array, valid: jax.Array) -> jax.Array:
    """rewards: [T, B]; valid: bool [T, B] -> undiscounted return of each env's episode, [B]."""
    return jnp.sum(jnp.where(valid, rewards, 0.0), axis=0)


def _groups(returns: jax.Array, group_size: int) -> jax.Array:
    (b,) = returns.shape
    if group_size < 1 or b % group_size:
        raise ValueError(f"{b} rollouts do not split into groups of {group_size}")
    return jnp.asarray(returns, jnp.float32).reshape(b // group_size, group_size)


def zero_variance_groups(returns: jax.Array, group_size: int) -> tuple[jax.Array, jax.Array]:
    """Groups whose returns are all equal carry no signal.

    returns: [B] (contiguous groups of `group_size`). Returns `(keep [B] bool, num_dropped
    int32 [])`: `keep` is False for every rollout of a zero-variance group. A group of one
    rollout always has zero variance.
    """
    r = _groups(returns, group_size)
    flat = jnp.max(r, axis=1) == jnp.min(r, axis=1)  # exact: no tolerance to tune
    keep = jnp.repeat(~flat, group_size)
    return keep, jnp.sum(flat).astype(jnp.int32)


def group_relative(returns: jax.Array, group_size: int, eps: float = 1e-6,
                   std_normalize: bool = True) -> jax.Array:
    """GRPO advantages: `A_i = (R_i - mean_group(R)) / (std_group(R) + eps)`.

    returns: [B], contiguous groups of `group_size` -> advantages [B]. The std is the unbiased
    one (ddof=1), as in verl, TRL and tunix. `std_normalize=False` gives Dr. GRPO's `R_i - mean`.
    A zero-variance group gets exactly 0 (not `rounding error / eps`).
    """
    r = _groups(returns, group_size)
    mean = jnp.mean(r, axis=1, keepdims=True)
    adv = r - mean
    if std_normalize and group_size > 1:
        adv = adv / (jnp.std(r, axis=1, keepdims=True, ddof=1) + eps)
    flat = jnp.max(r, axis=1, keepdims=True) == jnp.min(r, axis=1, keepdims=True)
    return jnp.where(flat, 0.0, adv).reshape(-1)


def rloo(returns: jax.Array, group_size: int) -> jax.Array:
    """REINFORCE leave-one-out: `A_i = R_i - mean_{j != i} R_j` within each group.

    returns: [B], contiguous groups of `group_size >= 2` -> advantages [B]
    (= `G / (G - 1) * (R_i - mean_group(R))`; exactly 0 for a zero-variance group).
    """
    if group_size < 2:
        raise ValueError("rloo needs group_size >= 2")
    r = _groups(returns, group_size)
    others = (jnp.sum(r, axis=1, keepdims=True) - r) / (group_size - 1)
    flat = jnp.max(r, axis=1, keepdims=True) == jnp.min(r, axis=1, keepdims=True)
    return jnp.where(flat, 0.0, r - others).reshape(-1)


# ----------------------------------------------------------------------------------------
# The registry: one signature for every estimator
# ----------------------------------------------------------------------------------------


@flax.struct.dataclass
class AdvantageInputs:
    """What a rollout records per decision. All [T, B]; `values`/`next_values` may be None (GRPO)."""

    rewards: jax.Array  # float: sum of the chunk's low-level rewards
    terminated: jax.Array  # bool: the episode ended in a terminal state during this chunk
    done: jax.Array  # bool: terminated or truncated during this chunk
    valid: jax.Array  # bool: the decision was taken inside an episode (False after it ended)
    values: jax.Array | None = None  # float: V(s_k) recorded at rollout
    next_values: jax.Array | None = None  # float: V(s_{k+1}), final observation on done (bootstrap_values)


@flax.struct.dataclass
class AdvantageResult:
    """advantages, returns, mask: [T, B]; metrics: scalars (e.g. GRPO's dropped groups)."""

    advantages: jax.Array  # float
    returns: jax.Array  # float: value targets (GAE) or the episode return R_i broadcast (GRPO, RLOO)
    mask: jax.Array  # bool: decisions that enter the loss (valid and not filtered)
    metrics: dict  # name -> scalar array


Estimator = Callable[[RLConfig, AdvantageInputs], AdvantageResult]
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str):
    """Decorator: register `fn(config, inputs) -> AdvantageResult` under `name` (unique)."""

    def wrap(fn: Estimator) -> Estimator:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return wrap


def estimator_name(config: RLConfig) -> str:
    """`config.advantage`, with 'auto' resolved from the algorithm (ppo -> gae, grpo -> grpo)."""
    if config.advantage != "auto":
        return config.advantage
    return {"ppo": "gae", "grpo": "grpo"}[config.algo]


def get_estimator(name: str) -> Estimator:
    """The estimator registered as `name`; an unknown name raises `ConfigError` listing them."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(
            f"unknown advantage estimator {name!r}; available: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}"
        )
    return ADVANTAGE_ESTIMATORS[name]


@register_estimator("gae")
def _gae_estimator(config: RLConfig, x: AdvantageInputs) -> AdvantageResult:
    if x.values is None or x.next_values is None:
        raise ValueError("the 'gae' estimator needs values and next_values (a value head)")
    adv, ret = gae(x.rewards, x.values, x.next_values, x.terminated, x.done, config.gamma, config.gae_lambda)
    mask = jnp.asarray(x.valid, bool)
    return AdvantageResult(adv, ret, mask, {})


def _group_estimator(config: RLConfig, x: AdvantageInputs, advantage_fn) -> AdvantageResult:
    t, b = x.rewards.shape
    g = config.group_size
    ret = episode_returns(x.rewards, x.valid)
    adv = advantage_fn(ret)
    keep, dropped = zero_variance_groups(ret, g)
    mask = jnp.asarray(x.valid, bool)
    if config.filter_zero_advantage:
        mask = mask & keep[None, :]
    metrics = {"groups_dropped": dropped, "groups": jnp.asarray(b // g, jnp.int32)}
    return AdvantageResult(jnp.broadcast_to(adv, (t, b)), jnp.broadcast_to(ret, (t, b)), mask, metrics)


@register_estimator("grpo")
def _grpo_estimator(config: RLConfig, x: AdvantageInputs) -> AdvantageResult:
    fn = lambda r: group_relative(r, config.group_size, config.advantage_eps, config.group_std_normalize)
    return _group_estimator(config, x, fn)


@register_estimator("rloo")
def _rloo_estimator(config: RLConfig, x: AdvantageInputs) -> AdvantageResult:
    return _group_estimator(config, x, lambda r: rloo(r, config.group_size))
