"""SigLIP ViT image encoder as PaliGemma uses it (big_vision ViT, `pool_type='none'`, learned posemb).

images [N, S, S, 3] in [-1, 1] -> tokens [N, (S/p)^2, out_width]: patchify (a p x p stride-p linear
map, done in float32), add a learned position embedding, `depth` pre-LayerNorm blocks (multi-head
attention, GELU MLP), a final LayerNorm and a linear head to the VLM's width.

Parameters: patch/kernel [p, p, 3, W], patch/bias [W], pos_embedding [1, n, W], blocks/... stacked
on a leading `layers` axis (ln_attn, q/k/v kernel [W, heads, W/heads] + bias, o kernel
[heads, W/heads, W] + bias, ln_mlp, mlp_in, mlp_out), norm, head kernel [W, out_width] + bias.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlajax.models.layers import constrain, dense


def _layer_norm(name: str, param_dtype, dtype) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=1e-6, dtype=dtype, param_dtype=param_dtype, name=name,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), (None,)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,)),
    )


class EncoderBlock(nn.Module):
    """Pre-LN transformer block. x [N, L, W] -> ([N, L, W], None) (scan-shaped)."""

    num_heads: int
    mlp_dim: int
    dtype: Any
    param_dtype: Any

    @nn.compact
    def __call__(self, x, _):
        w, h = x.shape[-1], self.num_heads
        d = w // h
        kw = dict(use_bias=True, dtype=self.dtype, param_dtype=self.param_dtype)
        y = _layer_norm("ln_attn", self.param_dtype, self.dtype)(x)
        q = dense((h, d), ("embed", "heads", "head_dim"), name="q", **kw)(y)
        k = dense((h, d), ("embed", "heads", "head_dim"), name="k", **kw)(y)
        v = dense((h, d), ("embed", "heads", "head_dim"), name="v", **kw)(y)
        q = q / jnp.sqrt(d).astype(q.dtype)
        logits = jnp.einsum("...qhd,...khd->...hqk", q, k)
        probs = jax.nn.softmax(logits.astype(jnp.float32)).astype(self.dtype)
        att = jnp.einsum("...hqk,...khd->...qhd", probs, v)
        x = x + dense(w, ("heads", "head_dim", "embed"), axis=(-2, -1), name="o", **kw)(att)
        y = _layer_norm("ln_mlp", self.param_dtype, self.dtype)(x)
        y = nn.gelu(dense(self.mlp_dim, ("embed", "mlp"), name="mlp_in", **kw)(y))
        x = x + dense(w, ("mlp", "embed"), name="mlp_out", **kw)(y)
        return constrain(x, ("act_batch", "act_len", "act_embed")), None


class SigLIP(nn.Module):
    """The image encoder (sizes from `ModelConfig.siglip`). images [N,S,S,3] in [-1,1] -> [N, n, out_width]."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch: int
    out_width: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    remat: bool = False

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        n, s, _, c = images.shape
        p, g = self.patch, s // self.patch
        x = images.astype(jnp.float32).reshape(n, g, p, g, p, c).transpose(0, 1, 3, 2, 4, 5)
        x = dense(self.width, (None, None, None, "embed"), axis=(-3, -2, -1), use_bias=True,
                  param_dtype=self.param_dtype, name="patch")(x).reshape(n, g * g, self.width)
        pos = self.param("pos_embedding", nn.with_logical_partitioning(
            nn.initializers.normal(self.width ** -0.5), (None, None, "embed")), (1, g * g, self.width),
            self.param_dtype)
        x = (x + pos.astype(jnp.float32)).astype(self.dtype)
        block = nn.remat(EncoderBlock, prevent_cse=False) if self.remat else EncoderBlock
        x, _ = nn.scan(block, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.depth,
                       metadata_params={nn.PARTITION_NAME: "layers"})(
            self.num_heads, self.mlp_dim, self.dtype, self.param_dtype, name="blocks")(x, None)
        x = _layer_norm("norm", self.param_dtype, self.dtype)(x)
        return dense(self.out_width, (None, "embed"), use_bias=True, dtype=self.dtype,
                     param_dtype=self.param_dtype, name="head")(x)
