"""Attention backends: the xla mask path is exact for packed rows; te/cudnn are GPU-only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.models import attention

# jitted: a handful of compiles instead of one per op and shape (op-by-op dispatch was most of the time)
_attend = jax.jit(attention.attend, static_argnames=("causal", "backend"))


def _naive(q, k, v, mask):
    """Per-head softmax attention with kv heads repeated (GQA by repetition)."""
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = jnp.where(mask[:, None], logits, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, -1), v)


def test_gqa_matches_repeated_heads():
    rng = np.random.default_rng(0)  # numpy inputs: an eager jax.random.normal compiles per shape
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 8, 4), (2, 7, 2, 4), (2, 7, 2, 4)))
    qs = np.ones((2, 5), np.int32)
    ks = np.array([[1] * 7, [1] * 4 + [0] * 3], np.int32)
    out = _attend(q, k, v, qs, ks)
    ref = jax.jit(lambda *a: _naive(*a[:3], attention.make_mask(*a[3:])))(q, k, v, qs, ks)
    np.testing.assert_allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_packed_equals_one_by_one(causal):
    """Three sequences (lengths 5, 3, 4) packed into one row of 14 (2 padding) == each run alone."""
    lengths = [5, 3, 4]
    h, kvh, d = 4, 2, 8
    rng = np.random.default_rng(1)  # numpy inputs: an eager jax.random.normal compiles per shape
    seqs = [tuple(rng.standard_normal((1, n, hh, d)).astype(np.float32) for hh in (h, kvh, kvh)) for n in lengths]
    pad = 2
    q = np.concatenate([s[0] for s in seqs] + [np.ones((1, pad, h, d), np.float32)], axis=1)
    k = np.concatenate([s[1] for s in seqs] + [np.ones((1, pad, kvh, d), np.float32)], axis=1)
    v = np.concatenate([s[2] for s in seqs] + [np.ones((1, pad, kvh, d), np.float32)], axis=1)
    seg = np.array([sum(([i + 1] * n for i, n in enumerate(lengths)), []) + [0] * pad], np.int32)
    pos = np.array([sum((list(range(n)) for n in lengths), []) + [0] * pad], np.int32)
    packed = np.asarray(_attend(q, k, v, seg, seg, pos, pos, causal=causal, backend="xla"))
    start = 0
    for n, (qi, ki, vi) in zip(lengths, seqs):
        s1 = np.ones((1, n), np.int32)
        p1 = np.arange(n, dtype=np.int32)[None]
        alone = _attend(qi, ki, vi, s1, s1, p1, p1, causal=causal, backend="xla")
        np.testing.assert_allclose(packed[:, start:start + n], alone, atol=1e-5, rtol=1e-5)
        start += n
    assert np.all(np.asarray(packed[:, start:]) == 0.0)  # padding queries give zeros


def test_auto_is_xla_without_gpu_and_errors_are_one_line():
    if attention.te_available():
        pytest.skip("TE and a GPU are present: auto selects te")
    assert attention.resolve_backend("auto") == "xla"
    with pytest.raises(RuntimeError, match="needs Transformer Engine and a GPU"):
        attention.resolve_backend("te")
    with pytest.raises(ValueError, match="unknown attention backend"):
        attention.resolve_backend("flash")


@pytest.mark.gpu
@pytest.mark.skipif(not attention.te_available(), reason="Transformer Engine with a GPU is not available here")
@pytest.mark.parametrize("causal", [False, True])
def test_te_thd_matches_xla(causal):
    """TE fused THD attention on a packed row equals the xla reference (bf16 tolerance)."""
    h, kvh, d, n = 4, 2, 64, 128
    kq, kk, kv = jax.random.split(jax.random.key(2), 3)
    q = jax.random.normal(kq, (2, n, h, d), jnp.bfloat16)
    k = jax.random.normal(kk, (2, n, kvh, d), jnp.bfloat16)
    v = jax.random.normal(kv, (2, n, kvh, d), jnp.bfloat16)
    seg = jnp.concatenate([jnp.full((2, 50), 1), jnp.full((2, 60), 2), jnp.zeros((2, 18))], 1).astype(jnp.int32)
    pos = jnp.concatenate([jnp.arange(50), jnp.arange(60), jnp.zeros(18)]).astype(jnp.int32)[None].repeat(2, 0)
    ref = attention.attend(q, k, v, seg, seg, pos, pos, causal=causal, backend="xla")
    out = attention.attend(q, k, v, seg, seg, pos, pos, causal=causal, backend="te")
    valid = np.asarray(seg > 0)
    np.testing.assert_allclose(np.asarray(out, np.float32)[valid], np.asarray(ref, np.float32)[valid], atol=3e-2)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN attention needs a GPU")
def test_cudnn_matches_xla_unpacked():
    kq, kk, kv = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(kq, (2, 64, 4, 64), jnp.bfloat16)
    k = jax.random.normal(kk, (2, 64, 4, 64), jnp.bfloat16)
    v = jax.random.normal(kv, (2, 64, 4, 64), jnp.bfloat16)
    seg = jnp.ones((2, 64), jnp.int32)
    ref = attention.attend(q, k, v, seg, seg, backend="xla")
    out = attention.attend(q, k, v, seg, seg, backend="cudnn")
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), atol=3e-2)
