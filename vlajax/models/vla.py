"""The VLA module: vision tower + text/state embedding + prefix transformer + action head modules.

Parameter tree (top-level names matter: PTQ quantizes `llm`, `expert`, never `vision`):
  vision   ViT shared by all cameras
  embed    text embedding table [vocab, width]; `state_proj` the state token
  llm      prefix transformer `Stack` (the "VLM")
  expert   flow action expert `Stack` (flow head) -- attends to the prefix's per-layer keys/values
  action_* input/output projections of the head; `value` the optional value MLP

Methods (call with `model.apply(variables, ..., method=VLA.<name>)`; the head functions in
`vlajax.models.heads` compose them):
  embed_prefix(obs)                    -> emb [B, L, W], mask bool [B, L]  (L = cfg.prefix_len)
  encode_prefix(emb, seg, pos)         -> hidden [B, L, W], KVCache   (packed rows: explicit seg/pos)
  prefix(obs)                          -> hidden, KVCache             (unpacked: seg = mask, pos = cumsum)
  velocity(cache, x_t, t, target=None) -> v [B, H, A], log_std [B, H, A] | None, hidden [B, H, We]
  action_logits(cache, target=None)    -> logits [B, H, A, bins], hidden [B, H*A, W]
  value(hidden_prefix, prefix_mask, cache) -> [B]
  aux_raw(hidden_prefix, prefix_mask) -> [B, aux_raw_dims]  (`cfg.aux_target`; what `aux_loss` trains)
  aux_target(hidden_prefix, prefix_mask) -> [B, D]   aux_raw decoded (grasp bins -> xy, `cfg.aux_grasp_bins`)
  predicted_target(hidden_prefix, prefix_mask) -> [B, D]  aux_target, gradient-stopped: the action
                                       head's condition at inference (`cfg.target_conditioning`)

Target conditioning (`cfg.target_conditioning`): `velocity` / `action_logits` take `target` [B, D]
(D = AUX_TARGET_DIMS[cfg.aux_target], normalized like the aux target), projected by `target_in` to
the head's width and added to every action token (flow) or action query (tokens). SFT passes the
demo's own target (teacher forcing); `vlajax.models.heads` passes `predicted_target(prefix)`.
Without the flag there is no `target_in` parameter and `target` must be None.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from vlajax.config.schema import ModelConfig
from vlajax.models import fp8
from vlajax.models.attention import resolve_backend
from vlajax.models.layers import DTYPES, constrain, dense, sincos_embedding
from vlajax.models.observation import Observation
from vlajax.models.transformer import KVCache, Stack
from vlajax.models.vision import ViT

# `ModelConfig.aux_target` -> predicted dims
AUX_TARGET_DIMS = {"grasp_place": 4, "grasp_place_pregrasp": 4, "grasp_place_start": 4}
AUX_GRASP_RANGE = 2.5  # `cfg.aux_grasp_bins`: the grid spans [-R, R]^2 of the normalized grasp xy


def aux_raw_dims(cfg: ModelConfig) -> int:
    """Outputs of the aux head: D regressed numbers, or K*K grasp-bin logits + the D - 2 regressed rest."""
    d, k = AUX_TARGET_DIMS[cfg.aux_target], cfg.aux_grasp_bins
    return k * k + d - 2 if k else d


def grasp_bin_centers(bins: int) -> jax.Array:
    """Centres f32 [K*K, 2] of the K x K grid over [-R, R]^2; bin i*K + j has x index i, y index j."""
    c = (jnp.arange(bins, dtype=jnp.float32) + 0.5) * (2 * AUX_GRASP_RANGE / bins) - AUX_GRASP_RANGE
    return jnp.stack(jnp.meshgrid(c, c, indexing="ij"), -1).reshape(bins * bins, 2)


def grasp_bin_labels(xy: jax.Array, bins: int) -> jax.Array:
    """Soft labels f32 [N, K*K] for targets xy [N, 2]: a Gaussian of std half a bin's width around each
    (clipped into the grid), normalized to sum 1 (its mass outside the 3 x 3 bins that
    `decode_grasp_bins` reads is ~1%, so decoding the labels gives the target back)."""
    sigma = AUX_GRASP_RANGE / bins
    xy = jnp.clip(xy, -AUX_GRASP_RANGE, AUX_GRASP_RANGE)
    d2 = jnp.sum((grasp_bin_centers(bins)[None] - xy[:, None]) ** 2, -1)
    return jax.nn.softmax(-0.5 * d2 / sigma**2, axis=-1)


def decode_grasp_bins(logits: jax.Array, bins: int) -> jax.Array:
    """Logits [N, K*K] -> xy f32 [N, 2]: the probability-weighted centre of the 3 x 3 bins around the
    most likely bin (sub-bin precision without averaging across distant modes)."""
    best = jnp.argmax(logits, -1)
    i, j = jnp.divmod(jnp.arange(bins * bins), bins)
    near = (jnp.abs(i[None] - (best // bins)[:, None]) <= 1) & (jnp.abs(j[None] - (best % bins)[:, None]) <= 1)
    w = jax.nn.softmax(jnp.where(near, logits.astype(jnp.float32), -jnp.inf), -1)
    return w @ grasp_bin_centers(bins)


def decode_aux(cfg: ModelConfig, raw: jax.Array) -> jax.Array:
    """raw [N, aux_raw_dims] -> the aux prediction f32 [N, D] (normalized like the aux target): raw
    itself, or with `cfg.aux_grasp_bins` the grasp bins decoded to xy (`decode_grasp_bins`) + the rest."""
    k = cfg.aux_grasp_bins
    if not k:
        return raw
    return jnp.concatenate([decode_grasp_bins(raw[:, : k * k], k), raw[:, k * k:]], -1)


def weighted_mean(x: jax.Array, weights: jax.Array) -> jax.Array:
    """x [N, ...], weights [N] (0 = not counted; every element of row n weighs weights[n]) -> the weighted
    mean over all elements (0 when no weight)."""
    w = jnp.broadcast_to(weights.astype(jnp.float32).reshape(weights.shape + (1,) * (x.ndim - 1)), x.shape)
    return jnp.sum(w * x) / jnp.maximum(w.sum(), 1.0)


def weighted_mse(pred: jax.Array, target: jax.Array, weights: jax.Array) -> jax.Array:
    """pred, target [N, D], weights [N] (0 = not counted) -> the weighted mean of the squared errors."""
    return weighted_mean((pred - target) ** 2, weights)


def aux_loss(cfg: ModelConfig, raw: jax.Array, target: jax.Array, weights: jax.Array):
    """The aux head's training loss. raw [N, aux_raw_dims] (`VLA.aux_raw`), target [N, D'] normalized
    (D' = D, or 2 = the grasp xy alone), weights [N] (0 = not counted).
    -> (scalar loss, decoded prediction f32 [N, D'], metrics). Regression: the weighted MSE (metric
    `aux_target_mse`, the loss itself). `cfg.aux_grasp_bins`: the weighted cross-entropy of the grasp
    bins (`aux_grasp_ce`) plus the MSE of the regressed rest; `aux_target_mse` is then the decoded
    prediction's MSE (a metric, not the loss)."""
    k = cfg.aux_grasp_bins
    pred = decode_aux(cfg, raw)[:, : target.shape[1]]
    if not k:
        mse = weighted_mse(pred, target, weights)
        return mse, pred, {"aux_target_mse": mse}
    rest = raw[:, k * k:]
    logp = jax.nn.log_softmax(raw[:, : k * k].astype(jnp.float32), -1)
    ce_each = -jnp.sum(grasp_bin_labels(target[:, :2], k) * logp, -1)
    ce = weighted_mean(ce_each, weights)
    loss = ce + (weighted_mse(rest, target[:, 2:], weights) if target.shape[1] > 2 else 0.0)
    return loss, pred, {"aux_grasp_ce": ce, "aux_target_mse": weighted_mse(pred, target, weights)}


def suffix_layout(cache: KVCache, length: int) -> tuple[jax.Array, jax.Array]:
    """Segment ids and positions [B, length] for suffix tokens that follow an unpacked prefix."""
    b = cache.segment_ids.shape[0]
    start = jnp.sum(cache.segment_ids > 0, axis=1, keepdims=True).astype(jnp.int32)
    return jnp.ones((b, length), jnp.int32), start + jnp.arange(length, dtype=jnp.int32)[None]


class VLA(nn.Module):
    """The whole policy network for one `ModelConfig` (see the module docstring for the methods)."""

    cfg: ModelConfig

    def setup(self):
        c = self.cfg
        dt, pdt = DTYPES[c.dtype], DTYPES[c.param_dtype]
        dgc = fp8.dot_general_cls(c.fp8)
        backend = resolve_backend(c.attention)
        kw = dict(dtype=dt, param_dtype=pdt)
        self.vision = ViT(c.image_size, c.patch_size, c.vit_width, c.vit_depth, c.vit_heads, c.vit_mlp_dim,
                          c.width, backend=backend, stem=c.vision_stem, **kw)
        self.embed = nn.Embed(c.vocab_size, c.width, embedding_init=nn.with_logical_partitioning(
            nn.initializers.normal(1.0), ("vocab", "embed")), **kw)
        if c.use_state_token:
            self.state_proj = dense(c.width, (None, "embed"), use_bias=True, **kw)
        stack = dict(depth=c.depth, num_heads=c.num_heads, num_kv_heads=c.num_kv_heads, head_dim=c.head_dim,
                     rope_max_wavelength=c.rope_max_wavelength, backend=backend, dot_general_cls=dgc,
                     remat=c.remat, **kw)
        self.llm = Stack(mlp_dim=c.mlp_dim, **stack)
        if c.action_head == "flow":
            self.expert = Stack(mlp_dim=c.expert_mlp_dim, **stack)
            self.action_in = dense(c.expert_width, (None, "embed"), use_bias=True, **kw)
            self.time_mlp_in = dense(c.expert_width, (None, "embed"), use_bias=True, **kw)
            self.time_mlp_out = dense(c.expert_width, ("mlp", "embed"), use_bias=True, **kw)
            self.action_out = dense(c.action_dim, ("embed", None), use_bias=True, init_scale=0.1, **kw)
            if c.flow_sampler == "flow_noise":
                self.noise_std = dense(c.action_dim, ("embed", None), use_bias=True, init_scale=0.1, **kw)
        else:
            self.action_queries = self.param(
                "action_queries", nn.with_logical_partitioning(nn.initializers.normal(0.02), (None, "embed")),
                (c.action_horizon * c.action_dim, c.width), pdt)
            self.bin_head = dense(c.num_bins, ("embed", "vocab"), use_bias=True, **kw)
        if c.target_conditioning:
            self.target_in = dense(c.expert_width if c.action_head == "flow" else c.width, (None, "embed"),
                                   use_bias=True, **kw)
        if c.aux_target != "none":
            self.aux_score = dense(1, ("embed", None), use_bias=True, **kw)
            self.aux_hidden = dense(c.width, ("embed", "mlp"), use_bias=True, **kw)
            self.aux_out = dense(aux_raw_dims(c), ("mlp", None), use_bias=True, **kw)
        if c.value_head != "none":
            self.value_hidden = dense(c.width, ("embed", "mlp"), use_bias=True, **kw)
            self.value_out = dense(1, ("mlp", None), use_bias=True, **kw)

    # ---------------------------------------------------------------- prefix

    def embed_prefix(self, obs: Observation) -> tuple[jax.Array, jax.Array]:
        """Image, text and state tokens, padded to `cfg.prefix_len`. -> emb [B, L, W], mask [B, L]."""
        c = self.cfg
        b = obs.batch_size
        embs, masks = [], []
        cams = sorted(obs.images)
        if cams:
            imgs = jnp.concatenate([obs.images[k] for k in cams], axis=0)  # [C*B, H, W, 3]
            tok = self.vision(imgs)
            p = tok.shape[1]
            embs.append(tok.reshape(len(cams), b, p, -1).transpose(1, 0, 2, 3).reshape(b, len(cams) * p, -1))
            masks.append(jnp.repeat(jnp.stack([obs.image_masks[k] for k in cams], 1), p, axis=1))
        txt = obs.tokens[:, : c.max_text_len]
        embs.append(self.embed(txt) * jnp.sqrt(c.width).astype(DTYPES[c.dtype]))
        masks.append(obs.token_mask[:, : c.max_text_len])
        if c.use_state_token:
            s = obs.state[:, : c.state_dim]
            s = jnp.pad(s, ((0, 0), (0, c.state_dim - s.shape[1])))
            embs.append(self.state_proj(s)[:, None])
            masks.append(jnp.ones((b, 1), bool))
        emb = jnp.concatenate([e.astype(DTYPES[c.dtype]) for e in embs], axis=1)
        mask = jnp.concatenate(masks, axis=1)
        n = emb.shape[1]
        if n > c.prefix_len:
            raise ValueError(f"prefix has {n} tokens > cfg.prefix_len={c.prefix_len} (too many cameras?)")
        emb = jnp.pad(emb, ((0, 0), (0, c.prefix_len - n), (0, 0)))
        mask = jnp.pad(mask, ((0, 0), (0, c.prefix_len - n)))
        return constrain(emb, ("act_batch", "act_len", "act_embed")), mask

    def encode_prefix(self, emb: jax.Array, segment_ids: jax.Array, positions: jax.Array):
        """Bidirectional attention within each segment. emb [B,L,W], seg/pos [B,L] -> (hidden, KVCache)."""
        return self.llm(emb, segment_ids, positions)

    def prefix(self, obs: Observation):
        """Unpacked prefix: masked tokens get segment 0 and take no position. -> (hidden [B,L,W], KVCache)."""
        emb, mask = self.embed_prefix(obs)
        seg = mask.astype(jnp.int32)
        pos = jnp.maximum(jnp.cumsum(seg, axis=1) - 1, 0).astype(jnp.int32)
        return self.encode_prefix(emb, seg, pos)

    # ---------------------------------------------------------------- flow expert

    def velocity(self, cache: KVCache, x_t: jax.Array, t: jax.Array, segment_ids: jax.Array | None = None,
                 positions: jax.Array | None = None, target: jax.Array | None = None):
        """Flow velocity. x_t [B,T,A], t [B] or [B,T] -> (v [B,T,A], log_std [B,T,A] | None, hidden [B,T,We]).

        Unpacked (default): T = H tokens of one chunk after each row's prefix. Packed rows pass
        `segment_ids`/`positions` [B, T] for the action tokens (each chunk carries its sample's
        segment id and positions continuing that sample's prefix) and per-token times t [B, T].
        `target` [B, D]: the condition of `cfg.target_conditioning` (required with it, refused without it).
        """
        c = self.cfg
        h = x_t.shape[1]
        a = self.action_in(x_t.astype(DTYPES[c.dtype]))
        tt = t if t.ndim == 2 else jnp.broadcast_to(t[:, None], a.shape[:2])
        temb = sincos_embedding(tt, c.expert_width).astype(a.dtype)
        x = self.time_mlp_out(nn.swish(self.time_mlp_in(jnp.concatenate([a, temb], axis=-1))))
        x = self._condition(x, target)
        seg, pos = suffix_layout(cache, h)
        seg = seg if segment_ids is None else segment_ids
        pos = pos if positions is None else positions
        hidden, _ = self.expert(x, seg, pos, cache)
        v = self.action_out(hidden).astype(jnp.float32)
        log_std = None
        if c.flow_sampler == "flow_noise":
            lo, hi = jnp.log(c.noise_std_min), jnp.log(c.noise_std_max)
            log_std = lo + (hi - lo) * nn.sigmoid(self.noise_std(hidden).astype(jnp.float32))
        return v, log_std, hidden

    # ---------------------------------------------------------------- action tokens

    def action_logits(self, cache: KVCache, target: jax.Array | None = None):
        """Parallel decoding of all H*A action tokens. -> (logits f32 [B,H,A,bins], hidden [B,H*A,W]).

        `target` [B, D]: the condition of `cfg.target_conditioning` (required with it, refused without)."""
        c = self.cfg
        b = cache.segment_ids.shape[0]
        n = c.action_horizon * c.action_dim
        q = jnp.broadcast_to(self.action_queries.astype(DTYPES[c.dtype])[None], (b, n, c.width))
        q = self._condition(q, target)
        seg, pos = suffix_layout(cache, n)
        hidden, _ = self.llm(q, seg, pos, cache)
        logits = constrain(self.bin_head(hidden), ("act_batch", "act_len", "act_vocab")).astype(jnp.float32)
        return logits.reshape(b, c.action_horizon, c.action_dim, c.num_bins), hidden

    # ---------------------------------------------------------------- target conditioning

    def _condition(self, x: jax.Array, target: jax.Array | None) -> jax.Array:
        """x [B, T, W'] + target_in(target [B, D])[:, None] (`cfg.target_conditioning`); else x unchanged."""
        if not self.cfg.target_conditioning:
            if target is not None:
                raise ValueError("a target was passed to the action head but model.target_conditioning is off")
            return x
        if target is None:
            raise ValueError("model.target_conditioning: the action head needs `target` [B, D] "
                             "(SFT: the demo's; inference: predicted_target(prefix))")
        return x + self.target_in(target.astype(x.dtype))[:, None].astype(x.dtype)

    def predicted_target(self, hidden: jax.Array, mask: jax.Array) -> jax.Array:
        """The action head's condition at inference: aux_target(hidden [B,T,W], mask [B,T]) with its gradient
        stopped (policy-gradient or BC losses through the head do not train the aux head). -> f32 [B, D]."""
        return jax.lax.stop_gradient(self.aux_target(hidden, mask))

    # ---------------------------------------------------------------- value

    def value(self, hidden: jax.Array, mask: jax.Array) -> jax.Array:
        """Masked mean of hidden [B,T,W'] (prefix or head tokens), MLP -> value f32 [B]."""
        m = mask.astype(hidden.dtype)[..., None]
        pooled = (hidden * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
        return self.value_out(nn.gelu(self.value_hidden(pooled)))[:, 0].astype(jnp.float32)

    # ---------------------------------------------------------------- auxiliary target

    def aux_raw(self, hidden: jax.Array, mask: jax.Array) -> jax.Array:
        """Attention pooling (one learned score per token) of hidden [B,T,W] over mask [B,T], MLP
        -> f32 [B, aux_raw_dims(cfg)] (what `aux_loss` trains)."""
        score = self.aux_score(hidden)[..., 0].astype(jnp.float32)
        w = jax.nn.softmax(jnp.where(mask, score, -1e9), axis=-1) * mask
        pooled = jnp.einsum("bt,btw->bw", w.astype(hidden.dtype), hidden)
        return self.aux_out(nn.gelu(self.aux_hidden(pooled))).astype(jnp.float32)

    def aux_target(self, hidden: jax.Array, mask: jax.Array) -> jax.Array:
        """The aux prediction f32 [B, D] (normalized like the aux target): `decode_aux` of `aux_raw`."""
        return decode_aux(self.cfg, self.aux_raw(hidden, mask))

    def __call__(self, obs: Observation, actions: jax.Array | None = None, t: jax.Array | None = None):
        """Touches every parameter (used by `init`). -> dict of outputs."""
        c = self.cfg
        hidden, cache = self.prefix(obs)
        out = {}
        target = self.predicted_target(hidden, cache.segment_ids > 0) if c.target_conditioning else None
        if c.action_head == "flow":
            b = obs.batch_size
            x = jnp.zeros((b, c.action_horizon, c.action_dim)) if actions is None else actions
            tt = jnp.ones((b,)) if t is None else t
            out["v"], out["log_std"], head_hidden = self.velocity(cache, x, tt, target=target)
        else:
            out["logits"], head_hidden = self.action_logits(cache, target=target)
        if c.aux_target != "none":
            out["aux_target"] = self.aux_target(hidden, cache.segment_ids > 0)
        if c.value_head == "prefix":
            out["value"] = self.value(hidden, cache.segment_ids > 0)
        elif c.value_head == "expert":
            out["value"] = self.value(head_hidden, jnp.ones(head_hidden.shape[:2], bool))
        return out
