"""`model.target_conditioning`: the action head reads a target [B, D]; inference (the heads'
sample / log-prob / value functions) feeds it the model's own aux prediction; off = unchanged."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, ModelConfig
from vlajax.models import heads, policy
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA

BASE = ModelConfig(name="tiny", aux_target="grasp_place")


def _setup(head: str, value_head: str = "none"):
    on = dataclasses.replace(BASE, action_head=head, target_conditioning=True, value_head=value_head)
    model = VLA(on)
    obs = fake_observation(jax.random.key(0), 3, on)
    variables = jax.jit(model.init)(jax.random.key(1), obs)
    return model, variables, obs


def _head(model, variables, obs, target):
    """The head's output for an explicit target (flow: the deterministic ODE chunk from x_1 = 0)."""
    c = model.cfg
    _, cache = model.apply(variables, obs, method=VLA.prefix)
    if c.action_head == "tokens":
        return model.apply(variables, cache, method=VLA.action_logits, target=target)[0]
    x = jnp.zeros((obs.batch_size, c.action_horizon, c.action_dim))
    return model.apply(variables, cache, x, jnp.ones((obs.batch_size,)), method=VLA.velocity, target=target)[0]


@pytest.mark.slow  # ~100 s per head on 2 shared cores (compiles)
@pytest.mark.parametrize("head", ["flow", "tokens"])
def test_inference_conditions_on_the_predicted_target(head):
    model, variables, obs = _setup(head, value_head="expert")
    hidden, cache = model.apply(variables, obs, method=VLA.prefix)
    pred = model.apply(variables, hidden, cache.segment_ids > 0, method=VLA.predicted_target)
    assert pred.shape == (3, 4)
    np.testing.assert_array_equal(pred, model.apply(variables, hidden, cache.segment_ids > 0, method=VLA.aux_target))
    with_pred = _head(model, variables, obs, pred)
    other = _head(model, variables, obs, pred + 1.0)
    assert float(jnp.abs(with_pred - other).max()) > 1e-4  # the target changes the head's output
    out = model.apply(variables, obs)  # __call__ conditions on the prediction too
    np.testing.assert_allclose(out["v" if head == "flow" else "logits"], with_pred, rtol=1e-5, atol=1e-6)
    # policy.sample (eval / RL / serving) == the head conditioned on the prediction, not on another target
    if head == "tokens":
        s = policy.sample(model, variables, obs, jax.random.key(2), deterministic=True)
        np.testing.assert_array_equal(s.tokens, jnp.argmax(with_pred, -1))
        assert not np.array_equal(s.tokens, jnp.argmax(other, -1))
    else:
        cfg = dataclasses.replace(model.cfg, flow_x1="zeros", num_denoise_steps=1)
        m1 = VLA(cfg)
        s = policy.sample(m1, variables, obs, jax.random.key(2), deterministic=True)
        np.testing.assert_allclose(s.actions, -with_pred, rtol=1e-5, atol=1e-6)  # x_0 = x_1 - v (t: 1 -> 0)
    lp = policy.log_prob(model, variables, obs, policy.sample(model, variables, obs, jax.random.key(2)))
    assert lp["log_prob"].shape == (3,)
    assert heads.value(model, variables, obs).shape == (3,)


def test_stop_gradient_between_the_prediction_and_the_head():
    model, variables, obs = _setup("flow")
    g = jax.grad(lambda p: jnp.sum(policy.sample(model, {"params": p}, obs, jax.random.key(2),
                                                 deterministic=True).actions ** 2))(variables["params"])
    assert all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(g["aux_out"]))
    assert max(float(jnp.abs(x).max()) for x in jax.tree.leaves(g["target_in"])) > 0


def test_the_head_refuses_a_missing_or_unexpected_target():
    model, variables, obs = _setup("flow")
    with pytest.raises(ValueError, match="needs `target`"):
        _head(model, variables, obs, None)
    off = VLA(BASE)
    v_off = off.init(jax.random.key(1), obs)
    with pytest.raises(ValueError, match="target_conditioning is off"):
        _head(off, v_off, obs, jnp.zeros((3, 4)))
    with pytest.raises(ConfigError, match="model.target_conditioning needs model.aux_target"):
        ModelConfig(name="tiny", target_conditioning=True)


@pytest.mark.slow  # ~100 s per head on 2 shared cores (compiles)
@pytest.mark.parametrize("head", ["flow", "tokens"])
def test_off_is_unchanged(head):
    """No `target_in` parameter when off; a conditioned model whose projection is zero gives bit-identical
    samples, log-probs and values to the unconditioned one with the same other weights."""
    model, variables, obs = _setup(head, value_head="expert")
    off = VLA(dataclasses.replace(model.cfg, target_conditioning=False))
    v_off = off.init(jax.random.key(1), obs)
    assert "target_in" not in v_off["params"] and "target_in" in variables["params"]
    params = {k: v for k, v in variables["params"].items() if k != "target_in"}
    zeroed = {"params": {**params, "target_in": jax.tree.map(jnp.zeros_like, variables["params"]["target_in"])}}
    a = policy.sample(off, {"params": params}, obs, jax.random.key(2))
    b = policy.sample(model, zeroed, obs, jax.random.key(2))
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.log_prob, b.log_prob)
    np.testing.assert_array_equal(a.value, b.value)
