"""A state-observation MLP actor-critic over action chunks (the brax-comparison policy).

Actor: obs [B, obs_dim] -> MLP -> mean of the chunk [B, H, action_dim]; a learned,
state-independent log-std [H, action_dim]; the policy is the diagonal Gaussian
`N(mean, exp(log_std)^2)` over the whole chunk (no tanh squashing: the env clips actions).
Critic: a separate MLP -> V(obs) [B]. One decision = one chunk, so a decision's log-prob is
the sum of the per-dim log-densities over the chunk's *executed* steps (`action_mask`
[B, H], when an episode ends mid-chunk).

Sampling and the learner compute log-probs with the same function on the same stored
actions, so at the first update on fresh data the importance ratio is exactly 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["MLPActorCritic", "ValueMLP", "gaussian_log_prob", "gaussian_entropy", "sample", "make_logp_value_fn"]

_LOG_2PI = math.log(2.0 * math.pi)


class _MLP(nn.Module):
    features: Sequence[int]
    out: int
    out_scale: float

    @nn.compact
    def __call__(self, x):
        for f in self.features:
            x = nn.tanh(nn.Dense(f, kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)))(x))
        return nn.Dense(self.out, kernel_init=nn.initializers.orthogonal(self.out_scale))(x)


class MLPActorCritic(nn.Module):
    """obs [B, obs_dim] -> (mean [B, H, A], log_std [H, A], value [B])."""

    action_horizon: int  # H: actions per chunk
    action_dim: int  # A: action dims
    hidden: Sequence[int] = (64, 64)  # actor hidden widths
    value_hidden: Sequence[int] = (64, 64)  # critic hidden widths
    init_log_std: float = -0.5  # initial log-std of every action dim
    min_log_std: float = -5.0  # the log-std is clipped into [min_log_std, max_log_std]
    max_log_std: float = 2.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        h, a = self.action_horizon, self.action_dim
        obs = jnp.asarray(obs, jnp.float32)
        mean = _MLP(tuple(self.hidden), h * a, 0.01, name="actor")(obs).reshape(*obs.shape[:-1], h, a)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (h, a))
        log_std = jnp.clip(log_std, self.min_log_std, self.max_log_std)
        value = _MLP(tuple(self.value_hidden), 1, 1.0, name="critic")(obs)[..., 0]
        return mean, log_std, value


class ValueMLP(nn.Module):
    """A critic alone: obs [B, obs_dim] -> value [B] (tanh MLP, orthogonal init; e.g. the privileged
    critic of a pixel policy, `rl.critic='privileged'`)."""

    hidden: Sequence[int] = (256, 256)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return _MLP(tuple(self.hidden), 1, 1.0, name="value")(jnp.asarray(obs, jnp.float32))[..., 0]


def gaussian_log_prob(actions: jax.Array, mean: jax.Array, log_std: jax.Array,
                      action_mask: jax.Array | None = None) -> jax.Array:
    """Chunk log-density. actions, mean: [B, H, A]; log_std: [H, A] (or broadcastable);
    action_mask: [B, H] executed steps or None -> [B]."""
    z = (actions - mean) * jnp.exp(-log_std)
    per = -0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI  # [B, H, A]
    per = jnp.sum(per, axis=-1)  # [B, H]
    if action_mask is not None:
        per = jnp.where(action_mask, per, 0.0)
    return jnp.sum(per, axis=-1)


def gaussian_entropy(log_std: jax.Array, batch_shape: tuple[int, ...],
                     action_mask: jax.Array | None = None) -> jax.Array:
    """Entropy of the chunk Gaussian over executed steps: sum of `0.5 * log(2 pi e) + log_std`.
    log_std: [H, A]; action_mask: [*batch_shape, H] or None -> [*batch_shape]."""
    per = jnp.sum(log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)  # [H]
    per = jnp.broadcast_to(per, (*batch_shape, per.shape[-1]))
    if action_mask is not None:
        per = jnp.where(action_mask, per, 0.0)
    return jnp.sum(per, axis=-1)


def sample(model: MLPActorCritic, params: Any, obs: jax.Array, rng: jax.Array,
           deterministic: bool = False) -> dict[str, jax.Array]:
    """One decision per env. obs [B, obs_dim] -> {'actions' [B, H, A], 'logp' [B], 'value' [B]}.

    `logp` is `gaussian_log_prob` of the returned actions: exactly what the learner recomputes.
    `deterministic` returns the mean (for evaluation); its `logp` is still the density there.
    """
    mean, log_std, value = model.apply({"params": params}, obs)
    noise = 0.0 if deterministic else jax.random.normal(rng, mean.shape, mean.dtype)
    actions = mean + jnp.exp(log_std) * noise
    return {"actions": actions, "logp": gaussian_log_prob(actions, mean, log_std), "value": value}


def make_logp_value_fn(model: MLPActorCritic):
    """The learner's `logp_value_fn` for this policy.

    Reads `batch['obs']` [N, obs_dim], `batch['actions']` [N, H, A] and, if present,
    `batch['action_mask']` [N, H]; returns `(logp [N], entropy [N], value [N])`.
    """

    def logp_value_fn(params: Any, batch: dict, rng: jax.Array):
        del rng  # the Gaussian's log-prob is deterministic
        mean, log_std, value = model.apply({"params": params}, batch["obs"])
        mask = batch.get("action_mask")
        logp = gaussian_log_prob(batch["actions"], mean, log_std, mask)
        entropy = gaussian_entropy(log_std, mean.shape[:-2], mask)
        return logp, entropy, value

    return logp_value_fn
