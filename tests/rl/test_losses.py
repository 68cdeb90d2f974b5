"""Every loss on a small example worked by hand (arithmetic in the comments)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import RLConfig
from vlajax.rl import losses as L

CLIP = dict(clip_low=0.2, clip_high=0.28)  # ratio clipped into [0.8, 1.28]


def _logp_for(ratios):
    """Old log-probs 0, new log-probs log(r): the ratios come out as given."""
    return jnp.log(jnp.asarray(ratios, jnp.float32)), jnp.zeros(len(ratios), jnp.float32)


def test_ppo_clip_by_hand_with_asymmetric_bounds():
    # r = [1.5, 0.5, 1.1, 0.7, 2.0], A = [1, 1, -2, -1, 5], the last sample masked out.
    # per-sample loss max(-r A, -clip(r, 0.8, 1.28) A):
    #   s0: r=1.5, A=1:  max(-1.5, -1.28) = -1.28  (clipped above: clip-higher bound 1.28)
    #   s1: r=0.5, A=1:  max(-0.5, -0.8)  = -0.5   (unclipped)
    #   s2: r=1.1, A=-2: max(2.2, 2.2)    = 2.2    (inside the bounds)
    #   s3: r=0.7, A=-1: max(0.7, 0.8)    = 0.8    (clipped below)
    # loss = (-1.28 - 0.5 + 2.2 + 0.8) / 4 = 1.22 / 4 = 0.305; clip_frac = 2 / 4
    logp, old = _logp_for([1.5, 0.5, 1.1, 0.7, 2.0])
    adv = jnp.array([1.0, 1.0, -2.0, -1.0, 5.0])
    mask = jnp.array([1, 1, 1, 1, 0], bool)
    loss, m = L.ppo_policy_loss(logp, old, adv, mask, **CLIP)
    np.testing.assert_allclose(loss, 0.305, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 0.5)
    # approx KL = mean((r - 1) - log r) over valid samples:
    #   0.5 - ln 1.5 = 0.0945349; -0.5 - ln 0.5 = 0.1931472; 0.1 - ln 1.1 = 0.0046898; -0.3 - ln 0.7 = 0.0566749
    #   mean = 0.3490468 / 4 = 0.0872617
    kl = np.mean([r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 0.7)])
    np.testing.assert_allclose(m["approx_kl"], kl, rtol=1e-5)
    np.testing.assert_allclose(kl, 0.0872617, rtol=1e-5)
    np.testing.assert_allclose(m["ratio_mean"], (1.5 + 0.5 + 1.1 + 0.7) / 4, rtol=1e-6)
    # d loss / d logp = -r A / 4 where unclipped, 0 where clipped or masked:
    #   s0 0; s1 -0.5*1/4 = -0.125; s2 -1.1*(-2)/4 = 0.55; s3 0; s4 0
    g = jax.grad(lambda lp: L.ppo_policy_loss(lp, old, adv, mask, **CLIP)[0])(logp)
    np.testing.assert_allclose(g, [0.0, -0.125, 0.55, 0.0, 0.0], rtol=1e-6, atol=1e-7)


def test_dual_clip_caps_negative_advantage_loss():
    # c = 3. r = [5, 2, 5], A = [-1, -1, 1]:
    #   s0: max(5, 1.28) = 5 > 3 = -c A  -> 3   (dual clip)
    #   s1: max(2, 1.28) = 2 < 3         -> 2
    #   s2: A > 0: max(-5, -1.28) = -1.28 (ordinary clip; dual clip never applies to A > 0)
    # loss = (3 + 2 - 1.28) / 3 = 1.24; dual_clip_frac = 1/3; clip_frac = 1/3 (s2)
    logp, old = _logp_for([5.0, 2.0, 5.0])
    adv = jnp.array([-1.0, -1.0, 1.0])
    mask = jnp.ones(3, bool)
    loss, m = L.ppo_policy_loss(logp, old, adv, mask, dual_clip=3.0, **CLIP)
    np.testing.assert_allclose(loss, 1.24, rtol=1e-6)
    np.testing.assert_allclose(m["dual_clip_frac"], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 1 / 3, rtol=1e-6)
    # Without dual clip s0 contributes 5: (5 + 2 - 1.28) / 3 = 1.906667
    np.testing.assert_allclose(L.ppo_policy_loss(logp, old, adv, mask, **CLIP)[0], 5.72 / 3, rtol=1e-6)
    # The dual-clipped sample has no gradient (its loss is the constant -c A).
    g = jax.grad(lambda lp: L.ppo_policy_loss(lp, old, adv, mask, dual_clip=3.0, **CLIP)[0])(logp)
    np.testing.assert_allclose(g, [0.0, 2 / 3, 0.0], rtol=1e-6)  # s1: -r A / 3 = 2/3


def test_masked_entries_may_hold_garbage():
    # Padding with -inf / nan log-probs must not reach the loss or the gradient.
    logp = jnp.array([0.0, -jnp.inf, jnp.nan])
    old = jnp.array([0.0, 0.0, 0.0])
    mask = jnp.array([1, 0, 0], bool)
    loss, g = jax.value_and_grad(lambda lp: L.ppo_policy_loss(lp, old, jnp.ones(3), mask, **CLIP)[0])(logp)
    assert float(loss) == -1.0  # r = 1, A = 1
    np.testing.assert_array_equal(g, [-1.0, 0.0, 0.0])


def test_value_loss_by_hand_with_and_without_clipping():
    # V = [1, 2, 3], V_old = [1.5, 1.5, 1.5], R = [2, 2, 0]
    # unclipped: 0.5 * mean([(1-2)^2, (2-2)^2, (3-0)^2]) = 0.5 * 10 / 3 = 1.6666667
    v, old, ret = jnp.array([1.0, 2.0, 3.0]), jnp.full(3, 1.5), jnp.array([2.0, 2.0, 0.0])
    mask = jnp.ones(3)
    loss, m = L.value_loss(v, old, ret, mask)
    np.testing.assert_allclose(loss, 10 / 6, rtol=1e-6)
    # clip 0.2: V_c = 1.5 + clip(V - 1.5, -0.2, 0.2) = [1.3, 1.7, 1.7]
    #   (V_c - R)^2 = [0.49, 0.09, 2.89]; max with [1, 0, 9] = [1, 0.09, 9] -> 0.5 * 10.09 / 3 = 1.6816667
    #   the clipped error is larger only for s1 -> value_clip_frac = 1/3
    loss, m = L.value_loss(v, old, ret, mask, clip=0.2)
    np.testing.assert_allclose(loss, 0.5 * 10.09 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["value_clip_frac"], 1 / 3, rtol=1e-6)
    # gradient: s0 (V - R)/3 = -1/3; s1 uses the clipped branch, constant in V beyond the clip -> 0; s2 3/3 = 1
    g = jax.grad(lambda x: L.value_loss(x, old, ret, mask, clip=0.2)[0])(v)
    np.testing.assert_allclose(g, [-1 / 3, 0.0, 1.0], rtol=1e-6)


def test_entropy_and_k3_kl_by_hand():
    ent, m = L.entropy_bonus(jnp.array([1.0, 2.0, 3.0]), jnp.array([1, 1, 0]))
    assert float(ent) == 1.5 and float(m["entropy"]) == 1.5  # (1 + 2) / 2
    # k3: d = ref - logp = [-1.5 - (-1), -2 - (-2)] = [-0.5, 0]
    #   exp(-0.5) - (-0.5) - 1 = 0.6065307 + 0.5 - 1 = 0.1065307; 0 -> mean 0.0532653
    logp, ref = jnp.array([-1.0, -2.0]), jnp.array([-1.5, -2.0])
    kl, m = L.kl_penalty(logp, ref, jnp.ones(2))
    np.testing.assert_allclose(kl, (math.exp(-0.5) - 0.5) / 2, rtol=1e-6)
    # d/dlogp (exp(d) - d - 1) = 1 - exp(d): s0 (1 - 0.6065307) / 2 = 0.1967347, pushing logp down toward ref
    g = jax.grad(lambda lp: L.kl_penalty(lp, ref, jnp.ones(2))[0])(logp)
    np.testing.assert_allclose(g, [(1 - math.exp(-0.5)) / 2, 0.0], rtol=1e-6, atol=1e-7)


def test_decoupled_ppo_by_hand_drop_and_truncate():
    # w = pi_prox / pi_b = [1.5, 3.0, 0.5], cap 2; r' = pi / pi_prox = [1, 1, 1.2]; A = [1, 1, -1]
    # per-sample clipped loss: s0 -1; s1 -1; s2 max(1.2, 1.2) = 1.2
    # drop (AReaL): w_used = [1.5, 0, 0.5] -> (-1.5 + 0 + 0.6) / 3 = -0.3  (s1 still in the denominator)
    # truncate:     w_used = [1.5, 2, 0.5] -> (-1.5 - 2 + 0.6) / 3 = -0.9666667
    prox = jnp.log(jnp.array([0.3, 0.3, 0.2]))
    behav = prox - jnp.log(jnp.array([1.5, 3.0, 0.5]))
    logp = prox + jnp.log(jnp.array([1.0, 1.0, 1.2]))
    adv, mask = jnp.array([1.0, 1.0, -1.0]), jnp.ones(3)
    loss, m = L.decoupled_ppo_policy_loss(logp, prox, behav, adv, mask, weight_cap=2.0, **CLIP)
    np.testing.assert_allclose(loss, -0.3, rtol=1e-5)
    np.testing.assert_allclose(m["behaviour_capped_frac"], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["behaviour_weight_max"], 3.0, rtol=1e-5)
    np.testing.assert_allclose(m["behaviour_weight_mean"], 5.0 / 3, rtol=1e-5)
    loss, _ = L.decoupled_ppo_policy_loss(logp, prox, behav, adv, mask, weight_cap=2.0, weight_mode="truncate",
                                          **CLIP)
    np.testing.assert_allclose(loss, -2.9 / 3, rtol=1e-5)
    with pytest.raises(ValueError, match="weight_mode"):
        L.decoupled_ppo_policy_loss(logp, prox, behav, adv, mask, weight_mode="clip", **CLIP)


def test_decoupled_ppo_equals_ppo_when_behaviour_is_proximal():
    rng = np.random.default_rng(0)
    n = 64
    old = jnp.asarray(rng.normal(-3, 1, n), jnp.float32)
    logp = old + jnp.asarray(rng.normal(0, 0.3, n), jnp.float32)
    adv = jnp.asarray(rng.standard_normal(n), jnp.float32)
    mask = jnp.asarray(rng.random(n) < 0.8)
    kw = dict(dual_clip=3.0, **CLIP)

    ppo = jax.value_and_grad(lambda lp: L.ppo_policy_loss(lp, old, adv, mask, **kw), has_aux=True)
    dec = jax.value_and_grad(lambda lp: L.decoupled_ppo_policy_loss(lp, old, old, adv, mask, **kw), has_aux=True)
    (l1, m1), g1 = ppo(logp)
    (l2, m2), g2 = dec(logp)
    # Exactly equal, not merely close: w = exp(0) = 1 multiplies every term.
    assert float(l1) == float(l2)
    np.testing.assert_array_equal(g1, g2)
    for k in m1:
        assert float(m1[k]) == float(m2[k]), k
    assert float(m2["behaviour_weight_mean"]) == 1.0 and float(m2["behaviour_capped_frac"]) == 0.0


def test_grpo_loss_is_ppo_plus_kl():
    logp, old = _logp_for([1.5, 0.5])
    ref = jnp.array([0.1, -0.2])
    adv, mask = jnp.array([1.0, -1.0]), jnp.ones(2)
    ppo, _ = L.ppo_policy_loss(logp, old, adv, mask, **CLIP)
    kl, _ = L.kl_penalty(logp, ref, mask)
    loss, m = L.grpo_loss(logp, old, ref, adv, mask, kl_coef=0.1, **CLIP)
    np.testing.assert_allclose(loss, ppo + 0.1 * kl, rtol=1e-6)
    assert "kl_ref" in m


def test_rl_loss_combines_terms_and_normalizer_splits_exactly():
    cfg = RLConfig(value_coef=0.5, entropy_coef=0.01, kl_coef=0.1, value_clip=0.2, dual_clip=3.0)
    rng = np.random.default_rng(1)
    n = 8
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)
    batch = {"old_logp": f(n), "advantages": f(n), "mask": jnp.asarray(rng.random(n) < 0.7, jnp.float32),
             "returns": f(n), "old_values": f(n), "ref_logp": f(n)}
    logp, ent, val = batch["old_logp"] + 0.1 * f(n), jnp.abs(f(n)), f(n)
    loss, m = L.rl_loss(cfg, logp, ent, val, batch)
    pg, _ = L.ppo_policy_loss(logp, batch["old_logp"], batch["advantages"], batch["mask"], clip_low=0.2,
                              clip_high=0.28, dual_clip=3.0)
    vl, _ = L.value_loss(val, batch["old_values"], batch["returns"], batch["mask"], clip=0.2)
    e, _ = L.entropy_bonus(ent, batch["mask"])
    kl, _ = L.kl_penalty(logp, batch["ref_logp"], batch["mask"])
    np.testing.assert_allclose(loss, pg + 0.5 * vl - 0.01 * e + 0.1 * kl, rtol=1e-5)
    # Two halves, each normalized by the whole batch's valid count, add up to the whole.
    count = jnp.sum(batch["mask"])
    halves = [L.rl_loss(cfg, logp[s], ent[s], val[s], {k: v[s] for k, v in batch.items()}, count)
              for s in (slice(0, 4), slice(4, 8))]
    np.testing.assert_allclose(halves[0][0] + halves[1][0], loss, rtol=1e-5)
    for k in ("approx_kl", "clip_frac", "value_loss", "entropy"):
        np.testing.assert_allclose(halves[0][1][k] + halves[1][1][k], m[k], rtol=1e-5, atol=1e-7)
    # prox_logp switches to decoupled PPO; kl_coef > 0 without ref_logp is an error.
    _, m2 = L.rl_loss(cfg, logp, ent, val, batch | {"prox_logp": batch["old_logp"]})
    assert "behaviour_weight_mean" in m2
    with pytest.raises(ValueError, match="ref_logp"):
        L.rl_loss(cfg, logp, ent, val, {k: v for k, v in batch.items() if k != "ref_logp"})


# ------------------------------------------------------------------------------------------
# Per-entry ratios (rl.ratio_level='factor')
# ------------------------------------------------------------------------------------------


def test_per_entry_ppo_by_hand():
    # 2 decisions x 3 entries; decision 1 scores only its first 2 entries (entry 3 holds garbage).
    # per-entry ratios: d0 [1, 1.5, 0.5], d1 [1.1, 2.0, *]; A = [1, -1]; clip 0.2 / 0.28
    # d0 (A = 1): losses -min(r, clip(r)) = [-1, -1.28, -0.5] -> mean -0.9266667 (clipped: entry 2)
    # d1 (A = -1): losses max(r, clip(r)) = [1.1, 2.0] -> mean 1.55 (entry 2: unclipped branch larger)
    # loss = (-0.9266667 + 1.55) / 2 = 0.3116667; clip_frac = (1/3 + 0) / 2
    old = jnp.log(jnp.array([[0.5, 0.2, 0.4], [0.3, 0.1, 0.9]]))
    logp = old + jnp.log(jnp.array([[1.0, 1.5, 0.5], [1.1, 2.0, 7.0]]))
    fmask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, mask = jnp.array([1.0, -1.0]), jnp.ones(2)
    loss, m = L.ppo_policy_loss(logp, old, adv, mask, factor_mask=fmask, **CLIP)
    np.testing.assert_allclose(loss, (-(1 + 1.28 + 0.5) / 3 + 1.55) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["clip_frac"], (1 / 3) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["ratio_mean"], ((1 + 1.5 + 0.5) / 3 + 1.55) / 2, rtol=1e-5)
    with pytest.raises(ValueError, match="factor_mask"):
        L.ppo_policy_loss(logp, old, adv, mask, **CLIP)


def test_per_entry_with_one_entry_equals_decision_level_and_truncates_per_entry():
    rng = np.random.default_rng(1)
    n = 32
    old = jnp.asarray(rng.normal(-3, 1, n), jnp.float32)
    logp = old + jnp.asarray(rng.normal(0, 0.3, n), jnp.float32)
    behav = old + jnp.asarray(rng.normal(0, 0.8, n), jnp.float32)
    adv = jnp.asarray(rng.standard_normal(n), jnp.float32)
    mask = jnp.asarray(rng.random(n) < 0.8)
    kw = dict(dual_clip=3.0, weight_mode="truncate", **CLIP)
    whole, m1 = L.decoupled_ppo_policy_loss(logp, old, behav, adv, mask, **kw)
    per, m2 = L.decoupled_ppo_policy_loss(logp[:, None], old[:, None], behav[:, None], adv, mask,
                                          factor_mask=jnp.ones((n, 1)), **kw)
    np.testing.assert_allclose(per, whole, rtol=1e-6)
    for k in m1:
        np.testing.assert_allclose(m2[k], m1[k], rtol=1e-6, err_msg=k)
    # two entries whose behaviour weights are 3 and 1/3: per entry, only the first is truncated (to 2);
    # as one decision its weight is exactly 1 and nothing is truncated
    prox = jnp.log(jnp.array([[0.3, 0.3]]))
    b2 = prox - jnp.log(jnp.array([[3.0, 1 / 3]]))
    lp, a, mk = prox, jnp.array([1.0]), jnp.ones(1)
    loss_e, me = L.decoupled_ppo_policy_loss(lp, prox, b2, a, mk, factor_mask=jnp.ones((1, 2)), **kw)
    loss_d, md = L.decoupled_ppo_policy_loss(lp.sum(-1), prox.sum(-1), b2.sum(-1), a, mk, **kw)
    np.testing.assert_allclose(loss_e, -(2.0 + 1 / 3) / 2, rtol=1e-5)
    np.testing.assert_allclose(loss_d, -1.0, rtol=1e-5)
    assert float(me["behaviour_capped_frac"]) == 0.5 and float(md["behaviour_capped_frac"]) == 0.0


def test_rl_loss_reads_logp_mask_and_sums_per_entry_kl_for_the_penalty():
    rl = RLConfig(kl_coef=0.1, ratio_level="factor")
    old = jnp.log(jnp.array([[0.5, 0.2], [0.3, 0.1]]))
    ref = old - jnp.array([[0.1, 0.3], [-0.2, 0.0]])
    batch = {"old_logp": old, "advantages": jnp.array([1.0, -1.0]), "mask": jnp.ones(2), "ref_logp": ref,
             "logp_mask": jnp.ones((2, 2))}
    loss, m = L.rl_loss(rl, old, None, None, batch)
    d = np.asarray(ref - old)
    by_hand = np.mean(np.sum(np.expm1(d) - d, -1))  # each decision's KL: the sum of its entries' k3
    np.testing.assert_allclose(m["kl_ref"], by_hand, rtol=1e-6)
    np.testing.assert_allclose(loss, m["policy_loss"] + 0.1 * by_hand, rtol=1e-6)
    whole, _ = L.kl_penalty(old.sum(-1), ref.sum(-1), jnp.ones(2))  # k3 of the summed log-ratio: another number
    assert abs(float(whole) - by_hand) > 1e-3


def test_per_entry_kl_stays_finite_where_the_decision_level_k3_explodes():
    """30 entries that each drifted 0.3 nats: the decision-level k3 is exp(9) - 10 ~ 8000, the per-entry sum
    30 * (exp(0.3) - 1.3) ~ 1.5, and its gradient per entry is exp(0.3) - 1, not exp(9) - 1."""
    logp, ref, fm, mask = jnp.zeros((1, 30)), jnp.full((1, 30), 0.3), jnp.ones((1, 30)), jnp.ones(1)
    per, _ = L.kl_penalty(logp, ref, mask, factor_mask=fm)
    whole, _ = L.kl_penalty(logp.sum(-1), ref.sum(-1), mask)
    np.testing.assert_allclose(per, 30 * (np.exp(0.3) - 1.3), rtol=1e-5)
    np.testing.assert_allclose(whole, np.exp(9.0) - 10.0, rtol=1e-5)
    g = jax.grad(lambda lp: L.kl_penalty(lp, ref, mask, factor_mask=fm)[0])(logp)
    np.testing.assert_allclose(g, -(np.exp(0.3) - 1.0) * np.ones((1, 30)), rtol=1e-5)
    unscored = fm.at[0, 10:].set(0.0)  # unscored entries (garbage there) do not count
    part, _ = L.kl_penalty(logp.at[0, 10:].set(-50.0), ref, mask, factor_mask=unscored)
    np.testing.assert_allclose(part, 10 * (np.exp(0.3) - 1.3), rtol=1e-5)
    with pytest.raises(ValueError, match="factor_mask"):
        L.kl_penalty(logp, ref, mask)


def test_per_entry_kl_estimates_the_kl_of_a_factorized_policy():
    """Tokens drawn from a factorized categorical pi (3 independent entries of 5 bins): the mean over draws of
    the per-entry k3 sum is KL(pi || ref) = the sum of the entries' exact KLs (Monte Carlo, 20000 draws)."""
    rng = np.random.default_rng(0)
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(0, 1.0, (3, 5)), jnp.float32))
    lr = jax.nn.log_softmax(jnp.asarray(rng.normal(0, 1.0, (3, 5)), jnp.float32))
    exact = float(jnp.sum(jnp.exp(lp) * (lp - lr)))
    n = 20000
    tok = jax.random.categorical(jax.random.key(0), lp, shape=(n, 3))  # [n, 3]
    pick = lambda table: jnp.take_along_axis(jnp.broadcast_to(table, (n, 3, 5)), tok[..., None], -1)[..., 0]
    est, _ = L.kl_penalty(pick(lp), pick(lr), jnp.ones(n), factor_mask=jnp.ones((n, 3)))
    assert exact > 0.1
    np.testing.assert_allclose(float(est), exact, rtol=0.05)


