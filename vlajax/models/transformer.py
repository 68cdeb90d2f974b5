"""The decoder-style transformer used by the prefix ("VLM"), the flow expert and the token head.

A `Stack` of pre-norm blocks: RMSNorm -> grouped-query attention with RoPE -> residual ->
RMSNorm -> gated MLP -> residual. Each block returns its keys and values so that a later
stack (the action expert, or the same stack run on action tokens) can attend to them:
passing `cache` makes block l attend to `concat(cache[l], own keys)`. That is how prefix-LM
masking is realised: the prefix never sees the suffix, the suffix sees the prefix and itself.

Shapes: x [B, T, E]; segment_ids, positions int32 [B, T]; a cache is a `KVCache` whose
k/v are tuples over layers of [B, S, KVH, D] with segment_ids/positions [B, S].
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from vlajax.models.attention import attend
from vlajax.models.layers import RMSNorm, constrain, dense, rope


@flax.struct.dataclass
class KVCache:
    """Keys/values of every layer of a stack, with the token bookkeeping needed to attend to them."""

    k: tuple[jax.Array, ...]  # per layer [B, S, KVH, D], RoPE applied
    v: tuple[jax.Array, ...]  # per layer [B, S, KVH, D]
    segment_ids: jax.Array  # int32 [B, S]; 0 = padding
    positions: jax.Array  # int32 [B, S]


class Attention(nn.Module):
    """GQA self-attention (optionally also over cached keys). x [B,T,E] -> ([B,T,E], (k, v))."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    use_rope: bool = True
    rope_max_wavelength: float = 10_000.0
    causal: bool = False
    backend: str = "xla"
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    dot_general_cls: Any = None

    @nn.compact
    def __call__(self, x, segment_ids, positions, cache_kv=None, cache_segment_ids=None, cache_positions=None):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, dot_general_cls=self.dot_general_cls)
        h, kvh, d = self.num_heads, self.num_kv_heads, self.head_dim
        q = dense((h, d), ("embed", "heads", "head_dim"), name="q", **kw)(x)
        k = dense((kvh, d), ("embed", "kv_heads", "head_dim"), name="k", **kw)(x)
        v = dense((kvh, d), ("embed", "kv_heads", "head_dim"), name="v", **kw)(x)
        if self.use_rope:
            q = rope(q, positions, self.rope_max_wavelength)
            k = rope(k, positions, self.rope_max_wavelength)
        q = constrain(q, ("act_batch", "act_len", "act_heads", None))
        new_kv = (k, v)
        kv_seg, kv_pos = segment_ids, positions
        if cache_kv is not None:
            k = jnp.concatenate([cache_kv[0].astype(k.dtype), k], axis=1)
            v = jnp.concatenate([cache_kv[1].astype(v.dtype), v], axis=1)
            kv_seg = jnp.concatenate([cache_segment_ids, segment_ids], axis=1)
            kv_pos = jnp.concatenate([cache_positions, positions], axis=1)
        out = attend(q, k, v, segment_ids, kv_seg, positions, kv_pos, causal=self.causal, backend=self.backend)
        out = dense(x.shape[-1], ("heads", "head_dim", "embed"), axis=(-2, -1), name="o", **kw)(out)
        return out, new_kv


class GatedMLP(nn.Module):
    """GeGLU MLP: down(gelu(gate(x)) * up(x)). x [B,T,E] -> [B,T,E]."""

    hidden: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    dot_general_cls: Any = None

    @nn.compact
    def __call__(self, x):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, dot_general_cls=self.dot_general_cls)
        gate = dense((2, self.hidden), ("embed", None, "mlp"), name="gate_up", **kw)(x)
        hid = nn.gelu(gate[..., 0, :]) * gate[..., 1, :]
        hid = constrain(hid, ("act_batch", "act_len", "act_mlp"))
        return dense(x.shape[-1], ("mlp", "embed"), name="down", **kw)(hid)


class Block(nn.Module):
    """Pre-norm transformer block. x [B,T,E] -> ([B,T,E], (k, v))."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_dim: int
    rope_max_wavelength: float = 10_000.0
    causal: bool = False
    backend: str = "xla"
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    dot_general_cls: Any = None

    @nn.compact
    def __call__(self, x, segment_ids, positions, cache_kv=None, cache_segment_ids=None, cache_positions=None):
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype, dot_general_cls=self.dot_general_cls)
        y = RMSNorm(param_dtype=self.param_dtype, name="attn_norm")(x)
        y, kv = Attention(
            self.num_heads, self.num_kv_heads, self.head_dim, rope_max_wavelength=self.rope_max_wavelength,
            causal=self.causal, backend=self.backend, name="attn", **kw,
        )(y, segment_ids, positions, cache_kv, cache_segment_ids, cache_positions)
        x = constrain(x + y, ("act_batch", "act_len", "act_embed"))
        y = RMSNorm(param_dtype=self.param_dtype, name="mlp_norm")(x)
        y = GatedMLP(self.mlp_dim, name="mlp", **kw)(y)
        x = constrain(x + y, ("act_batch", "act_len", "act_embed"))
        return x, kv


class Stack(nn.Module):
    """`depth` blocks and a final RMSNorm. x [B,T,E] -> (y [B,T,E], KVCache of this stack's tokens).

    With `cache` (a KVCache of another run with the same depth), block l also attends to cache layer l.
    """

    depth: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_dim: int
    rope_max_wavelength: float = 10_000.0
    causal: bool = False
    backend: str = "xla"
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    dot_general_cls: Any = None
    remat: bool = False

    def setup(self):
        block_cls = nn.remat(Block) if self.remat else Block
        self.blocks = [
            block_cls(
                self.num_heads, self.num_kv_heads, self.head_dim, self.mlp_dim, self.rope_max_wavelength,
                self.causal, self.backend, self.dtype, self.param_dtype, self.dot_general_cls, name=f"block_{i}",
            )
            for i in range(self.depth)
        ]
        self.final_norm = RMSNorm(param_dtype=self.param_dtype)

    def __call__(self, x, segment_ids, positions, cache: KVCache | None = None):
        if cache is not None and len(cache.k) != self.depth:
            raise ValueError(f"cache has {len(cache.k)} layers, stack has {self.depth}")
        x = constrain(x.astype(self.dtype), ("act_batch", "act_len", "act_embed"))
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            ckv = None if cache is None else (cache.k[i], cache.v[i])
            x, (k, v) = block(
                x, segment_ids, positions, ckv,
                None if cache is None else cache.segment_ids, None if cache is None else cache.positions,
            )
            ks.append(k)
            vs.append(v)
        return self.final_norm(x), KVCache(tuple(ks), tuple(vs), segment_ids, positions)
