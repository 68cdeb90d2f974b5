"""GAE, GRPO, RLOO and the estimator registry on tiny examples worked by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, RLConfig
from vlajax.rl import advantages as A


def _gae_reference(r, v, nv, term, done, gamma, lam):
    """A plain Python loop over the definition, for random cross-checks."""
    t_len = r.shape[0]
    adv = np.zeros_like(r)
    nxt = np.zeros_like(r[0])
    for t in reversed(range(t_len)):
        delta = r[t] + gamma * nv[t] * (1 - term[t]) - v[t]
        nxt = delta + gamma * lam * (1 - done[t]) * nxt
        adv[t] = nxt
    return adv, adv + v


def test_gae_by_hand_no_end_termination_truncation():
    # gamma = lam = 0.5, so gamma * lam = 0.25. Three envs (columns), three decisions (rows):
    #   col 0: no episode end;  col 1: terminated at k=1;  col 2: truncated at k=1.
    # All columns: r = [1, 0, 2], V(s_k) = [0.5, 1.0, 1.5], V(s_3) = 2.0 (bootstrap).
    # Cols 1, 2 auto-reset after k=1, so row 2 is a new episode; V(final obs of k=1) = 7.0 (col 1)
    # and 4.0 (col 2).
    r = jnp.array([[1.0] * 3, [0.0] * 3, [2.0] * 3])
    v = jnp.array([[0.5] * 3, [1.0] * 3, [1.5] * 3])
    term = jnp.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], bool)
    done = jnp.array([[0, 0, 0], [0, 1, 1], [0, 0, 0]], bool)
    final = jnp.array([[0.0, 0.0, 0.0], [0.0, 7.0, 4.0], [0.0, 0.0, 0.0]])
    nv = A.bootstrap_values(v, jnp.full((3,), 2.0), final, done)
    # next values: col 0 [1.0, 1.5, 2.0]; col 1 [1.0, 7.0, 2.0]; col 2 [1.0, 4.0, 2.0]
    np.testing.assert_allclose(nv, [[1.0, 1.0, 1.0], [1.5, 7.0, 4.0], [2.0, 2.0, 2.0]])
    adv, ret = jax.jit(A.gae, static_argnums=(5, 6))(r, v, nv, term, done, 0.5, 0.5)
    # col 0: delta = [1 + .5*1 - .5, 0 + .5*1.5 - 1, 2 + .5*2 - 1.5] = [1.0, -0.25, 1.5]
    #        A2 = 1.5; A1 = -0.25 + .25*1.5 = 0.125; A0 = 1.0 + .25*0.125 = 1.03125
    # col 1: delta1 = 0 + .5*7*(1-1) - 1 = -1.0 (terminated: no bootstrap)
    #        A2 = 1.5; A1 = -1.0 (done: nothing from row 2); A0 = 1.0 + .25*(-1.0) = 0.75
    # col 2: delta1 = 0 + .5*4.0 - 1 = 1.0 (truncated: bootstrap from V(final obs) = 4)
    #        A2 = 1.5; A1 = 1.0; A0 = 1.0 + .25*1.0 = 1.25
    np.testing.assert_allclose(adv, [[1.03125, 0.75, 1.25], [0.125, -1.0, 1.0], [1.5, 1.5, 1.5]], rtol=1e-6)
    # returns = A + V
    np.testing.assert_allclose(ret, [[1.53125, 1.25, 1.75], [1.125, 0.0, 2.0], [3.0, 3.0, 3.0]], rtol=1e-6)


def test_gae_lambda_one_is_discounted_return_minus_value():
    # lam = 1, gamma = 0.9, no ends: A_0 = r0 + .9 r1 + .81 * V(s_2) - V(s_0)
    #   = 1 + .9*2 + .81*10 - 3 = 1 + 1.8 + 8.1 - 3 = 7.9
    r = jnp.array([[1.0], [2.0]])
    v = jnp.array([[3.0], [4.0]])
    nv = A.bootstrap_values(v, jnp.array([10.0]))
    z = jnp.zeros((2, 1), bool)
    adv, _ = A.gae(r, v, nv, z, z, 0.9, 1.0)
    np.testing.assert_allclose(adv[0, 0], 7.9, rtol=1e-6)


def test_gae_matches_reference_loop_on_random_data():
    rng = np.random.default_rng(0)
    t, b = 7, 5
    r, v, nv = (rng.standard_normal((t, b)).astype(np.float32) for _ in range(3))
    done = rng.random((t, b)) < 0.3
    term = done & (rng.random((t, b)) < 0.5)
    adv, ret = A.gae(r, v, nv, term, done, 0.97, 0.9)
    ref_adv, ref_ret = _gae_reference(r, v, nv, term, done, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_group_relative_by_hand():
    # Three groups of G = 3.
    #   g0 = [1, 0, 0]: mean 1/3; deviations [2/3, -1/3, -1/3]; sum of squares 4/9 + 1/9 + 1/9 = 2/3;
    #        unbiased var (2/3) / 2 = 1/3, std = 0.57735; A = [1.1547, -0.57735, -0.57735]
    #   g1 = [1, 1, 1]: zero variance -> exactly 0
    #   g2 = [0, 2, 4]: mean 2; deviations [-2, 0, 2]; var 8 / 2 = 4, std 2; A = [-1, 0, 1]
    ret = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 2.0, 4.0])
    adv = jax.jit(A.group_relative, static_argnums=1)(ret, 3)
    s = 1 / np.sqrt(3)
    np.testing.assert_allclose(adv, [2 / 3 / s, -1 / 3 / s, -1 / 3 / s, 0, 0, 0, -1, 0, 1], rtol=1e-5, atol=1e-6)
    # Dr. GRPO (no std): R - mean.
    np.testing.assert_allclose(A.group_relative(ret, 3, std_normalize=False),
                               [2 / 3, -1 / 3, -1 / 3, 0, 0, 0, -2, 0, 2], rtol=1e-6, atol=1e-7)


def test_zero_variance_group_gets_exact_zero_not_rounding_over_eps():
    # mean([0.1, 0.1, 0.1]) need not be exactly 0.1 in float32; (0.1 - mean) / 1e-6 would then be
    # a sizeable, meaningless number. The group is flat, so its advantages must be exactly 0.
    ret = jnp.array([0.1, 0.1, 0.1, 0.3, 0.3, 0.3], jnp.float32)
    assert np.all(np.asarray(A.group_relative(ret, 3)) == 0.0)
    assert np.all(np.asarray(A.rloo(ret, 3)) == 0.0)


def test_zero_variance_groups_mask_and_count():
    ret = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 4.0])
    keep, dropped = jax.jit(A.zero_variance_groups, static_argnums=1)(ret, 3)
    # groups: [1,0,0] keep, [1,1,1] drop, [0,0,0] drop, [0,2,4] keep
    np.testing.assert_array_equal(keep, [1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1])
    assert int(dropped) == 2


def test_rloo_by_hand():
    # g0 = [1, 0, 0]: A_i = R_i - mean of the others = [1 - 0, 0 - 0.5, 0 - 0.5] = [1, -0.5, -0.5]
    # g1 = [0, 2, 4]: [0 - 3, 2 - 2, 4 - 1] = [-3, 0, 3]  (= G/(G-1) * (R - mean) = 1.5 * [-2, 0, 2])
    adv = A.rloo(jnp.array([1.0, 0.0, 0.0, 0.0, 2.0, 4.0]), 3)
    np.testing.assert_allclose(adv, [1, -0.5, -0.5, -3, 0, 3], rtol=1e-6)
    with pytest.raises(ValueError, match="group_size >= 2"):
        A.rloo(jnp.ones(4), 1)


def test_group_size_must_divide():
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        A.group_relative(jnp.ones(6), 4)


def _grpo_inputs():
    # T = 2 decisions, B = 6 envs in 2 groups of 3. Env 2 ended after its first decision (valid
    # [1, 0]; its second-row reward 5 must not count). Episode returns R = sum of valid rewards:
    #   group 0: [1 + 0, 0 + 0, 1 + (5 invalid)] = [1, 0, 1];  group 1: [1, 1, 1] (flat -> dropped)
    rewards = jnp.array([[1.0, 0.0, 1.0, 0.5, 1.0, 0.0], [0.0, 0.0, 5.0, 0.5, 0.0, 1.0]])
    valid = jnp.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1]], bool)
    done = jnp.array([[0, 0, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    return A.AdvantageInputs(rewards=rewards, terminated=done, done=done, valid=valid)


def test_grpo_estimator_broadcasts_filters_and_counts():
    cfg = RLConfig(algo="grpo", group_size=3)
    res = jax.jit(A.get_estimator(A.estimator_name(cfg)), static_argnums=0)(cfg, _grpo_inputs())
    # group 0: R = [1, 0, 1], mean 2/3, deviations [1/3, -2/3, 1/3], unbiased var (1/9 + 4/9 + 1/9)/2 = 1/3
    #          A = [1/3, -2/3, 1/3] / sqrt(1/3) = [0.57735, -1.1547, 0.57735]
    s = np.sqrt(1 / 3)
    expect = np.array([1 / 3 / s, -2 / 3 / s, 1 / 3 / s, 0, 0, 0])
    np.testing.assert_allclose(res.advantages, np.stack([expect, expect]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res.returns[0], [1, 0, 1, 1, 1, 1])
    # mask = valid & group kept: group 1 is flat and dropped; env 2's second decision is invalid.
    np.testing.assert_array_equal(res.mask, [[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    assert int(res.metrics["groups_dropped"]) == 1 and int(res.metrics["groups"]) == 2
    # Without filtering the flat group stays in the loss (with advantage 0).
    cfg2 = RLConfig(algo="grpo", group_size=3, filter_zero_advantage=False)
    res2 = A.get_estimator("grpo")(cfg2, _grpo_inputs())
    np.testing.assert_array_equal(res2.mask, _grpo_inputs().valid)


def test_rloo_estimator():
    cfg = RLConfig(algo="grpo", advantage="rloo", group_size=3)
    res = A.get_estimator(A.estimator_name(cfg))(cfg, _grpo_inputs())
    # group 0: R = [1, 0, 1] -> [1 - 0.5, 0 - 1, 1 - 0.5] = [0.5, -1, 0.5]
    np.testing.assert_allclose(res.advantages[1], [0.5, -1, 0.5, 0, 0, 0], rtol=1e-6)


def test_gae_estimator_and_registry():
    cfg = RLConfig(gamma=0.5, gae_lambda=0.5)
    assert A.estimator_name(cfg) == "gae"
    r = jnp.array([[1.0], [0.0], [2.0]])
    v = jnp.array([[0.5], [1.0], [1.5]])
    z = jnp.zeros((3, 1), bool)
    x = A.AdvantageInputs(rewards=r, terminated=z, done=z, valid=~z, values=v,
                          next_values=A.bootstrap_values(v, jnp.array([2.0])))
    res = A.get_estimator("gae")(cfg, x)
    np.testing.assert_allclose(res.advantages[:, 0], [1.03125, 0.125, 1.5], rtol=1e-6)  # column 0 above
    assert set(A.ADVANTAGE_ESTIMATORS) >= {"gae", "grpo", "rloo"}
    with pytest.raises(ConfigError, match="unknown advantage estimator 'gea'; available: gae, grpo, rloo"):
        A.get_estimator("gea")
    with pytest.raises(ValueError, match="needs values"):
        A.get_estimator("gae")(cfg, _grpo_inputs())
    with pytest.raises(ValueError, match="registered twice"):
        A.register_estimator("gae")(lambda c, x: None)
