"""openpi's pi0 / pi0.5 (`ModelConfig.family` 'pi0' / 'pi05') with the VLA's method interface.

Prefix: every camera (sorted names) through SigLIP -> (S/p)^2 tokens each, then the prompt's
token embeddings; all valid prefix tokens attend to each other. Suffix (the action expert's
tokens): pi0 puts a state token (`state_proj(state)`) before the H action tokens, which mix
`action_in(x_t)` with a sine-cosine time embedding through an MLP; pi0.5 has no state token (the
state is in the prompt) and conditions every expert norm on an MLP of the time embedding
(adaRMS). The prefix never sees the suffix; the state token sees the prefix and itself; action
tokens see everything valid. Flow conventions: x_t = t eps + (1 - t) a, v ~ eps - a, t = 1 noise.

Methods (`model.apply(variables, ..., method="<name>")`):
  embed_prefix(obs)         -> emb [B, P, W], mask bool [B, P]           (P = cfg.prefix_len)
  prefix(obs)               -> hidden [B, P, W], PiCache
  embed_suffix(cache, x_t, t) -> tokens [B, S, We], ar bool [S], adarms cond [B, We] | None
  velocity(cache, x_t, t)   -> v f32 [B, H, A], log_std [B, H, A] | None, hidden [B, H, We]
  joint(obs, x_t, t)        -> prefix hidden [B, P, W], suffix hidden [B, S, We], v [B, H, A]
                               (one pass over prefix + suffix, as openpi's `compute_loss`)
  value(hidden, mask)       -> [B]
"""

from __future__ import annotations

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from vlajax.config.schema import GEMMA_VARIANTS, ModelConfig
from vlajax.models.layers import DTYPES, constrain, dense
from vlajax.models.observation import Observation
from vlajax.models.openpi.gemma import Gemma
from vlajax.models.openpi.siglip import SigLIP


@flax.struct.dataclass
class PiCache:
    """The prefix's keys/values for the action expert."""

    k: jax.Array  # [L, B, P, K, D], RoPE applied
    v: jax.Array  # [L, B, P, K, D]
    segment_ids: jax.Array  # int32 [B, P]: 1 = valid prefix token, 0 = padding / masked camera
    state: jax.Array  # float32 [B, A]: the (zero-padded) state, read by pi0's state token


