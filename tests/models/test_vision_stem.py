"""model.vision_stem='conv': the ViT's convolutional stem (shapes, token order, training signal, refusals)."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, ModelConfig
from vlajax.models.observation import fake_observation
from vlajax.models.vision import ViT
from vlajax.models.vla import VLA

IMAGE, PATCH, WIDTH = 32, 8, 48


def _vit(stem: str, depth: int = 0) -> ViT:
    return ViT(IMAGE, PATCH, WIDTH, depth, 4, 64, 40, stem=stem)


def test_conv_stem_shapes_and_params():
    """Three stride-2 convs (12 -> 24 -> 48 channels, each with a LayerNorm) for 8x8 patches, then the
    linear patch map."""
    images = jnp.zeros((3, IMAGE, IMAGE, 3))
    vit = _vit("conv", depth=1)
    variables = jax.eval_shape(lambda: nn.unbox(vit.init(jax.random.key(0), images)))
    params = variables["params"]
    assert [params[f"stem_conv_{i}"]["kernel"].shape for i in range(3)] == [
        (3, 3, 3, 12), (3, 3, 12, 24), (3, 3, 24, 48)]
    assert [params[f"stem_ln_{i}"]["scale"].shape for i in range(3)] == [(12,), (24,), (48,)]
    assert params["patch_embed"]["kernel"].shape == (WIDTH, WIDTH)
    assert not any(k.startswith("stem") for k in jax.eval_shape(
        lambda: _vit("patch").init(jax.random.key(0), images))["params"])
    assert jax.eval_shape(vit.apply, variables, images).shape == (3, (IMAGE // PATCH) ** 2, 40)


def test_conv_stem_tokens_start_at_the_patch_stems_scale():
    """At init the stem's tokens (before the position embedding) vary across images about as much as the
    linear patch embedding's; without the stem's LayerNorms they were ~7x smaller, under the position
    embedding's scale, and a grounding run did not learn."""
    images = jax.random.uniform(jax.random.key(0), (8, IMAGE, IMAGE, 3))
    spread = {}
    for stem in ("patch", "conv"):
        vit = _vit(stem)
        _, inter = vit.apply(vit.init(jax.random.key(1), images), images, capture_intermediates=True,
                             mutable=["intermediates"])
        tokens = inter["intermediates"]["patch_embed"]["__call__"][0]  # [8, 16, WIDTH]
        spread[stem] = float(tokens.std(0).mean())
    assert 0.5 < spread["conv"] / spread["patch"] < 2.0, spread


@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_token_order_follows_the_image_grid(stem):
    """With no ViT blocks a token sees only its neighbourhood: a change in the bottom-right corner moves
    the last token (row-major grid, the order the 2-D position embedding assumes) and not the first."""
    vit = _vit(stem)
    images = jax.random.uniform(jax.random.key(1), (1, IMAGE, IMAGE, 3))
    variables = vit.init(jax.random.key(0), images)
    base = vit.apply(variables, images)
    moved = vit.apply(variables, images.at[0, -2:, -2:, :].set(1.0 - images[0, -2:, -2:, :]))
    diff = np.abs(np.asarray(moved - base)).max(-1)[0]  # [16]
    assert diff[-1] > 1e-3
    assert diff[0] == 0.0
    assert np.count_nonzero(diff) <= (2 if stem == "conv" else 1) ** 2  # conv: its receptive field overlaps


def test_vla_with_conv_stem_trains_its_stem():
    """A tiny VLA with the conv stem: the prefix's gradient reaches every stem kernel, finite and non-zero."""
    cfg = ModelConfig(vision_stem="conv")
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), 2, cfg)
    variables = nn.unbox(model.init(jax.random.key(1), obs))

    def out(params):
        hidden, _ = model.apply({**variables, "params": params}, obs, method=VLA.prefix)
        return jnp.sum(hidden ** 2)

    grads = jax.grad(out)(variables["params"])
    stem = {k: v for k, v in grads["vision"].items() if k.startswith("stem_conv")}
    k = cfg.patch_size.bit_length() - 1
    assert len(stem) == k
    for name, g in stem.items():
        assert np.all(np.isfinite(np.asarray(g["kernel"]))), name
        assert float(jnp.abs(g["kernel"]).max()) > 0, name


def test_conv_stem_refusals():
    with pytest.raises(ConfigError, match="power-of-2 model.patch_size, got 6"):
        ModelConfig(vision_stem="conv", image_size=36, patch_size=6)
    pi = dict(family="pi0", paligemma_variant="dummy", action_expert_variant="dummy", siglip_variant="mu/14",
              siglip_depth=1, image_size=28, vocab_size=128, max_text_len=8)
    ModelConfig(**pi)  # the family itself is fine
    with pytest.raises(ConfigError, match="vision_stem='conv' is not available for model.family='pi0'"):
        ModelConfig(**pi, vision_stem="conv")
    assert dataclasses.replace(ModelConfig(), vision_stem="conv").patch_size == 8
