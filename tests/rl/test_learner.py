"""The learner: micro-batch accumulation, one trace per shape, sharded == single device,
non-finite detection, target-KL stopping, and that updates move the loss the right way."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.rl.common import collect, make_policy, make_state
from vlajax.config.schema import MeshConfig, RLConfig
from vlajax.rl import learner, mlp_policy
from vlajax.training import sharding


def _setup(cfg, n=64, seed=0):
    model = make_policy()
    fn = mlp_policy.make_logp_value_fn(model)
    state = make_state(model, learner.make_optimizer(cfg), seed)
    batch = collect(model, state.params, n, seed)
    # Move the policy off the sampling one a little, so ratios are not all 1 and clipping matters.
    params = jax.tree.map(lambda p: p + 0.05 * jnp.sign(p), state.params)
    return fn, state.replace(params=params), batch


def _allclose_tree(a, b, rtol, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def test_flatten_decisions_is_env_major():
    x = jnp.arange(6).reshape(2, 3)  # [T=2, B=3], value = t * 3 + b
    np.testing.assert_array_equal(learner.flatten_decisions(x), [0, 3, 1, 4, 2, 5])  # row b * T + t


def test_normalize_advantages_and_explained_variance_by_hand():
    # valid [1, 2, 3]: mean 2, population std sqrt(2/3) = 0.8164966 -> [-1.2247449, 0, 1.2247449]; masked -> 0
    adv = learner.normalize_advantages(jnp.array([1.0, 2.0, 3.0, 100.0]), jnp.array([1, 1, 1, 0]))
    np.testing.assert_allclose(adv, [-1.2247449, 0.0, 1.2247449, 0.0], rtol=1e-5, atol=1e-6)
    # R = [1, 2, 3] (var 2/3), V = [1, 2, 2]: R - V = [0, 0, 1], var = 2/9 -> EV = 1 - (2/9)/(2/3) = 2/3
    ev = learner.explained_variance(jnp.array([1.0, 2.0, 2.0]), jnp.array([1.0, 2.0, 3.0]), jnp.ones(3))
    np.testing.assert_allclose(ev, 2 / 3, rtol=1e-5)
    assert float(learner.explained_variance(jnp.ones(3), jnp.ones(3), jnp.ones(3))) == 0.0


def test_micro_batch_accumulation_equals_full_minibatch_gradient():
    cfg = RLConfig(value_clip=0.2, entropy_coef=0.01, dual_clip=3.0)
    fn, state, batch = _setup(cfg, n=32)
    key = jax.random.key(0)
    full, m_full = jax.jit(functools.partial(learner.accumulate_gradients, cfg, fn, micro_batches=1))(
        state.params, batch, key)
    acc, m_acc = jax.jit(functools.partial(learner.accumulate_gradients, cfg, fn, micro_batches=4))(
        state.params, batch, key)
    # The mask is uneven across micro-batches (random 85% valid), and still the sum with the
    # minibatch normalizer is the minibatch gradient. Float32 sums in a different order: 1e-5.
    _allclose_tree(acc, full, rtol=1e-5, atol=1e-6)
    for k in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac"):
        np.testing.assert_allclose(m_acc[k], m_full[k], rtol=1e-5, atol=1e-7)
    # With every entry valid, the plain mean of per-micro-batch gradients (each normalized by its own
    # count) is the full gradient too.
    dense = batch | {"mask": jnp.ones_like(batch["mask"])}
    full, _ = learner.compute_gradients(cfg, fn, state.params, dense, key)
    parts = [learner.compute_gradients(cfg, fn, state.params, jax.tree.map(lambda x, i=i: x[i::4], dense), key)[0]
             for i in range(4)]
    _allclose_tree(jax.tree.map(lambda *g: sum(g) / 4, *parts), full, rtol=1e-5, atol=1e-6)


def test_streamed_micro_batch_sums_equal_the_accumulated_gradient():
    """The streaming recipe: per-micro-batch sums (normalizer 1), added, divided by the valid count."""
    cfg = RLConfig(value_clip=0.2, entropy_coef=0.01)
    fn, state, batch = _setup(cfg, n=32)
    key = jax.random.key(0)
    ref, _ = learner.accumulate_gradients(cfg, fn, state.params, batch, key, micro_batches=1)
    grad_sum = jax.jit(functools.partial(learner.compute_gradients, cfg, fn, normalizer=1.0))
    total, count = None, 0.0
    for i in range(4):  # micro-batches arrive in any order / size; here 4 contiguous chunks of 8
        part = jax.tree.map(lambda x, i=i: x[8 * i: 8 * (i + 1)], batch)
        g, _ = grad_sum(state.params, part, key)
        total = g if total is None else jax.tree.map(jnp.add, total, g)
        count += float(jnp.sum(part["mask"]))
    _allclose_tree(jax.tree.map(lambda g: g / count, total), ref, rtol=1e-5, atol=1e-6)


def test_update_traces_once_per_shape_and_respects_transfer_guard():
    cfg = RLConfig(update_epochs=2, num_minibatches=2, micro_batches=2)
    fn, state, batch = _setup(cfg)
    chex.clear_trace_counter()

    @chex.assert_max_traces(n=1)
    def step(rng, state, batch):
        return learner.update(cfg, fn, rng, state, batch)

    jstep = jax.jit(step, donate_argnums=(1,))
    batch2 = collect(make_policy(), state.params, 64, seed=7)
    keys = [jax.random.key(i) for i in range(3)]
    with jax.transfer_guard("disallow"):
        state, m = jstep(keys[0], state, batch)
        state, m = jstep(keys[1], state, batch2)  # new data, same shapes: no retrace
        state, m = jstep(keys[2], state, batch)
    m = jax.device_get(m)
    assert m["updates"] == 4.0 and m["nonfinite"] == 0.0 and m["kl_stopped"] == 0.0
    assert int(jax.device_get(state.step)) == 12
    for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "explained_variance",
              "grad_norm", "grad_norm_max", "advantage_mean", "advantage_std", "valid_frac"):
        assert np.isfinite(m[k]), k


def test_updates_lower_the_loss_on_a_fixed_batch():
    cfg = RLConfig(update_epochs=1, num_minibatches=1, learning_rate=3e-3, grad_clip=0.0, normalize_advantages="none")
    fn, state, batch = _setup(cfg)
    step = jax.jit(functools.partial(learner.update, cfg, fn))
    losses = []
    for i in range(20):
        state, m = step(jax.random.key(i), state, batch)
        losses.append(float(m["loss"]))  # loss before each update
    assert losses[-1] < losses[0] - 0.1, losses


@pytest.mark.devices(8)
def test_sharded_update_equals_single_device():
    cfg = RLConfig(update_epochs=2, num_minibatches=2, micro_batches=2, value_clip=0.2, entropy_coef=0.01)
    fn, state, batch = _setup(cfg, n=64)
    key = jax.random.key(3)
    dev0 = jax.devices()[0]
    ref_state, ref_m = jax.jit(functools.partial(learner.update, cfg, fn))(
        key, jax.device_put(state, dev0), jax.device_put(batch, dev0))

    mesh = sharding.make_mesh(MeshConfig(dp=8))
    rules = MeshConfig(rules="dp_only").logical_rules
    data = sharding.data_sharding(mesh)
    repl = sharding.replicated(mesh)
    sh_batch = jax.device_put(batch, data)
    sh_state = jax.device_put(state, repl)
    with sharding.use_mesh(mesh, rules):
        step = jax.jit(functools.partial(learner.update, cfg, fn), in_shardings=(repl, repl, data),
                       out_shardings=(repl, repl))
        out_state, m = step(key, sh_state, sh_batch)
        # The micro-batches really are split over dp inside the step (no gather onto one device).
        hlo = step.lower(key, sh_state, sh_batch).compile().as_text()
    assert out_state.params["actor"]["Dense_0"]["kernel"].sharding.is_fully_replicated
    assert "all-reduce" in hlo  # gradients summed across the dp shards
    # Same math, float32 sums in a different order across 8 shards. Stated tolerance: params within
    # 1e-6 absolute (+1e-5 relative) after 4 Adam updates; measured here: 1.5e-8.
    _allclose_tree(out_state.params, ref_state.params, rtol=1e-5, atol=1e-6)
    for k in ("loss", "approx_kl", "clip_frac", "grad_norm", "explained_variance"):
        np.testing.assert_allclose(m[k], ref_m[k], rtol=1e-5, atol=1e-6)


def test_nonfinite_update_is_refused_and_reported():
    cfg = RLConfig(update_epochs=1, num_minibatches=2)
    fn, state, batch = _setup(cfg)
    adv = batch["advantages"].at[0].set(jnp.nan)
    bad = batch | {"advantages": adv, "mask": batch["mask"].at[0].set(1.0)}
    cfg = RLConfig(update_epochs=1, num_minibatches=2, normalize_advantages="none")
    new, m = jax.jit(functools.partial(learner.update, cfg, fn))(jax.random.key(0), state, bad)
    m = jax.device_get(m)
    # Sample 0 lands in exactly one of the 2 minibatches: that update is refused, the other applied.
    assert m["nonfinite"] == 1.0 and m["updates"] == 1.0
    for leaf in jax.tree.leaves(new.params):
        assert np.all(np.isfinite(leaf))
    with pytest.raises(learner.NonFiniteError, match=r"non-finite loss or gradient in 1 minibatch update\(s\) at "
                                                     r"learner step 5 .*last finite ones"):
        learner.check_finite(m, step=5)
    learner.check_finite({"nonfinite": 0.0})  # fine: no error

    # With NaN in every minibatch nothing is applied and the state is exactly the old one.
    all_bad = batch | {"advantages": jnp.full_like(adv, jnp.nan), "mask": jnp.ones_like(batch["mask"])}
    new, m = jax.jit(functools.partial(learner.update, cfg, fn))(jax.random.key(0), state, all_bad)
    assert float(m["updates"]) == 0.0 and float(m["nonfinite"]) == 2.0
    _allclose_tree(new.params, state.params, rtol=0, atol=0)
    assert int(new.step) == int(state.step)


def test_target_kl_stops_remaining_updates():
    base = dict(update_epochs=2, num_minibatches=4, learning_rate=1e-2, grad_clip=0.0)
    model = make_policy()
    fn = mlp_policy.make_logp_value_fn(model)
    state = make_state(model, learner.make_optimizer(RLConfig(**base)))
    batch = collect(model, state.params, 64)  # fresh data: the first minibatch has KL exactly 0
    _, m = jax.jit(functools.partial(learner.update, RLConfig(**base, target_kl=1e-9), fn))(
        jax.random.key(0), state, batch)
    # Update 1 sees KL 0 <= target and is applied; update 2 sees KL > 1e-9 and stops everything after.
    assert float(m["updates"]) == 1.0 and float(m["kl_stopped"]) == 1.0
    _, m = jax.jit(functools.partial(learner.update, RLConfig(**base), fn))(jax.random.key(0), state, batch)
    assert float(m["updates"]) == 8.0 and float(m["kl_stopped"]) == 0.0


def test_decoupled_batch_with_prox_equal_behaviour_matches_plain_update():
    cfg = RLConfig(update_epochs=1, num_minibatches=2)
    fn, state, batch = _setup(cfg)
    step = jax.jit(functools.partial(learner.update, cfg, fn))
    s1, m1 = step(jax.random.key(0), state, batch)
    s2, m2 = jax.jit(functools.partial(learner.update, cfg, fn))(
        jax.random.key(0), state, batch | {"prox_logp": batch["old_logp"]})
    _allclose_tree(s1.params, s2.params, rtol=0, atol=0)
    assert float(m2["behaviour_weight_mean"]) == 1.0


def test_bad_split_is_a_clear_error():
    cfg = RLConfig(num_minibatches=3)
    fn, state, batch = _setup(cfg, n=64)
    with pytest.raises(ValueError, match=r"64 decisions do not split into rl.num_minibatches=3 x rl.micro_batches=1"):
        learner.update(cfg, fn, jax.random.key(0), state, batch)


def test_optimizer_clips_gradients():
    cfg = RLConfig(grad_clip=1.0, learning_rate=1.0)
    tx = learner.make_optimizer(cfg)
    params = {"w": jnp.zeros(2)}
    grads = {"w": jnp.array([30.0, 40.0])}
    # Adam's first step is lr * g / |g| per element regardless of scale; check the clip stage directly.
    clipped, _ = optax.clip_by_global_norm(1.0).update(grads, None)
    np.testing.assert_allclose(clipped["w"], [0.6, 0.8], rtol=1e-6)
    assert len(tx.init(params)) == 2  # (clip, adam)
    assert len(learner.make_optimizer(RLConfig(grad_clip=0.0)).init(params)) == 1


@pytest.mark.parametrize("value_lr", [0.0, 1e-2])
def test_lr_warmup_scales_the_first_steps_after_adam(value_lr):
    """Step k's update is min(1, (k + 1) / n) x the same step's update without warmup, for the
    policy's and (with its own rate) the critic's params; from step n on the two are equal."""
    n = 3
    params = {"policy": {"w": jnp.zeros(2)}, "critic": {"w": jnp.zeros(2)}}
    grads = [{"policy": {"w": jnp.array([3.0, -4.0]) * (k + 1)}, "critic": {"w": jnp.array([1.0, 2.0])}}
             for k in range(5)]
    runs = []
    for warm in (0, n):
        cfg = RLConfig(learning_rate=1e-3, value_learning_rate=value_lr, lr_warmup_steps=warm, grad_clip=0.0)
        tx = learner.make_optimizer(cfg)
        state, ups = tx.init(params), []
        for g in grads:
            u, state = tx.update(g, state, params)
            ups.append(u)
        runs.append(ups)
    for k, (plain, warm) in enumerate(zip(*runs)):
        scale = min(1.0, (k + 1) / n)
        for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(warm)):
            assert np.all(np.abs(np.asarray(a)) > 0)
            np.testing.assert_allclose(np.asarray(b), scale * np.asarray(a), rtol=1e-6)


def test_lr_warmup_must_not_be_negative():
    with pytest.raises(ValueError, match="rl.lr_warmup_steps must be >= 0"):
        RLConfig(lr_warmup_steps=-1)
