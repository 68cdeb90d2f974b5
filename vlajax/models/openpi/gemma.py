"""Multi-expert Gemma: a VLM expert and an action expert with their own weights, one joint attention.

Each layer runs every present expert's RMSNorm and q/kv projections on its own tokens, concatenates
the queries/keys/values of all experts along the sequence, attends once (GQA, RoPE, boolean mask
[B, T, S] over the concatenation plus any cached prefix keys), then splits the result back and
applies each expert's output projection and gated MLP. This is the computation of openpi's
`gemma.Module` with `configs=[paligemma, action_expert]`; the expert given `cond` uses adaptive
RMSNorm (pi0.5: `x_norm * (1 + scale(c)) + shift(c)`, residuals gated by `gate(c)`).

Parameters (layers stacked on a leading `layers` axis by `nn.scan`; expert i in `e{i}`):
  embed [V, W0]; layers/e{i}_in/{attn_norm, q [N, Wi, D], kv [2, K, Wi, D]}, layers/e{i}_out/{o [N, D, Wi], mlp_norm,
  gate_up [2, Wi, M], down [M, Wi]}; final_norms_{i}. A norm is `scale` [W] or, adaptive, `kernel`
  [C, 3W] + `bias` [3W] (C = the condition width). With a LoRA rank r > 0 for expert i, each of q,
  kv, o, gate_up, down gains `<name>_lora_a` / `<name>_lora_b` (openpi's factor shapes, scale 1).
Shapes: xs is a tuple with one entry per expert, [B, T_i, W_i] or None (expert not run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlajax.models.layers import constrain

_BIG_NEG = -2.3819763e38  # masked logit (Gemma's value)


def rope(x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0) -> jax.Array:
    """Rotary embedding, rotate-half. x [B, T, N, D], positions int [B, T] -> [B, T, N, D] in x.dtype."""
    half = x.shape[-1] // 2
    timescale = max_wavelength ** ((2.0 / x.shape[-1]) * jnp.arange(half, dtype=jnp.float32))
    ang = (positions[..., None] / timescale[None, None, :])[..., None, :]  # [B, T, 1, D/2] f32
    sin, cos = jnp.sin(ang), jnp.cos(ang)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class Norm(nn.Module):
    """RMSNorm with a `(1 + scale)` gain, or adaptive (cond [B, C] -> scale, shift, gate).

    x [B, T, W] -> (y [B, T, W] in x.dtype, gate [B, 1, W] | None).
    """

    adaptive: bool = False
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, cond: jax.Array | None = None):
        w = x.shape[-1]
        var = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        y = x * jnp.reciprocal(jnp.sqrt(var + 1e-6))
        if not self.adaptive:
            scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,)),
                               (w,), self.param_dtype)
            return (y * (1 + scale)).astype(x.dtype), None
        kernel = self.param("kernel", nn.with_logical_partitioning(nn.initializers.zeros_init(), ("embed", "mlp")),
                            (cond.shape[-1], 3 * w), self.param_dtype)
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros_init(), ("mlp",)),
                          (3 * w,), self.param_dtype)
        mod = (jnp.dot(cond.astype(x.dtype), kernel.astype(x.dtype)) + bias.astype(x.dtype))[:, None, :]
        scale, shift, gate = jnp.split(mod, 3, axis=-1)
        return (y * (1 + scale) + shift).astype(x.dtype), gate


def _param(mod: nn.Module, name: str, names: tuple, shape: tuple, dtype, in_axis=-2, out_axis=-1, batch=()):
    init = nn.initializers.lecun_normal(in_axis=in_axis, out_axis=out_axis, batch_axis=batch)
    return mod.param(name, nn.with_logical_partitioning(init, names), shape, dtype)


def _lora(mod: nn.Module, name: str, names_a: tuple, shape_a: tuple, names_b: tuple, shape_b: tuple):
    """LoRA factors `<name>_lora_a`, `<name>_lora_b` (openpi's init: N(0, 0.01^2)), cast to mod.dtype.

    The update is a @ b with scale 1 (openpi's LoRA variants use alpha = rank)."""
    init = nn.initializers.normal(0.01)
    a = mod.param(f"{name}_lora_a", nn.with_logical_partitioning(init, names_a), shape_a, mod.param_dtype)
    b = mod.param(f"{name}_lora_b", nn.with_logical_partitioning(init, names_b), shape_b, mod.param_dtype)
    return a.astype(mod.dtype), b.astype(mod.dtype)


class ExpertIn(nn.Module):
    """Pre-attention norm and q/k/v of one expert. x [B,T,W] -> (q [B,T,N,D], k, v [B,T,K,D], gate)."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    adaptive: bool
    dtype: Any
    param_dtype: Any
    lora_rank: int = 0

    @nn.compact
    def __call__(self, x, cond):
        n, k, d, w, r = self.num_heads, self.num_kv_heads, self.head_dim, x.shape[-1], self.lora_rank
        y, gate = Norm(self.adaptive, self.param_dtype, name="attn_norm")(x, cond)
        wq = _param(self, "q", ("heads", "embed", "head_dim"), (n, w, d), self.param_dtype, batch=(0,))
        wkv = _param(self, "kv", (None, "kv_heads", "embed", "head_dim"), (2, k, w, d), self.param_dtype,
                     batch=(0, 1))
        q = jnp.einsum("BTD,NDH->BTNH", y, wq.astype(self.dtype))
        kv = jnp.einsum("BSD,CKDH->CBSKH", y, wkv.astype(self.dtype))
        if r:
            qa, qb = _lora(self, "q", ("heads", "embed", None), (n, w, r), ("heads", None, "head_dim"), (n, r, d))
            q = q + jnp.einsum("BTNL,NLH->BTNH", jnp.einsum("BTD,NDL->BTNL", y, qa), qb)
            ka, kb = _lora(self, "kv", (None, "kv_heads", "embed", None), (2, k, w, r),
                           (None, "kv_heads", None, "head_dim"), (2, k, r, d))
            kv = kv + jnp.einsum("CBSKL,CKLH->CBSKH", jnp.einsum("BSD,CKDL->CBSKL", y, ka), kb)
        return q, kv[0], kv[1], gate


class ExpertOut(nn.Module):
    """Output projection, residual, pre-MLP norm, gated GELU MLP, residual of one expert.

    x [B,T,W] (block input), att [B,T,N,D] -> [B,T,W].
    """

    mlp_dim: int
    adaptive: bool
    dtype: Any
    param_dtype: Any
    lora_rank: int = 0

    @nn.compact
    def __call__(self, x, att, gate, cond):
        n, d, w, m, r = att.shape[-2], att.shape[-1], x.shape[-1], self.mlp_dim, self.lora_rank
        wo = _param(self, "o", ("heads", "head_dim", "embed"), (n, d, w), self.param_dtype, in_axis=(-3, -2))
        y = jnp.einsum("BTNH,NHD->BTD", att, wo.astype(self.dtype))
        if r:  # openpi's LoRA equations for this einsum (its second factor is summed over heads)
            oa, ob = _lora(self, "o", ("heads", "head_dim", None), (n, d, r), ("heads", None, "embed"), (n, r, w))
            y = y + jnp.einsum("BTL,NLD->BTD", jnp.einsum("BTNH,NHL->BTL", att, oa), ob)
        x = x + y if gate is None else x + y * gate
        y, gate = Norm(self.adaptive, self.param_dtype, name="mlp_norm")(x, cond)
        wg = _param(self, "gate_up", (None, "embed", "mlp"), (2, w, m), self.param_dtype, batch=(0,))
        wd = _param(self, "down", ("mlp", "embed"), (m, w), self.param_dtype)
        wg, wd = wg.astype(self.dtype), wd.astype(self.dtype)
        g0, g1 = jnp.dot(y, wg[0]), jnp.dot(y, wg[1])
        if r:
            ga, gb = _lora(self, "gate_up", (None, "embed", None), (2, w, r), (None, None, "mlp"), (2, r, m))
            g0, g1 = g0 + jnp.dot(jnp.dot(y, ga[0]), gb[0]), g1 + jnp.dot(jnp.dot(y, ga[1]), gb[1])
        h = nn.gelu(g0) * g1
        h = constrain(h, ("act_batch", "act_len", "act_mlp"))
        y = jnp.dot(h, wd)
        if r:
            da, db = _lora(self, "down", ("mlp", None), (m, r), (None, "embed"), (r, w))
            y = y + jnp.dot(jnp.dot(h, da), db)
        return x + y if gate is None else x + y * gate


def attend(q, k, v, mask, dtype):
    """GQA. q [B,T,N,D] (already scaled), k/v [B,S,K,D], mask bool [B,T,S] -> [B,T,N,D].

    A query row with no allowed key attends uniformly to every key (as openpi's does).
    """
    b, t, n, d = q.shape
    kh = k.shape[2]
    q = q.reshape(b, t, kh, n // kh, d)
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, k, preferred_element_type=jnp.float32)
    logits = jnp.where(mask[:, None, None], logits, _BIG_NEG)
    probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
    return jnp.einsum("BKGTS,BSKH->BTKGH", probs, v).reshape(b, t, n, d)


class Block(nn.Module):
    """One joint layer. carry xs (tuple per expert), cache (k, v) [B,S,K,D] | None -> (xs, (k, v))."""

    sizes: tuple[dict, ...]  # GEMMA_VARIANTS entries, one per expert
    adaptive: tuple[bool, ...]
    dtype: Any
    param_dtype: Any
    lora_ranks: tuple[int, ...] = (0, 0)

    @nn.compact
    def __call__(self, xs, cache, positions, mask, conds):
        s0 = self.sizes[0]
        kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        ins, qs, ks, vs = [], [], [], []
        for i, (x, s) in enumerate(zip(xs, self.sizes)):
            if x is None:
                ins.append(None)
                continue
            q, k, v, gate = ExpertIn(s["num_heads"], s["num_kv_heads"], s["head_dim"], self.adaptive[i],
                                     lora_rank=self.lora_ranks[i], name=f"e{i}_in", **kw)(x, conds[i])
            ins.append(gate)
            qs.append(q), ks.append(k), vs.append(v)
        q, k, v = (jnp.concatenate(a, axis=1) for a in (qs, ks, vs))
        q = rope(q, positions) * s0["head_dim"] ** -0.5
        k = rope(k, positions)
        new_kv = (k, v)
        if cache is not None:
            k = jnp.concatenate([cache[0], k], axis=1)
            v = jnp.concatenate([cache[1], v], axis=1)
        att = attend(q, k, v, mask, self.dtype)
        out, start = [], 0
        for i, (x, s) in enumerate(zip(xs, self.sizes)):
            if x is None:
                out.append(None)
                continue
            a = att[:, start:start + x.shape[1]]
            start += x.shape[1]
            y = ExpertOut(s["mlp_dim"], self.adaptive[i], lora_rank=self.lora_ranks[i], name=f"e{i}_out",
                          **kw)(x, a, ins[i], conds[i])
            out.append(constrain(y, ("act_batch", "act_len", "act_embed")))
        return tuple(out), new_kv


class Gemma(nn.Module):
    """The joint Gemma stack: `embed(tokens)` and `__call__(xs, positions, mask, conds, cache)`."""

    sizes: tuple[dict, ...]
    adaptive: tuple[bool, ...]
    vocab_size: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    remat: bool = False
    lora_ranks: tuple[int, ...] = (0, 0)  # per expert; 0 = no LoRA factors

    def setup(self):
        w0 = self.sizes[0]["width"]
        self.embedding = self.param("embed", nn.with_logical_partitioning(nn.initializers.normal(), ("vocab", "embed")),
                                    (self.vocab_size, w0), self.param_dtype)
        block = nn.remat(Block, prevent_cse=False) if self.remat else Block
        self.layers = nn.scan(
            block, variable_axes={"params": 0}, split_rngs={"params": True},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast), length=self.sizes[0]["depth"],
            metadata_params={nn.PARTITION_NAME: "layers"},
        )(self.sizes, self.adaptive, self.dtype, self.param_dtype, self.lora_ranks)
        self.final_norms = [Norm(a, self.param_dtype) for a in self.adaptive]

    def embed(self, tokens: jax.Array) -> jax.Array:
        """Token ids int [B, T] -> [B, T, W0] scaled by sqrt(W0), in `dtype`."""
        x = self.embedding[(tokens,)]
        x = x * jnp.sqrt(self.sizes[0]["width"]).astype(x.dtype)
        return x.astype(self.dtype)

    def __call__(self, xs: Sequence[jax.Array | None], positions: jax.Array, mask: jax.Array,
                 conds: Sequence[jax.Array | None] | None = None, cache=None):
        """xs per expert [B, T_i, W_i] | None; positions int [B, T] (T = sum of present T_i);
        mask bool [B, T, S] (S = cached + T); conds per expert [B, W_i] | None; cache (k, v) stacked
        [L, B, S', K, D] | None. -> (outputs per expert after the final norm, (k, v) [L, B, T, K, D])."""
        xs = tuple(None if x is None else x.astype(self.dtype) for x in xs)
        conds = tuple(conds) if conds is not None else (None,) * len(self.sizes)
        xs, kv = self.layers(xs, cache, positions, mask, conds)
        outs = tuple(None if x is None else f(x, c)[0] for f, x, c in zip(self.final_norms, xs, conds))
        return outs, kv
