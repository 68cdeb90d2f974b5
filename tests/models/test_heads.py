"""Flow head (ODE determinism, stochastic log-probs, recomputation, gradient direction), token head, value."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vlajax.config.schema import ModelConfig
from vlajax.models import heads
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA

B = 3


def _apply(model, method):
    """A jitted `model.apply(variables, *args, method=method)` (eager flax is slow on CPU)."""
    return jax.jit(lambda v, *a: model.apply(v, *a, method=method))


def _setup(**kw):
    cfg = dataclasses.replace(ModelConfig(), **kw)
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), B, cfg)
    return model, jax.jit(model.init)(jax.random.key(1), obs), obs


@pytest.fixture(scope="module")
def sde():
    return _setup(flow_sampler="flow_sde", value_head="expert")


@pytest.fixture(scope="module")
def noise():
    return _setup(flow_sampler="flow_noise", value_head="prefix")


def test_ode_sampler_is_deterministic(sde):
    model, variables, obs = sde
    sample = jax.jit(lambda v, o, r: heads.flow_sample(model, v, o, r, sampler="ode"))
    a, b = sample(variables, obs, jax.random.key(5)), sample(variables, obs, jax.random.key(5))
    np.testing.assert_array_equal(a.chain, b.chain)
    assert a.chain.shape == (B, model.cfg.num_denoise_steps + 1, 4, 7)
    np.testing.assert_array_equal(a.actions, a.chain[:, -1])
    assert np.all(np.asarray(a.log_prob) == 0) and np.all(np.asarray(a.sde_step) == -1)
    # Every step is x_{t-d} = x_t - d * v(x_t, t): replay one Euler step by hand.
    _, cache = _apply(model, VLA.prefix)(variables, obs)
    v, _, _ = _apply(model, VLA.velocity)(variables, cache, a.chain[:, 0], jnp.ones((B,)))
    np.testing.assert_allclose(a.chain[:, 1], a.chain[:, 0] - v / model.cfg.num_denoise_steps, atol=1e-5)
    assert not np.allclose(a.chain, sample(variables, obs, jax.random.key(6)).chain)  # noise depends on rng


def test_zero_start_makes_the_ode_policy_deterministic_and_sde_noise_the_only_randomness(sde):
    model, variables, obs = sde
    zeros = VLA(dataclasses.replace(model.cfg, flow_x1="zeros"))  # same parameters, x_1 = 0
    ode = jax.jit(lambda v, o, r: heads.flow_sample(zeros, v, o, r, sampler="ode"))
    a, b = ode(variables, obs, jax.random.key(5)), ode(variables, obs, jax.random.key(6))
    np.testing.assert_array_equal(a.chain, b.chain)  # any rng: the same chunk
    assert np.all(np.asarray(a.chain[:, 0]) == 0)
    s = jax.jit(lambda v, o, r: heads.flow_sample(zeros, v, o, r))(variables, obs, jax.random.key(7))
    assert np.all(np.asarray(s.chain[:, 0]) == 0) and not np.allclose(s.actions, a.actions)
    re = jax.jit(lambda v, o, c, j: heads.flow_chain_log_prob(zeros, v, o, c, j))(variables, obs, s.chain, s.sde_step)
    np.testing.assert_allclose(re["log_prob"], s.log_prob, rtol=1e-5, atol=1e-4)


def test_all_step_sde_credits_every_denoising_step(sde):
    model, variables, obs = sde
    every = VLA(dataclasses.replace(model.cfg, flow_sde_steps="all"))  # same parameters
    s = jax.jit(lambda v, o, r: heads.flow_sample(every, v, o, r))(variables, obs, jax.random.key(7))
    assert np.all(np.asarray(s.sde_step) == -1)
    re = jax.jit(lambda v, o, c: heads.flow_chain_log_prob(every, v, o, c))(variables, obs, s.chain)
    np.testing.assert_allclose(re["log_prob"], s.log_prob, rtol=1e-5, atol=1e-4)
    # the sum over steps: step k's Gaussian density, replayed by hand with the one-step scorer
    one = VLA(model.cfg)
    per_step = [jax.jit(lambda v, o, c, j: heads.flow_chain_log_prob(one, v, o, c, j))(
        variables, obs, s.chain, jnp.full((B,), k, jnp.int32))["log_prob"] for k in range(model.cfg.num_denoise_steps)]
    np.testing.assert_allclose(sum(per_step), s.log_prob, rtol=1e-5, atol=1e-3)


def test_last_step_sde_is_the_exact_action_density_given_x1(sde):
    """'last': the K - 1 ODE steps, then one Gaussian step; the learner re-runs the ODE steps from
    x_1 under its own params, so a parameter change moves the scored mean through the whole chain."""
    model, variables, obs = sde
    last = VLA(dataclasses.replace(model.cfg, flow_sde_steps="last"))  # same parameters
    K = model.cfg.num_denoise_steps
    s = jax.jit(lambda v, o, r: heads.flow_sample(last, v, o, r))(variables, obs, jax.random.key(7))
    assert np.all(np.asarray(s.sde_step) == K - 1)
    ode = jax.jit(lambda v, o, r: heads.flow_sample(last, v, o, r, sampler="ode"))(variables, obs, jax.random.key(7))
    np.testing.assert_allclose(s.chain[:, : K], ode.chain[:, : K], atol=1e-6)  # same x_1: ODE until the last step
    score = jax.jit(lambda v, o, c: heads.flow_chain_log_prob(last, v, o, c))
    np.testing.assert_allclose(score(variables, obs, s.chain)["log_prob"], s.log_prob, rtol=1e-5, atol=1e-4)
    # By hand: N(x_0; mean, std^2) summed over entries, with the SDE step's mean and std at t = 1/K.
    _, cache = _apply(model, VLA.prefix)(variables, obs)
    t, d = 1.0 / K, 1.0 / K
    x = s.chain[:, K - 1]
    v, _, _ = _apply(model, VLA.velocity)(variables, cache, x, jnp.full((B,), t))
    sigma = model.cfg.noise_level * np.sqrt(t / (1 - t))
    x0_hat, x1_hat = x - t * v, x + (1 - t) * v
    mean = (1 - (t - d)) * x0_hat + ((t - d) - sigma**2 * d / (2 * t)) * x1_hat
    std = np.sqrt(d) * sigma
    by_hand = np.sum(-0.5 * ((s.chain[:, K] - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi), axis=(1, 2))
    np.testing.assert_allclose(s.log_prob, by_hand, rtol=1e-5, atol=1e-3)
    # the stored x_{t_K-1} is not read: scoring a chain whose middle steps were scrambled is unchanged
    scrambled = s.chain.at[:, 1:K].set(0.0)
    np.testing.assert_allclose(score(variables, obs, scrambled)["log_prob"], s.log_prob, rtol=1e-5, atol=1e-4)
    # ... and the gradient reaches the first expert call of the chain (the pathwise dependence)
    g = jax.jit(jax.grad(lambda p: jnp.sum(score({**variables, "params": p}, obs, s.chain)["log_prob"])))(
        variables["params"])
    one = VLA(model.cfg)
    g_one = jax.jit(jax.grad(lambda p: jnp.sum(heads.flow_chain_log_prob(
        one, {**variables, "params": p}, obs, s.chain, s.sde_step)["log_prob"])))(variables["params"])
    diff = jax.tree.reduce(lambda a, b: a + b, jax.tree.map(lambda a, b: float(jnp.sum(jnp.abs(a - b))), g, g_one))
    assert diff > 0  # 'one' at step K - 1 reads the stored x_{t_K-1} and misses that dependence


@pytest.mark.parametrize("which", ["sde", "noise"])
def test_recomputed_log_prob_equals_sampling_log_prob(which, request):
    model, variables, obs = request.getfixturevalue(which)
    mask = jnp.ones((B, 4, 7), bool).at[:, 2:].set(False).at[:, :, 6].set(False)  # executed part, real dims
    s = jax.jit(lambda v, o, r: heads.flow_sample(model, v, o, r, logp_mask=mask))(variables, obs, jax.random.key(7))
    assert s.value.shape == (B,)
    if which == "sde":
        assert np.all((np.asarray(s.sde_step) >= 0) & (np.asarray(s.sde_step) < model.cfg.num_denoise_steps))
    re = jax.jit(lambda v, o, c, j: heads.flow_chain_log_prob(model, v, o, c, j, logp_mask=mask))(
        variables, obs, s.chain, s.sde_step)
    assert np.all(np.isfinite(np.asarray(s.log_prob))) and np.any(np.asarray(s.log_prob) != 0)
    np.testing.assert_allclose(re["log_prob"], s.log_prob, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("which", ["sde", "noise"])
def test_gradient_step_increases_gaussian_likelihood(which, request):
    """One SGD step on -mean log pi(chain) under new params raises the chain's log-prob."""
    model, variables, obs = request.getfixturevalue(which)
    s = jax.jit(lambda v, o, r: heads.flow_sample(model, v, o, r))(variables, obs, jax.random.key(8))

    def nll(params):
        out = heads.flow_chain_log_prob(model, {**variables, "params": params}, obs, s.chain, s.sde_step)
        return -jnp.mean(out["log_prob"])

    loss0, g = jax.jit(jax.value_and_grad(nll))(variables["params"])
    new = jax.tree.map(lambda p, gi: p - 1e-4 * gi, variables["params"], g)
    loss1 = jax.jit(nll)(new)
    assert float(loss1) < float(loss0), (float(loss0), float(loss1))


