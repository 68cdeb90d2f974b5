"""FP8: flax's emulated FP8 training path, the guarded TE path, block-wise PTQ and quantized inference."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vlajax.config.schema import ModelConfig
from vlajax.models import fp8, heads, quantize
from vlajax.models.attention import te_available
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA


def _train(cfg, steps=6, lr=3e-3):
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), 4, cfg)
    actions = jnp.tanh(jax.random.normal(jax.random.key(1), (4, cfg.action_horizon, cfg.action_dim)))
    with fp8.autocast(cfg.fp8):
        variables = jax.jit(model.init)(jax.random.key(2), obs)
        tx = optax.adam(lr)
        opt = tx.init(variables["params"])

        @jax.jit
        def step(variables, opt):
            loss, g = jax.value_and_grad(
                lambda v: heads.flow_loss(model, v, obs, actions, jax.random.key(3))[0])(variables)
            variables, opt = fp8.apply_gradients(variables, g, tx, opt)
            return variables, opt, loss

        losses = []
        for _ in range(steps):
            variables, opt, loss = step(variables, opt)
            losses.append(float(loss))
    return variables, losses, step


def test_flax_fp8_training_runs_and_loss_decreases():
    cfg = dataclasses.replace(ModelConfig(), fp8="flax", depth=1, vit_depth=1)
    variables, losses, step = _train(cfg)
    assert fp8.OWG in variables, "Fp8DotGeneralOp meta collection missing"
    hlo = step.lower(variables, optax.adam(1e-3).init(variables["params"])).as_text()
    assert "f8e4m3fn" in hlo.lower()
    scales = [x for p, x in jax.tree_util.tree_leaves_with_path(variables[fp8.OWG]) if "kernel_scale" in str(p)]
    assert scales and any(float(jnp.ravel(s)[0]) != 1.0 for s in scales), "FP8 scales were never updated"
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_te_path_guarded_without_gpu():
    if te_available():
        pytest.skip("TE and a GPU are present")
    with pytest.raises(RuntimeError, match="needs Transformer Engine and a GPU"):
        fp8.dot_general_cls("te")
    assert fp8.dot_general_cls("none") is None


@pytest.mark.gpu
@pytest.mark.skipif(not te_available(), reason="Transformer Engine with a GPU is not available here")
def test_te_fp8_training_loss_decreases():
    cfg = dataclasses.replace(ModelConfig(), fp8="te", depth=1, vit_depth=1, width=128, head_dim=16,
                              expert_width=128, dtype="bfloat16")
    _, losses, _ = _train(cfg)
    assert losses[-1] < losses[0], losses


def test_block_quantization_roundtrip_and_scales():
    w = jax.random.normal(jax.random.key(4), (300, 200)) * jnp.linspace(0.01, 3.0, 200)
    t = quantize.quantize_tensor(w, (300, 200))
    assert t.q.dtype == jnp.float8_e4m3fn and t.scale.shape == (3, 2) and t.scale.dtype == jnp.float32
    back = quantize.dequantize_tensor(t)
    # e4m3 has 3 mantissa bits: relative rounding error <= 2^-4 of each block's values (plus subnormals).
    blocks = quantize._pad_blocks(jnp.abs(w - back)).reshape(3, 128, 2, 128).max((1, 3))
    assert np.all(np.asarray(blocks) <= np.asarray(t.scale) * quantize.FP8_MAX * 2**-4 + 1e-6)
    assert float(jnp.max(jnp.abs(w - back))) > 0  # it is lossy


def test_ptq_quantizes_language_tower_only_and_saves_bytes():
    cfg = ModelConfig(flow_sampler="ode")
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(5), 2, cfg)
    params = jax.jit(model.init)(jax.random.key(6), obs)["params"]
    qparams = quantize.quantize_params(params)
    is_q = lambda x: isinstance(x, quantize.QTensor)  # noqa: E731
    assert not any(is_q(x) for x in jax.tree.leaves(qparams["vision"], is_leaf=is_q))
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), qparams["vision"], params["vision"]))
    assert any(is_q(x) for x in jax.tree.leaves(qparams["llm"], is_leaf=is_q))
    before, after = quantize.tower_bytes(params), quantize.tower_bytes(qparams)
    assert after["vision"] == before["vision"]
    assert 1 - after["language"] / before["language"] >= 0.35
    sample = jax.jit(lambda p, o, r: heads.flow_sample(model, {"params": quantize.dequantize_params(p)}, o, r))
    full = sample(params, obs, jax.random.key(7)).actions
    quant = sample(qparams, obs, jax.random.key(7)).actions
    err = float(jnp.max(jnp.abs(full - quant)))
    assert 0 < err < 0.1, err