def test_decision_ratios_with_per_entry_log_probs_equal_the_decision_level_loss():
    """rl.kl_coef > 0 with rl.ratio_level='decision' gives the loss per-entry log-probs (for the KL): its policy
    terms are those of the decision-level log-probs (the entries' sums), the plain and the decoupled PPO alike."""
    rng = np.random.default_rng(3)
    n, f = 16, 6
    g = lambda *s: jnp.asarray(rng.normal(0, 0.3, s), jnp.float32)
    fm = jnp.asarray(rng.random((n, f)) < 0.8, jnp.float32)
    old, ref, behav = (-1.0 + g(n, f)) * fm, (-1.0 + g(n, f)) * fm, (-1.0 + g(n, f)) * fm
    logp = (old + g(n, f)) * fm
    batch = {"old_logp": old, "advantages": g(n) * 3, "mask": jnp.asarray(rng.random(n) < 0.8, jnp.float32),
             "ref_logp": ref, "logp_mask": fm}
    cfg = RLConfig(kl_coef=0.1, ratio_level="decision")
    for extra in ({}, {"prox_logp": behav}):
        b = batch | extra
        _, m = L.rl_loss(cfg, logp, None, None, b)
        summed = {k: (jnp.sum(v, -1) if k in ("old_logp", "prox_logp") else v) for k, v in b.items()
                  if k != "logp_mask"}
        _, m_dec = L.rl_loss(dataclasses.replace(cfg, kl_coef=0.0), jnp.sum(logp, -1), None, None, summed)
        for k in m_dec:
            if k != "loss":
                np.testing.assert_allclose(m[k], m_dec[k], rtol=1e-5, atol=1e-7, err_msg=k)
        per, _ = L.kl_penalty(logp, ref, b["mask"], factor_mask=fm)
        np.testing.assert_allclose(m["kl_ref"], per, rtol=1e-6)
        np.testing.assert_allclose(m["loss"], m_dec["loss"] + 0.1 * per, rtol=1e-5)
