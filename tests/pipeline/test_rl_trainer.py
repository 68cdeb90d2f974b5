"""The pipeline's RL trainer (`vlajax.rl.async_workload.Trainer`) on the real MLP actor and learner.

Streaming (a gradient per arriving micro-batch, one update per global batch) equals the
non-streaming update over the concatenated micro-batches; decoupled PPO with recomputed
proximal log-probs equals plain PPO when the behaviour policy is the current one; streaming
refuses learner settings that are not one update per global batch.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vlajax.config.presets  # noqa: F401
from vlajax.config.schema import ConfigError, get_config
from vlajax.pipeline.buffer import Trajectory
from vlajax.rl import actors, learner, mlp_policy
from vlajax.rl.async_workload import Trainer
from vlajax.training.train_state import TrainState

N, H, A, OBS = 16, 2, 4, 32


def _setup(micro_batches=2, **rl):
    cfg = get_config("rl-debug")
    rl = {"normalize_advantages": "none", **rl}
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, update_epochs=1, num_minibatches=1,
                                                          micro_batches=micro_batches, **rl))
    model = mlp_policy.MLPActorCritic(action_horizon=H, action_dim=A, hidden=(16, 16), value_hidden=(16, 16))
    actor = actors.mlp_actor(model)
    params = model.init(jax.random.key(0), jnp.zeros((1, OBS)))["params"]
    state = TrainState.create(params, learner.make_optimizer(cfg.rl), jax.random.key(1))
    return cfg, actor, state


def _items(actor, params, k=2):
    """k micro-batches of N decisions, old log-probs/values scored by `params` (fresh on-policy data)."""
    out = []
    for i in range(k):
        r = jax.random.split(jax.random.key(10 + i), 4)
        b = {"obs": jax.random.normal(r[0], (N, OBS)), "task_id": jnp.zeros((N,), jnp.int32),
             "actions": jax.random.normal(r[1], (N, H, A)), "action_mask": jnp.ones((N, H), bool),
             "advantages": jax.random.normal(r[2], (N,)), "returns": jax.random.normal(r[3], (N,)),
             "mask": jnp.ones((N,), jnp.float32).at[0].set(0.0)}
        logp, _, value = actor.logp_value(params, b, jax.random.key(0))
        out.append(Trajectory(b | {"old_logp": logp, "old_values": value}, np.zeros((1,), int), N, N))
    return out


def _close(a, b, tol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def test_streaming_equals_one_update_over_the_concatenated_micro_batches():
    cfg, actor, state = _setup()
    items = _items(actor, state.params)
    dev = jax.devices()[0]
    s_stream, m_stream = Trainer(cfg, actor, dev, True, True)(jax.tree.map(jnp.copy, state), iter(items))
    s_batch, m_batch = Trainer(cfg, actor, dev, False, True)(jax.tree.map(jnp.copy, state), iter(items))
    assert int(s_stream.step) == int(s_batch.step) == 1
    _close(s_stream.params, s_batch.params)
    assert abs(m_stream["policy_loss"] - m_batch["policy_loss"]) < 1e-5
    # ... and it moved the parameters (a gradient that is zero would make this test vacuous)
    assert max(float(jnp.max(jnp.abs(a - b))) for a, b in
               zip(jax.tree.leaves(s_stream.params), jax.tree.leaves(state.params))) > 1e-4


@pytest.mark.parametrize("streaming", [False, True])
def test_decoupled_ppo_equals_ppo_when_behaviour_is_current(streaming):
    cfg, actor, state = _setup()
    items = _items(actor, state.params)
    dev = jax.devices()[0]
    s_prox, _ = Trainer(cfg, actor, dev, streaming, False)(jax.tree.map(jnp.copy, state), iter(items))
    s_plain, _ = Trainer(cfg, actor, dev, streaming, True)(jax.tree.map(jnp.copy, state), iter(items))
    _close(s_prox.params, s_plain.params)


def test_decoupled_ppo_differs_when_rollout_was_stale():
    """Behaviour log-probs from other params: the recomputed proximal anchor changes the update."""
    cfg, actor, state = _setup()
    other = jax.tree.map(lambda x: x + 0.05, state.params)
    items = _items(actor, other)
    dev = jax.devices()[0]
    s_prox, _ = Trainer(cfg, actor, dev, False, False)(jax.tree.map(jnp.copy, state), iter(items))
    s_plain, _ = Trainer(cfg, actor, dev, False, True)(jax.tree.map(jnp.copy, state), iter(items))
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(s_prox.params),
                                                              jax.tree.leaves(s_plain.params)))
    assert diff > 1e-7


def test_streaming_keeps_maxima_and_honours_target_kl():
    cfg, actor, state = _setup()
    dev = jax.devices()[0]
    moved = jax.tree.map(lambda x: x + 0.05, state.params)
    stale = _items(actor, moved)  # behaviour log-probs of other params: behaviour weights != 1
    # decoupled PPO (recomputed proximal log-probs) reports behaviour_weight_max
    _, m_stream = Trainer(cfg, actor, dev, True, False)(jax.tree.map(jnp.copy, state), iter(stale))
    _, m_batch = Trainer(cfg, actor, dev, False, False)(jax.tree.map(jnp.copy, state), iter(stale))
    maxima = [k for k in m_stream if k.endswith("_max") and k in m_batch]
    assert maxima and all(abs(m_stream[k] - m_batch[k]) < 1e-5 for k in maxima)  # max, not a sum
    assert m_stream["behaviour_weight_max"] > 1.0
    # Stale data (params moved since scoring): approx KL > 0; a tiny target_kl skips the update
    # in both paths alike.
    cfg_kl = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, target_kl=1e-9))
    for streaming in (True, False):
        s, m = Trainer(cfg_kl, actor, dev, streaming, True)(jax.tree.map(jnp.copy, state), iter(stale))
        assert m["kl_stopped"] == 1.0 and m["updates"] == 0.0, (streaming, m)
        _close(s.params, state.params, tol=0)


@pytest.mark.parametrize("streaming", [False, True])
def test_kl_penalty_to_the_frozen_initial_policy_is_zero_first_then_grows(streaming):
    cfg, actor, state = _setup(kl_coef=0.5)
    items = _items(actor, state.params)
    dev = jax.devices()[0]
    trainer = Trainer(cfg, actor, dev, streaming, True, ref_params=jax.tree.map(jnp.copy, state.params))
    kls = []
    for _ in range(4):
        state, m = trainer(state, iter(items))
        kls.append(m["kl_ref"])
    assert kls[0] < 1e-7  # update 0: the policy is the reference
    assert kls[-1] > 1e-5 and kls[-1] > kls[1] > kls[0]  # it moves away, and the penalty sees it
    with pytest.raises(ValueError, match="ref_params"):
        Trainer(cfg, actor, dev, streaming, True)


def test_streaming_refuses_advantages_standardized_over_the_global_batch():
    for mode in ("batch", "minibatch"):
        cfg, actor, _ = _setup(normalize_advantages=mode)
        with pytest.raises(ConfigError, match="normalize_advantages"):
            Trainer(cfg, actor, None, True, True)


def test_streaming_refuses_several_updates_per_global_batch():
    cfg, actor, _ = _setup(micro_batches=2)
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, update_epochs=2),
                              pipeline=dataclasses.replace(cfg.pipeline, require_batches=2))
    with pytest.raises(ConfigError, match="one update per global batch"):
        Trainer(cfg, actor, None, True, True)
