"""`model.aux_grasp_bins`: the grasp xy as a K x K classification. Labels, decoding
(a mode, not the middle of two), the loss against its regression branch, the model's shapes, the
SFT loss with it (packed = padded), and the config refusals."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.sft.test_aux_target import _aux_config, grasp_dataset  # noqa: F401  (module fixture)
from tests.sft.test_sft import _batches
from vlajax.config.schema import ConfigError, ModelConfig
from vlajax.models.vla import (
    AUX_GRASP_RANGE,
    VLA,
    aux_loss,
    aux_raw_dims,
    decode_grasp_bins,
    grasp_bin_centers,
    grasp_bin_labels,
    weighted_mse,
)
from vlajax.policies.run_files import init_fn
from vlajax.sft.loop import loss_fn

K = 10
WIDTH = 2 * AUX_GRASP_RANGE / K


def test_centres_labels_and_decoding_recover_a_target():
    c = np.asarray(grasp_bin_centers(K))
    assert c.shape == (K * K, 2) and np.isclose(c.min(), -AUX_GRASP_RANGE + WIDTH / 2)
    np.testing.assert_allclose(c[1 * K + 3], [c[1 * K, 0], c[3, 1]])  # bin i*K + j: x index i, y index j
    xy = jnp.asarray([[0.13, -0.71], [1.9, 0.4], [-1.74, 2.1]])
    lab = np.asarray(grasp_bin_labels(xy, K))
    np.testing.assert_allclose(lab.sum(1), 1.0, rtol=1e-6)
    nearest = np.argmin(((c[None] - np.asarray(xy)[:, None]) ** 2).sum(-1), 1)
    np.testing.assert_array_equal(lab.argmax(1), nearest)
    # logits = log labels: the local 3x3 expectation lands within a fifth of a bin of the target
    got = np.asarray(decode_grasp_bins(jnp.log(lab), K))
    assert np.abs(got - np.asarray(xy)).max() < 0.2 * WIDTH, got
    # a target outside the grid is clipped onto its edge
    out = np.asarray(grasp_bin_labels(jnp.asarray([[9.0, 0.0]]), K))
    assert c[out.argmax(), 0] == c[:, 0].max()


def test_decoding_picks_a_mode_not_the_middle_of_two():
    a, b = jnp.asarray([[-1.5, 0.5]]), jnp.asarray([[1.5, -0.5]])
    logits = jnp.log(0.55 * grasp_bin_labels(a, K) + 0.45 * grasp_bin_labels(b, K))
    got = np.asarray(decode_grasp_bins(logits, K))[0]
    assert np.linalg.norm(got - np.asarray(a[0])) < 0.3 * WIDTH, got  # the likelier cube
    mean = np.asarray(jax.nn.softmax(logits) @ grasp_bin_centers(K))[0]
    assert np.linalg.norm(mean - np.asarray(a[0])) > 1.0  # what a regression to the mean would give


def test_aux_loss_regression_branch_and_bins_branch():
    rng = np.random.default_rng(0)
    target = jnp.asarray(rng.standard_normal((6, 4)), jnp.float32)
    w = jnp.asarray([1, 1, 0, 2, 1, 0], jnp.float32)
    reg = ModelConfig(aux_target="grasp_place")
    raw = jnp.asarray(rng.standard_normal((6, 4)), jnp.float32)
    loss, pred, m = aux_loss(reg, raw, target, w)
    np.testing.assert_allclose(loss, weighted_mse(raw, target, w), rtol=1e-6)
    assert set(m) == {"aux_target_mse"} and pred.shape == (6, 4)
    cfg = ModelConfig(aux_target="grasp_place", aux_grasp_bins=K)
    assert aux_raw_dims(cfg) == K * K + 2
    raw = jnp.asarray(rng.standard_normal((6, K * K + 2)), jnp.float32)
    loss, pred, m = aux_loss(cfg, raw, target, w)
    ce = -np.sum(np.asarray(grasp_bin_labels(target[:, :2], K)) * np.asarray(jax.nn.log_softmax(raw[:, :K * K])), 1)
    want_ce = float(np.sum(np.asarray(w) * ce) / np.asarray(w).sum())
    np.testing.assert_allclose(m["aux_grasp_ce"], want_ce, rtol=1e-5)
    np.testing.assert_allclose(loss, want_ce + weighted_mse(raw[:, K * K:], target[:, 2:], w), rtol=1e-5)
    np.testing.assert_allclose(pred[:, 2:], raw[:, K * K:])
    np.testing.assert_allclose(m["aux_target_mse"], weighted_mse(pred, target, w), rtol=1e-6)
    # the grasp alone (the grounding stage's 2-dim target): no place term
    loss2, pred2, _ = aux_loss(cfg, raw, target[:, :2], w)
    np.testing.assert_allclose(loss2, want_ce, rtol=1e-5)
    assert pred2.shape == (6, 2)
    # the loss moves the logits toward the labels' bins
    g = jax.grad(lambda r: aux_loss(cfg, r, target, w)[0])(raw)
    assert float(jnp.abs(g[:, :K * K]).max()) > 0 and float(jnp.abs(g[2]).max()) == 0  # weight 0: no gradient


def test_sft_loss_with_bins_packed_equals_padded(grasp_dataset, tmp_path):  # noqa: F811
    cfg = _aux_config(grasp_dataset[0], str(tmp_path))
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, aux_grasp_bins=K, target_conditioning=True))
    cams, fixed, packed, _ = _batches(cfg)
    params = jax.jit(init_fn(cfg, cams))(jax.random.key(0)).params
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    assert params["aux_out"]["kernel"].shape[-1] == K * K + 2
    model = VLA(cfg.model)
    f = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3), aux_weight=2.0))
    (ref, m_ref), (got, m) = f(params, fixed), f(params, packed)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    for k in ("aux_grasp_ce", "aux_target_mse", "target_pred_mse"):
        np.testing.assert_allclose(m[k], m_ref[k], rtol=1e-5, atol=1e-6)
    assert float(m_ref["aux_grasp_ce"]) > np.log(K * K) * 0.5  # untrained: near the uniform's entropy
    # loss = flow + 2 x (ce + place mse)
    fixed_t = jnp.asarray(fixed["aux_target"])
    wts = jnp.asarray(fixed["sample_mask"] * fixed["aux_frame_weight"], jnp.float32)
    hidden, cache = model.apply({"params": params}, _obs(fixed), method=VLA.prefix)
    raw = model.apply({"params": params}, hidden, cache.segment_ids > 0, method=VLA.aux_raw)
    place = weighted_mse(raw[:, K * K:], fixed_t[:, 2:], wts)
    np.testing.assert_allclose(ref, m_ref["flow_mse"] + 2.0 * (m_ref["aux_grasp_ce"] + place), rtol=1e-4)
    pred = model.apply({"params": params}, hidden, cache.segment_ids > 0, method=VLA.aux_target)
    assert pred.shape == (fixed_t.shape[0], 4)


def _obs(batch):
    from vlajax.sft.loop import batch_observation
    return batch_observation(batch)


@pytest.mark.parametrize("kw,msg", [
    (dict(aux_target="grasp_place", aux_grasp_bins=1), "model.aux_grasp_bins=1 must be 0"),
    (dict(aux_grasp_bins=8), "model.aux_grasp_bins=8 must be 0 (off) or >= 2 with model.aux_target set"),
])
def test_config_refusals(kw, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        ModelConfig(**kw)
