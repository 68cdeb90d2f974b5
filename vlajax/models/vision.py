"""The vision tower: a ViT over non-overlapping patches, shared by all cameras.

Images float32 [N, H, W, 3] in [0, 1] (resized to `image_size` if needed) -> tokens
[N, (image_size / patch_size)^2, out_width]. The patch tokens come from a linear embedding of
each patch's pixels (`stem='patch'`), or from a convolutional stem (`stem='conv'`:
log2(patch_size) 3x3 stride-2 convolutions with LayerNorm and GELU, channels doubling up to
`width`, then a linear map; Xiao et al. 2021, "Early convolutions help transformers see better"),
which sees objects of a few pixels through a non-linear filter before a patch mixes them.
Fixed 2-D sine-cosine position embeddings (big_vision's `posemb_sincos_2d`), pre-LayerNorm
blocks, GELU MLP, a final LayerNorm and a linear projection to the prefix width. The tower
lives under `params["vision"]`, which is what block-wise PTQ leaves untouched.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlajax.models.layers import constrain, dense, sincos_2d
from vlajax.models.transformer import Attention


class _MLP(nn.Module):
    hidden: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, use_bias=True)
        h = nn.gelu(dense(self.hidden, ("embed", "mlp"), name="up", **kw)(x))
        h = constrain(h, ("act_batch", "act_len", "act_mlp"))
        return dense(x.shape[-1], ("mlp", "embed"), name="down", **kw)(h)


def _layer_norm(name: str, param_dtype) -> nn.LayerNorm:
    return nn.LayerNorm(
        param_dtype=param_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), (None,)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,)),
        name=name,
    )


class ViT(nn.Module):
    """Patchify -> ViT blocks -> LayerNorm -> project. images [N,H,W,3] -> [N, P, out_width]."""

    image_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    out_width: int
    backend: str = "xla"
    stem: str = "patch"  # 'patch': linear patch embedding; 'conv': stride-2 3x3 convolutions (patch_size = 2^k)
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        n, h, w, c = images.shape
        s, p = self.image_size, self.patch_size
        if (h, w) != (s, s):
            images = jax.image.resize(images, (n, s, s, c), "bilinear")
        x = images.astype(self.dtype) * 2.0 - 1.0
        g = s // p
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        if self.stem == "conv":
            x = self._conv_stem(x)  # [n, g, g, width]
            x = x.reshape(n, g * g, x.shape[-1])
        else:
            x = x.reshape(n, g, p, g, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, g * g, p * p * c)
        x = dense(self.width, ("patch", "embed"), use_bias=True, name="patch_embed", **kw)(x)
        x = x + sincos_2d(g, g, self.width).astype(x.dtype)[None]
        x = constrain(x, ("act_batch", "act_len", "act_embed"))
        seg = jnp.ones((n, g * g), jnp.int32)
        pos = jnp.broadcast_to(jnp.arange(g * g, dtype=jnp.int32), (n, g * g))
        head_dim = self.width // self.num_heads
        for i in range(self.depth):
            y = _layer_norm(f"block_{i}_ln1", self.param_dtype)(x)
            y, _ = Attention(self.num_heads, self.num_heads, head_dim, use_rope=False, backend=self.backend,
                             name=f"block_{i}_attn", **kw)(y, seg, pos)
            x = x + y
            y = _layer_norm(f"block_{i}_ln2", self.param_dtype)(x)
            x = constrain(x + _MLP(self.mlp_dim, name=f"block_{i}_mlp", **kw)(y), ("act_batch", "act_len", "act_embed"))
        x = _layer_norm("final_ln", self.param_dtype)(x)
        return dense(self.out_width, (None, "embed"), use_bias=True, name="project", **kw)(x)

    def _conv_stem(self, x: jax.Array) -> jax.Array:
        """[N, S, S, 3] -> [N, S / patch_size, S / patch_size, width]: k = log2(patch_size) 3x3 stride-2
        convolutions, channels width / 2^(k-1), ..., width, each followed by a LayerNorm over its channels
        and GELU (the kernels are small and replicated: no logical axis). Without the norms the stem's
        tokens start ~7x smaller than the linear patch embedding's, below the position embedding's scale,
        and a grounding run stayed at chance for the 1250 steps it ran."""
        k = self.patch_size.bit_length() - 1
        if self.patch_size != 1 << k:
            raise ValueError(f"vision stem 'conv' needs a power-of-2 patch_size, got {self.patch_size}")
        init = nn.with_logical_partitioning(nn.initializers.lecun_normal(), (None, None, None, None))
        bias = nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,))
        for i in range(k):
            ch = max(self.width >> (k - 1 - i), 8)
            x = nn.Conv(ch, (3, 3), strides=(2, 2), padding="SAME", kernel_init=init, bias_init=bias,
                        dtype=self.dtype, param_dtype=self.param_dtype, name=f"stem_conv_{i}")(x)
            x = nn.gelu(_layer_norm(f"stem_ln_{i}", self.param_dtype)(x))
        return x