def test_flow_loss_decreases_with_adam():
    model, variables, obs = _setup()
    actions = jnp.tanh(jax.random.normal(jax.random.key(9), (B, 4, 7)))
    tx = optax.adam(3e-3)
    opt = tx.init(variables["params"])

    @jax.jit
    def step(params, opt, rng):
        loss, g = jax.value_and_grad(lambda p: heads.flow_loss(model, {"params": p}, obs, actions, rng)[0])(params)
        up, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, up), opt, loss

    params = variables["params"]
    fixed = jax.random.key(10)  # same t and noise each step: the loss must fall
    losses = []
    for _ in range(15):
        params, opt, loss = step(params, opt, fixed)
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.fixture(scope="module")
def tok():
    return _setup(action_head="tokens", value_head="expert", num_bins=32)


def test_token_log_probs_match_direct_log_softmax(tok):
    model, variables, obs = tok
    _, cache = _apply(model, VLA.prefix)(variables, obs)
    logits, _ = _apply(model, VLA.action_logits)(variables, cache)
    assert logits.shape == (B, 4, 7, 32)
    for temp in (0.7,):  # any T != 1 checks that the temperature is applied
        s = jax.jit(lambda v, o, r, t=temp: heads.token_sample(model, v, o, r, temperature=t))(
            variables, obs, jax.random.key(11))
        z = np.asarray(logits, np.float64) / temp
        logp = z - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)) - z.max(-1, keepdims=True)
        direct = np.take_along_axis(logp, np.asarray(s.tokens)[..., None], -1)[..., 0].sum((1, 2))
        np.testing.assert_allclose(s.log_prob, direct, rtol=1e-5, atol=1e-4)
        re = jax.jit(lambda v, o, k, t=temp: heads.token_chunk_log_prob(model, v, o, k, temperature=t))(
            variables, obs, s.tokens)
        np.testing.assert_allclose(re["log_prob"], direct, rtol=1e-5, atol=1e-4)
        assert s.value.shape == (B,)


