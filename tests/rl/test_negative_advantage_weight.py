"""`rl.negative_advantage_weight`: the policy loss's negative advantages scaled (0 = positive samples only)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax import train
from vlajax.config.schema import ConfigError, RLConfig
from vlajax.rl import losses as L


def _batch():
    # ratios r = [1.5, 0.5, 1.1, 0.7] (old log-probs 0), A = [1, 1, -2, -1], all valid
    logp = jnp.log(jnp.array([1.5, 0.5, 1.1, 0.7], jnp.float32))
    batch = {"old_logp": jnp.zeros(4), "advantages": jnp.array([1.0, 1.0, -2.0, -1.0]), "mask": jnp.ones(4, bool)}
    return logp, batch


@pytest.mark.parametrize("weight, expected", [
    # per-sample max(-r A, -clip(r, 0.8, 1.28) A):
    # w = 1: -1.28, -0.5, 2.2, 0.8          -> 1.22 / 4  = 0.305 (the usual loss)
    # w = 0.5 (A = [1, 1, -1, -0.5]): -1.28, -0.5, max(1.1, 1.1) = 1.1, max(0.35, 0.4) = 0.4 -> -0.28 / 4 = -0.07
    # w = 0 (A = [1, 1, 0, 0]): -1.28, -0.5, 0, 0 -> -1.78 / 4 = -0.445
    (1.0, 0.305), (0.5, -0.07), (0.0, -0.445),
])
def test_rl_loss_scales_negative_advantages_by_hand(weight, expected):
    logp, batch = _batch()
    cfg = RLConfig(algo="grpo", negative_advantage_weight=weight)
    loss, _ = jax.jit(functools.partial(L.rl_loss, cfg))(logp, None, None, batch)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_weight_zero_gives_no_gradient_to_negative_samples():
    logp, batch = _batch()
    grad = lambda w: jax.grad(lambda lp: L.rl_loss(RLConfig(algo="grpo", negative_advantage_weight=w),
                                                   lp, None, None, batch)[0])(logp)
    g0, g1 = grad(0.0), grad(1.0)
    np.testing.assert_allclose(g0[2:], 0.0)  # the negative-advantage samples: no push either way
    np.testing.assert_allclose(g0[:2], g1[:2])  # the positive ones exactly as in the usual loss
    # the usual loss does push s2 (inside the clip): d(-r A / 4)/d logp = -r A / 4 = 1.1 * 2 / 4 = 0.55
    # (s3, r = 0.7 < 0.8 with A < 0, is clipped, so its gradient is 0 in both)
    np.testing.assert_allclose(g1[2], 0.55, rtol=1e-5)


def test_weight_is_checked_in_config_and_on_the_command_line(capsys):
    with pytest.raises(ConfigError, match="negative_advantage_weight"):
        RLConfig(negative_advantage_weight=-0.1)
    with pytest.raises(ConfigError, match="negative_advantage_weight"):
        RLConfig(negative_advantage_weight=1.5)
    rc = train.main(["rl", "--preset", "rl-grpo-tokens", "--rl.negative-advantage-weight", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "negative_advantage_weight" in err[0]
