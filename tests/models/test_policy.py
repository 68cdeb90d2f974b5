"""The head-agnostic policy API: sample -> log_prob round trip, deterministic mode, SFT loss."""

import dataclasses

import jax
import numpy as np
import pytest

from vlajax.config.schema import ModelConfig
from vlajax.models import policy
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA


@pytest.mark.parametrize("head", [dict(action_head="flow", flow_sampler="flow_sde"),
                                  dict(action_head="tokens", num_bins=16)], ids=["flow", "tokens"])
def test_sample_log_prob_roundtrip(head):
    cfg = dataclasses.replace(ModelConfig(), value_head="prefix", **head)
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), 2, cfg)
    variables = jax.jit(model.init)(jax.random.key(1), obs)
    out = jax.jit(lambda v, o, r: policy.sample(model, v, o, r))(variables, obs, jax.random.key(2))
    assert out.actions.shape == (2, 4, 7) and out.value.shape == (2,)
    re = jax.jit(lambda v, o, s: policy.log_prob(model, v, o, s))(variables, obs, out)
    np.testing.assert_allclose(re["log_prob"], out.log_prob, rtol=1e-5, atol=1e-4)
    det_fn = jax.jit(lambda v, o, r: policy.sample(model, v, o, r, deterministic=True))
    det = [det_fn(variables, obs, jax.random.key(k)) for k in (3, 4)]
    if cfg.action_head == "tokens":  # argmax does not depend on the rng
        np.testing.assert_array_equal(det[0].actions, det[1].actions)
    else:  # ODE: no stochastic step, zero log-prob
        assert np.all(np.asarray(det[0].sde_step) == -1) and np.all(np.asarray(det[0].log_prob) == 0)
    loss, metrics = jax.jit(lambda v, o, a, r: policy.sft_loss(model, v, o, a, r))(
        variables, obs, policy.clip_actions(out.actions), jax.random.key(5))
    assert np.isfinite(float(loss)) and metrics