def test_token_temperature_zero_is_argmax(tok):
    model, variables, obs = tok
    _, cache = _apply(model, VLA.prefix)(variables, obs)
    logits, _ = _apply(model, VLA.action_logits)(variables, cache)
    greedy = jax.jit(lambda v, o, r: heads.token_sample(model, v, o, r, temperature=0.0))
    s0, s1 = greedy(variables, obs, jax.random.key(12)), greedy(variables, obs, jax.random.key(13))
    np.testing.assert_array_equal(s0.tokens, np.argmax(np.asarray(logits), -1))
    np.testing.assert_array_equal(s0.tokens, s1.tokens)
    np.testing.assert_allclose(s0.actions, heads.bins_to_actions(s0.tokens, 32))


def test_bins_roundtrip():
    a = jnp.linspace(-1, 1, 101)
    back = heads.bins_to_actions(heads.actions_to_bins(a, 256), 256)
    assert float(jnp.max(jnp.abs(back - a))) <= 1 / 256 + 1e-6
    assert heads.actions_to_bins(jnp.array([-5.0, 5.0]), 8).tolist() == [0, 7]


def test_token_loss_decreases_and_value_heads():
    model, variables, obs = _setup(action_head="tokens", num_bins=16, value_head="prefix")
    actions = jnp.tanh(jax.random.normal(jax.random.key(14), (B, 4, 7)))
    tx = optax.adam(3e-3)
    opt = tx.init(variables["params"])

    @jax.jit
    def step(params, opt):
        (loss, _), g = jax.value_and_grad(
            lambda p: heads.token_loss(model, {"params": p}, obs, actions), has_aux=True)(params)
        up, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, up), opt, loss

    params, losses = variables["params"], []
    for _ in range(10):
        params, opt, loss = step(params, opt)
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0], losses
    v = jax.jit(lambda p, o: heads.value(model, {"params": p}, o))(params, obs)
    assert v.shape == (B,) and np.all(np.isfinite(np.asarray(v)))
    with pytest.raises(ValueError, match="no value head"):
        m2, v2, o2 = _setup()
        heads.value(m2, v2, o2)


@pytest.mark.slow  # bf16 is emulated on CPU: ~60 s on the shared 2-core box
def test_bfloat16_model_samples_and_trains():
    model, variables, obs = _setup(dtype="bfloat16", param_dtype="bfloat16", flow_sampler="flow_sde")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(variables["params"]))
    s = jax.jit(lambda v, o, r: heads.flow_sample(model, v, o, r))(variables, obs, jax.random.key(20))
    assert s.actions.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(s.log_prob)))
    actions = jnp.zeros((B, 4, 7))
    g = jax.jit(jax.grad(lambda v: heads.flow_loss(model, v, obs, actions, jax.random.key(21))[0]))(variables)
    assert all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in jax.tree.leaves(g))


def test_remat_gives_the_same_gradients():
    cfg = dataclasses.replace(ModelConfig(), depth=1, vit_depth=1)
    obs = fake_observation(jax.random.key(0), 2, cfg)
    actions = jnp.zeros((2, 4, 7))
    grads = []
    for remat in (False, True):
        model = VLA(dataclasses.replace(cfg, remat=remat))
        variables = jax.jit(model.init)(jax.random.key(1), obs)
        loss = lambda v, m=model: heads.flow_loss(m, v, obs, actions, jax.random.key(2))[0]  # noqa: E731
        grads.append(jax.jit(jax.grad(loss))(variables))
    assert jax.tree.structure(grads[0]) == jax.tree.structure(grads[1])
    for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
