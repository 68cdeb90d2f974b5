"""The learner is generic over the policy: the VLA's flow head (flow_sde, log-probs recomputed
from the stored denoising chain, with the value head) and token head (stored tokens, no critic)
plug in through `logp_value_fn`, and on freshly sampled data the first update sees ratio 1."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ModelConfig, RLConfig
from vlajax.models import heads
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA
from vlajax.rl import learner
from vlajax.training.train_state import TrainState

N = 8  # decisions


def _flow_fn(model):
    def fn(params, batch, rng):
        v = {"params": params}
        out = heads.flow_chain_log_prob(model, v, batch["obs"], batch["chain"], batch["sde_step"])
        return out["log_prob"], out["entropy"], heads.value(model, v, batch["obs"])

    return fn


def _token_fn(model):
    def fn(params, batch, rng):
        out = heads.token_chunk_log_prob(model, {"params": params}, batch["obs"], batch["tokens"])
        return out["log_prob"], out["entropy"], None

    return fn


@pytest.mark.parametrize("head", ["flow_sde", "tokens"])
def test_vla_head_plugs_into_learner_with_ratio_one(head):
    if head == "flow_sde":
        mcfg = dataclasses.replace(ModelConfig(), flow_sampler="flow_sde", value_head="expert")
        cfg = RLConfig(update_epochs=1, num_minibatches=1, micro_batches=2, learning_rate=1e-3)
    else:
        mcfg = dataclasses.replace(ModelConfig(), action_head="tokens", num_bins=32)
        cfg = RLConfig(algo="grpo", group_size=4, update_epochs=1, num_minibatches=1, micro_batches=2,
                       learning_rate=1e-3)
    model = VLA(mcfg)
    obs = fake_observation(jax.random.key(0), N, mcfg)
    params = jax.jit(model.init)(jax.random.key(1), obs)["params"]
    state = TrainState.create(params, learner.make_optimizer(cfg), jax.random.key(2))
    rng = np.random.default_rng(0)
    batch = {"obs": obs, "advantages": jnp.asarray(rng.standard_normal(N), jnp.float32),
             "mask": jnp.ones((N,), jnp.float32)}
    if head == "flow_sde":
        s = jax.jit(lambda p, o, k: heads.flow_sample(model, {"params": p}, o, k))(params, obs, jax.random.key(3))
        fn = _flow_fn(model)
        batch |= {"chain": s.chain, "sde_step": s.sde_step, "old_logp": s.log_prob, "old_values": s.value,
                  "returns": s.value + 1.0}
    else:
        s = jax.jit(lambda p, o, k: heads.token_sample(model, {"params": p}, o, k))(params, obs, jax.random.key(3))
        fn = _token_fn(model)
        batch |= {"tokens": s.tokens, "old_logp": s.log_prob}

    # The learner's recomputation (micro-batches of 4) reproduces the rollout's log-probs. The
    # flow sampler evaluates every step inside a scan while the learner evaluates only step j, so
    # XLA may round differently: agreement to float32 rounding, not bit-identity.
    logp, _ = jax.jit(functools.partial(learner.recompute_log_probs, fn, chunks=2))(params, batch, jax.random.key(0))
    np.testing.assert_allclose(logp, batch["old_logp"], rtol=1e-5, atol=1e-4)

    new, m = jax.jit(functools.partial(learner.update, cfg, fn))(jax.random.key(4), state, batch)
    m = jax.device_get(m)
    learner.check_finite(m)
    assert m["updates"] == 1.0 and m["clip_frac"] == 0.0
    assert abs(m["ratio_mean"] - 1.0) < 1e-4 and m["approx_kl"] < 1e-8
    moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(params))]
    assert any(moved)
    if head == "tokens":
        assert "value_loss" not in m  # no critic for GRPO
    else:
        assert np.isfinite(m["value_loss"]) and m["explained_variance"] <= 1.0
