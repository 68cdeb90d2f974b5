"""The state-observation MLP actor-critic: shapes, Gaussian math, and ratio = 1 on fresh data."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tests.rl import float_tolerance
from tests.rl.common import ACT_DIM, OBS_DIM, H, collect, make_policy, make_state
from vlajax.config.schema import RLConfig
from vlajax.rl import learner, mlp_policy


def test_shapes_and_initial_std():
    model = make_policy()
    params = model.init(jax.random.key(0), jnp.zeros((1, OBS_DIM)))["params"]
    mean, log_std, value = model.apply({"params": params}, jnp.zeros((7, OBS_DIM)))
    assert mean.shape == (7, H, ACT_DIM) and log_std.shape == (H, ACT_DIM) and value.shape == (7,)
    np.testing.assert_allclose(log_std, -0.5)
    out = mlp_policy.sample(model, params, jnp.zeros((7, OBS_DIM)), jax.random.key(1))
    assert out["actions"].shape == (7, H, ACT_DIM) and out["logp"].shape == (7,)


def test_gaussian_log_prob_and_entropy_by_hand():
    # One decision, H = 2 steps, A = 1 dim, mean 0, log_std = [0, ln 2] (std 1 and 2), actions [1, 2].
    # log N(1; 0, 1) = -0.5 - 0.5 ln 2pi = -1.4189385
    # log N(2; 0, 2) = -0.5 * (2/2)^2 - ln 2 - 0.5 ln 2pi = -0.5 - 0.6931472 - 0.9189385 = -2.1120857
    # sum = -3.5310242; with only step 0 executed: -1.4189385
    a = jnp.array([[[1.0], [2.0]]])
    mean = jnp.zeros((1, 2, 1))
    log_std = jnp.array([[0.0], [math.log(2.0)]])
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    lp = mlp_policy.gaussian_log_prob(a, mean, log_std)
    np.testing.assert_allclose(lp, [-0.5 - half_log_2pi - 0.5 - math.log(2) - half_log_2pi], rtol=1e-6)
    lp0 = mlp_policy.gaussian_log_prob(a, mean, log_std, jnp.array([[True, False]]))
    np.testing.assert_allclose(lp0, [-0.5 - half_log_2pi], rtol=1e-6)
    # entropy = sum over dims of 0.5 ln(2 pi e) + log_std = 2 * 1.4189385 + ln 2 = 3.5310242
    ent = mlp_policy.gaussian_entropy(log_std, (1,))
    np.testing.assert_allclose(ent, [2 * (half_log_2pi + 0.5) + math.log(2)], rtol=1e-6)


def test_entropy_matches_monte_carlo():
    model = make_policy()
    params = model.init(jax.random.key(0), jnp.zeros((1, OBS_DIM)))["params"]
    obs = jnp.zeros((20000, OBS_DIM))
    out = mlp_policy.sample(model, params, obs, jax.random.key(3))
    _, ent, _ = mlp_policy.make_logp_value_fn(model)(params, {"obs": obs[:1], "actions": out["actions"][:1]}, None)
    np.testing.assert_allclose(-jnp.mean(out["logp"]), ent[0], rtol=0.02)


def test_learner_recomputes_recorded_log_probs_to_float32_rounding():
    """Fresh data, first update: recomputed log-probs equal the recorded ones to float32 rounding
    (`tests/rl/float_tolerance.py`: two XLA programs may reassociate the H*A-term sum differently,
    so the bound is (n - 1 + 4) ulps of sum|terms| per row, not bit equality), so r = 1 to rounding."""
    model = make_policy()
    fn = mlp_policy.make_logp_value_fn(model)
    cfg = RLConfig(update_epochs=1, num_minibatches=1, micro_batches=1, dual_clip=3.0)
    state = make_state(model, learner.make_optimizer(cfg))
    batch = collect(model, state.params, 64)  # sampled by a separately jitted rollout function, batch 64
    mean, log_std, _ = model.apply({"params": state.params}, batch["obs"])
    tol = float_tolerance.gaussian_rows(batch["actions"], mean, log_std)  # [64]
    assert tol.max() < 1e-4  # the bound itself stays a rounding bound (|logp| ~ 10 here)

    # Recomputed in different shapes (whole batch, 4 sequential chunks of 16).
    for chunks in (1, 4):
        logp, value = jax.jit(functools.partial(learner.recompute_log_probs, fn, chunks=chunks))(
            state.params, batch, jax.random.key(0))
        diff = np.abs(np.asarray(logp, np.float64) - np.asarray(batch["old_logp"], np.float64))
        assert np.all(diff <= tol), f"{int((diff > tol).sum())} rows beyond the bound; max {diff.max():.3g}"
        np.testing.assert_allclose(value, batch["old_values"], rtol=4 * float_tolerance.EPS32, atol=1e-6)

    # The learner's own first update sees r = 1 to rounding everywhere: nothing clipped.
    step = jax.jit(functools.partial(learner.update, cfg, fn))
    _, m = step(jax.random.key(0), state, batch)
    r_tol = 2 * tol.max()  # |exp(d) - 1| <= 2|d| for |d| < 1
    assert abs(float(m["ratio_mean"]) - 1.0) <= r_tol
    assert float(m["approx_kl"]) <= r_tol**2
    assert float(m["clip_frac"]) == 0.0 and float(m["dual_clip_frac"]) == 0.0
    assert float(m["updates"]) == 1.0


def test_action_mask_limits_log_prob_to_executed_steps():
    model = make_policy()
    fn = mlp_policy.make_logp_value_fn(model)
    state = make_state(model, optax.sgd(0.0))
    batch = collect(model, state.params, 4)
    full, _, _ = fn(state.params, batch, None)
    mask = jnp.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]], bool)
    part, ent, _ = fn(state.params, batch | {"action_mask": mask}, None)
    assert float(part[3]) == 0.0 and float(ent[3]) == 0.0
    np.testing.assert_array_equal(part[0], full[0])
    assert np.all(np.asarray(part[1:3]) > np.asarray(full[1:3]))  # fewer (negative) terms summed
