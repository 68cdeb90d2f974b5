"""Shared test fixtures: a small MLP policy and a freshly "collected" batch for it."""

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.rl import mlp_policy
from vlajax.training.train_state import TrainState

OBS_DIM, H, ACT_DIM = 5, 3, 2


def make_policy():
    return mlp_policy.MLPActorCritic(action_horizon=H, action_dim=ACT_DIM, hidden=(16, 16), value_hidden=(16,))


def make_state(model, tx, seed=0):
    params = model.init(jax.random.key(seed), jnp.zeros((1, OBS_DIM)))["params"]
    return TrainState.create(params, tx, jax.random.key(seed + 1))


def collect(model, params, n, seed=0, valid_frac=0.85):
    """A batch of n decisions as a rollout would record it (logp and value from `sample`)."""
    rng = np.random.default_rng(seed)
    obs = jnp.asarray(rng.standard_normal((n, OBS_DIM)), jnp.float32)
    out = jax.jit(lambda p, o, k: mlp_policy.sample(model, p, o, k))(params, obs, jax.random.key(seed))
    mask = jnp.asarray(rng.random(n) < valid_frac, jnp.float32)
    return {
        "obs": obs,
        "actions": out["actions"],
        "old_logp": out["logp"],
        "old_values": out["value"],
        "advantages": jnp.asarray(rng.standard_normal(n), jnp.float32),
        "returns": out["value"] + jnp.asarray(rng.standard_normal(n), jnp.float32),
        "mask": mask,
    }