def time_embedding(t: jax.Array, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> jax.Array:
    """Sine-cosine embedding of flow times t [B] -> [B, dim] (dim even), in float32."""
    frac = jnp.linspace(0.0, 1.0, dim // 2)
    period = min_period * (max_period / min_period) ** frac
    ang = jnp.einsum("i,j->ij", t.astype(jnp.float32), 1.0 / period * 2 * jnp.pi,
                     precision=jax.lax.Precision.HIGHEST)
    return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)


def block_mask(valid: jax.Array, ar: jax.Array) -> jax.Array:
    """Attention mask [B, T, T]: query i sees valid key j iff cumsum(ar)[j] <= cumsum(ar)[i].

    valid bool [B, T]; ar bool [T] (True starts a new causal block).
    """
    c = jnp.cumsum(jnp.broadcast_to(ar, valid.shape), axis=1)
    return (c[:, None, :] <= c[:, :, None]) & valid[:, None, :] & valid[:, :, None]


class Pi0(nn.Module):
    """pi0 (cfg.family='pi0') or pi0.5 ('pi05'); see the module docstring."""

    cfg: ModelConfig

    def setup(self):
        c = self.cfg
        self.pi05 = c.family == "pi05"
        dt, pdt = DTYPES[c.dtype], DTYPES[c.param_dtype]
        vlm, exp = GEMMA_VARIANTS[c.paligemma_variant], GEMMA_VARIANTS[c.action_expert_variant]
        sig = c.siglip
        self.vision = SigLIP(sig["width"], sig["depth"], sig["mlp_dim"], sig["num_heads"], sig["patch"],
                             vlm["width"], dtype=dt, param_dtype=pdt, remat=c.remat)
        self.llm = Gemma((vlm, exp), (False, self.pi05), c.vocab_size, dtype=dt, param_dtype=pdt, remat=c.remat,
                         lora_ranks=(c.lora_rank, c.expert_lora_rank))
        we = exp["width"]
        kw = dict(use_bias=True, dtype=jnp.float32, param_dtype=pdt)
        self.action_in = dense(we, (None, "embed"), **kw)
        if self.pi05:
            self.time_mlp_in = dense(we, ("embed", "mlp"), **kw)
            self.time_mlp_out = dense(we, ("mlp", "embed"), **kw)
        else:
            self.state_proj = dense(we, (None, "embed"), **kw)
            self.action_time_mlp_in = dense(we, ("embed", "mlp"), **kw)
            self.action_time_mlp_out = dense(we, ("mlp", "embed"), **kw)
        self.action_out = dense(c.action_dim, ("embed", None), **kw)
        if c.flow_sampler == "flow_noise":
            self.noise_std = dense(c.action_dim, ("embed", None), init_scale=0.1, **kw)
        if c.value_head != "none":
            self.value_hidden = dense(we, ("embed", "mlp"), **kw)
            self.value_out = dense(1, ("mlp", None), **kw)

    # ---------------------------------------------------------------- prefix

    def embed_prefix(self, obs: Observation) -> tuple[jax.Array, jax.Array]:
        """Image tokens of each camera (absent cameras padded as masked), then the prompt's.

        -> emb [B, P, W] in cfg.dtype, mask bool [B, P]; images [B, S, S, 3] in [0, 1].
        """
        c = self.cfg
        b = obs.batch_size
        dt = DTYPES[c.dtype]
        cams = sorted(obs.images)
        if len(cams) > c.num_cameras:
            raise ValueError(f"{len(cams)} cameras {cams} > model.num_cameras={c.num_cameras}")
        n_img = (c.image_size // c.siglip["patch"]) ** 2
        w = GEMMA_VARIANTS[c.paligemma_variant]["width"]
        embs, masks = [], []
        if cams:
            imgs = jnp.concatenate([obs.images[k] for k in cams], axis=0)  # [C*B, S, S, 3]
            if imgs.shape[1:3] != (c.image_size, c.image_size):
                raise ValueError(f"images are {imgs.shape[1:3]}, the model takes {c.image_size}x{c.image_size} "
                                 "(resize in the data pipeline)")
            tok = self.vision(imgs.astype(jnp.float32) * 2.0 - 1.0)
            embs.append(tok.reshape(len(cams), b, n_img, w).transpose(1, 0, 2, 3).reshape(b, -1, w).astype(dt))
            masks.append(jnp.repeat(jnp.stack([obs.image_masks[k] for k in cams], 1), n_img, axis=1))
        missing = (c.num_cameras - len(cams)) * n_img
        embs.append(jnp.zeros((b, missing, w), dt))
        masks.append(jnp.zeros((b, missing), bool))
        txt = obs.tokens[:, : c.max_text_len]
        embs.append(self.llm.embed(txt))
        masks.append(obs.token_mask[:, : c.max_text_len].astype(bool))
        emb, mask = jnp.concatenate(embs, axis=1), jnp.concatenate(masks, axis=1)
        pad = c.prefix_len - emb.shape[1]
        emb = jnp.pad(emb, ((0, 0), (0, pad), (0, 0)))
        mask = jnp.pad(mask, ((0, 0), (0, pad)))
        return constrain(emb, ("act_batch", "act_len", "act_embed")), mask

    def _padded_state(self, obs: Observation) -> jax.Array:
        a = self.cfg.action_dim
        s = obs.state[:, :a].astype(jnp.float32)
        return jnp.pad(s, ((0, 0), (0, a - s.shape[1])))

    def prefix(self, obs: Observation):
        """Bidirectional attention over the valid prefix. -> (hidden [B, P, W], PiCache)."""
        emb, mask = self.embed_prefix(obs)
        pos = jnp.cumsum(mask, axis=1) - 1
        (hidden, _), (k, v) = self.llm((emb, None), pos, block_mask(mask, jnp.zeros(mask.shape[1], bool)))
        return hidden, PiCache(k, v, mask.astype(jnp.int32), self._padded_state(obs))

    # ---------------------------------------------------------------- suffix

    def embed_suffix(self, cache: PiCache, x_t: jax.Array, t: jax.Array):
        """-> tokens f32 [B, S, We] (S = H, + 1 state token for pi0), ar bool [S], adarms cond [B, We] | None."""
        h = x_t.shape[1]
        a = self.action_in(x_t.astype(jnp.float32))
        temb = time_embedding(t, a.shape[-1])
        if self.pi05:
            cond = nn.swish(self.time_mlp_out(nn.swish(self.time_mlp_in(temb))))
            return a, jnp.array([True] + [False] * (h - 1)), cond
        tt = jnp.broadcast_to(temb[:, None], a.shape)
        x = self.action_time_mlp_out(nn.swish(self.action_time_mlp_in(jnp.concatenate([a, tt], axis=-1))))
        st = self.state_proj(cache.state)[:, None]
        return jnp.concatenate([st, x], axis=1), jnp.array([True, True] + [False] * (h - 1)), None

    def _head(self, hidden: jax.Array, h: int):
        c = self.cfg
        hid = hidden[:, -h:]
        v = self.action_out(hid).astype(jnp.float32)
        log_std = None
        if c.flow_sampler == "flow_noise":
            lo, hi = jnp.log(c.noise_std_min), jnp.log(c.noise_std_max)
            log_std = lo + (hi - lo) * nn.sigmoid(self.noise_std(hid).astype(jnp.float32))
        return v, log_std, hid

    def velocity(self, cache: PiCache, x_t: jax.Array, t: jax.Array, segment_ids=None, positions=None):
        """Flow velocity at (x_t [B, H, A], t [B]) given the prefix cache.

        -> (v f32 [B, H, A], log_std [B, H, A] | None, hidden [B, H, We]).
        """
        if segment_ids is not None or positions is not None or t.ndim != 1:
            raise ValueError(f"model.family={self.cfg.family!r} takes unpacked prefixes only (t [B])")
        tok, ar, cond = self.embed_suffix(cache, x_t, t)
        b, s = tok.shape[:2]
        valid = cache.segment_ids > 0
        ones = jnp.ones((b, s), bool)
        mask = jnp.concatenate([jnp.broadcast_to(valid[:, None], (b, s, valid.shape[1])), block_mask(ones, ar)], -1)
        pos = jnp.sum(valid, axis=1, keepdims=True) + jnp.arange(s)[None]
        (_, out), _ = self.llm((None, tok), pos, mask, (None, cond), cache=(cache.k, cache.v))
        return self._head(out, x_t.shape[1])

    def joint(self, obs: Observation, x_t: jax.Array, t: jax.Array):
        """Prefix and suffix in one pass. -> (prefix hidden [B,P,W], suffix hidden [B,S,We], v f32 [B,H,A])."""
        emb, pmask = self.embed_prefix(obs)
        state = self._padded_state(obs)
        tok, ar, cond = self.embed_suffix(PiCache(None, None, None, state), x_t, t)
        valid = jnp.concatenate([pmask, jnp.ones(tok.shape[:2], bool)], axis=1)
        full_ar = jnp.concatenate([jnp.zeros(pmask.shape[1], bool), ar])
        pos = jnp.cumsum(valid, axis=1) - 1
        (ph, sh), _ = self.llm((emb, tok), pos, block_mask(valid, full_ar), (None, cond))
        return ph, sh, self._head(sh, x_t.shape[1])[0]

    # ---------------------------------------------------------------- value

    def value(self, hidden: jax.Array, mask: jax.Array) -> jax.Array:
        """Masked mean of hidden [B, T, W'] (prefix or action tokens), MLP -> value f32 [B]."""
        m = mask.astype(jnp.float32)[..., None]
        pooled = (hidden.astype(jnp.float32) * m).sum(1) / jnp.maximum(m.sum(1), 1.0)
        return self.value_out(nn.gelu(self.value_hidden(pooled)))[:, 0].astype(jnp.float32)

    def __call__(self, obs: Observation, actions: jax.Array | None = None, t: jax.Array | None = None):
        """Touches every parameter (used by `init`). -> dict of outputs."""
        c = self.cfg
        b = obs.batch_size
        hidden, cache = self.prefix(obs)
        x = jnp.zeros((b, c.action_horizon, c.action_dim)) if actions is None else actions
        tt = jnp.ones((b,)) if t is None else t
        out = {}
        out["v"], out["log_std"], head_hidden = self.velocity(cache, x, tt)
        if c.value_head == "prefix":
            out["value"] = self.value(hidden, cache.segment_ids > 0)
        elif c.value_head == "expert":
            out["value"] = self.value(head_hidden, jnp.ones(head_hidden.shape[:2], bool))
        return out
