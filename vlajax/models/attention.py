"""Multi-head attention behind one function, with three backends.

`attend(q, k, v, q_segment_ids, kv_segment_ids, ...)` is the only entry point. Segment ids
say which tokens may see each other: a query attends to a key iff both have the same
segment id and it is > 0 (0 = padding). Packing several samples into one row is therefore
exact: give each sample its own segment id. `causal=True` additionally restricts keys to
positions <= the query's position (positions are per segment, so packed rows stay exact).

Backends:
  * `xla`   explicit boolean mask, softmax in float32; the reference, runs everywhere.
  * `cudnn` `jax.nn.dot_product_attention(implementation="cudnn")` with the same mask; GPU,
            meant for unpacked batches.
  * `te`    Transformer Engine fused attention in THD layout with a `SequenceDescriptor` built
            from segment ids and positions; GPU with TE installed, bf16/fp16 inputs (float32
            inputs fall back to `xla`); sets NVTE_FUSED_ATTN=1 unless the user set it.
`auto` picks `te` when TE imports and the default device is a GPU, else `xla`.

Shapes: q [B, T, H, D]; k, v [B, S, KVH, D] with KVH dividing H (grouped-query attention);
segment ids and positions int32 [B, T] / [B, S]; output [B, T, H, D].
"""

from __future__ import annotations

import functools
import logging
import os

import jax
import jax.numpy as jnp

log = logging.getLogger(__name__)

BACKENDS = ("auto", "xla", "cudnn", "te")


@functools.cache
def try_import_te():
    """`(te, te_flax)` when Transformer Engine's JAX part imports, else None.

    Without a GPU, TE raises RuntimeError (not ImportError) at import; any failure means "no TE".
    """
    try:
        import transformer_engine.jax as te  # noqa: PLC0415
        import transformer_engine.jax.flax as te_flax  # noqa: PLC0415

        return te, te_flax
    except Exception as e:  # RuntimeError / OSError / ImportError / AssertionError
        log.info("Transformer Engine unavailable: %s: %s", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        return None


_logged: set[str] = set()


def _log_once(msg: str, *args) -> None:
    key = msg % args
    if key not in _logged:
        _logged.add(key)
        log.info(msg, *args)


def te_available() -> bool:
    """True when TE imports and the default backend is a GPU."""
    return jax.default_backend() == "gpu" and try_import_te() is not None


def resolve_backend(name: str) -> str:
    """Map `auto` to a concrete backend; reject unknown names and unusable choices with one line."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {BACKENDS}")
    if name == "auto":
        return "te" if te_available() else "xla"
    if name == "te" and not te_available():
        raise RuntimeError("attention='te' needs Transformer Engine and a GPU; use 'xla' or 'auto'")
    if name == "cudnn" and jax.default_backend() != "gpu":
        raise RuntimeError("attention='cudnn' needs a GPU; use 'xla' or 'auto'")
    return name


def make_mask(q_segment_ids, kv_segment_ids, q_positions=None, kv_positions=None, causal=False):
    """Boolean mask [B, T, S]: same segment, not padding, and (if causal) key position <= query's."""
    mask = (q_segment_ids[:, :, None] == kv_segment_ids[:, None, :]) & (q_segment_ids[:, :, None] > 0)
    if causal:
        mask &= kv_positions[:, None, :] <= q_positions[:, :, None]
    return mask


def _xla(q, k, v, mask, scale):
    b, t, h, d = q.shape
    kvh = k.shape[2]
    qg = q.reshape(b, t, kvh, h // kvh, d)
    logits = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * scale
    m = mask[:, None, None, :, :]
    logits = jnp.where(m, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    # A query with no visible key (padding) gets zeros instead of a uniform average.
    probs = jnp.where(m.any(-1, keepdims=True), probs, 0.0).astype(v.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v)
    return out.reshape(b, t, h, d)


def _cudnn(q, k, v, mask, scale):
    out = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], scale=scale, implementation="cudnn")
    return jnp.where(mask.any(-1)[:, :, None, None], out, 0.0)


def _te(q, k, v, q_segment_ids, kv_segment_ids, q_positions, kv_positions, causal, scale):
    te_mods = try_import_te()
    if te_mods is None:  # resolve_backend guards this; keep the error readable if called directly
        raise RuntimeError("attention backend 'te' needs Transformer Engine")
    _, te_flax = te_mods
    from transformer_engine.jax.attention import SequenceDescriptor  # noqa: PLC0415

    # TE reads NVTE_FUSED_ATTN at call time; its unfused fallback takes no SequenceDescriptor, so
    # the THD path needs the fused cuDNN kernel (the default in recent TE, not in older releases).
    os.environ.setdefault("NVTE_FUSED_ATTN", "1")

    seq = SequenceDescriptor.from_segment_ids_and_pos(
        segment_ids=(q_segment_ids, kv_segment_ids), segment_pos=(q_positions, kv_positions)
    )
    module = te_flax.DotProductAttention(
        head_dim=q.shape[-1],
        num_attention_heads=q.shape[2],
        num_gqa_groups=k.shape[2],
        attn_mask_type="padding_causal" if causal else "padding",
        qkv_layout="thd_thd_thd",
        scale_factor=scale,
        transpose_batch_sequence=False,
        max_segments_per_seq=max(1, q.shape[1]),
        dtype=q.dtype,
    )
    return module.apply({}, q, k, v, sequence_descriptor=seq, deterministic=True)


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    q_positions: jax.Array | None = None,
    kv_positions: jax.Array | None = None,
    *,
    causal: bool = False,
    backend: str = "xla",
) -> jax.Array:
    """Scaled dot-product attention: q [B,T,H,D], k/v [B,S,KVH,D] -> [B,T,H,D].

    Queries with segment id 0 (padding) return zeros on the `xla`/`cudnn` backends.
    """
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"kv heads {k.shape[2]} must divide query heads {q.shape[2]}")
    if causal and (q_positions is None or kv_positions is None):
        raise ValueError("causal attention needs q_positions and kv_positions")
    scale = q.shape[-1] ** -0.5
    backend = resolve_backend(backend)
    if backend == "te" and q.dtype not in (jnp.bfloat16, jnp.float16):
        _log_once("attention: TE fused attention needs bf16/fp16 inputs; %s uses the xla backend", q.dtype)
        backend = "xla"
    if backend == "te":
        if q_positions is None:
            q_positions = jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32), q.shape[:2])
        if kv_positions is None:
            kv_positions = jnp.broadcast_to(jnp.arange(k.shape[1], dtype=jnp.int32), k.shape[:2])
        return _te(q, k, v, q_segment_ids, kv_segment_ids, q_positions, kv_positions, causal, scale)
    mask = make_mask(q_segment_ids, kv_segment_ids, q_positions, kv_positions, causal)
    if backend == "cudnn":
        return _cudnn(q, k, v, mask, scale)
    return _xla(q, k, v, mask, scale)
