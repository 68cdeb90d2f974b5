"""Batching modes: a worked example, nothing lost, and packed == padded through the real model."""

from __future__ import annotations

import functools

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.data.packing import PackedBatchDataset, PrefixSpec, gather_prefix, scatter_prefix

# Two cameras of 2 tokens, 3 text slots, a state token: length 8.
#   slot:  0 1 | 2 3 | 4 5 6 | 7
#          a a | b b | text  | state
SPEC = PrefixSpec(("a", "b"), image_size=4, tokens_per_camera=2, text_len=3, state_token=True)


def sample(index, cams, n_text, h=2):
    img = np.full((4, 4, 3), index, np.uint8)
    return {
        "images": {c: img for c in cams}, "tokens": np.arange(1, 4, dtype=np.int32) * (np.arange(3) < n_text),
        "token_mask": np.arange(3) < n_text, "state": np.full(5, index, np.float32),
        "actions": np.full((h, 2), index, np.float32), "action_mask": np.ones(h, bool),
        "task_index": index, "index": index,
    }


def batches(samples, mode, slots, **kw):
    ds = PackedBatchDataset(grain.MapDataset.source(samples).to_iter_dataset(), SPEC, mode, slots, **kw)
    return list(ds)


WORKED = [sample(0, ("a", "b"), 2), sample(1, ("b",), 1), sample(2, ("a",), 3)]


def test_worked_example_packed():
    # lengths: s0 = 4 + 2 + 1 = 7 (slots 0-5, 7); s1 = 2 + 1 + 1 = 4 (slots 2, 3, 4, 7); s2 = 2 + 3 + 1 = 6.
    # first fit into 2 rows of 10: s0 -> row 0 (7); s1: 7 + 4 > 10 -> row 1 (4); s2: row 0 full, row 1: 4 + 6 = 10.
    (b,) = batches(WORKED, "packed", 3, rows=2, row_len=10)
    np.testing.assert_array_equal(b["prefix_index"], [[0, 1, 2, 3, 4, 5, 7, 0, 0, 0],
                                                      [10, 11, 12, 15, 16, 17, 20, 21, 22, 23]])
    np.testing.assert_array_equal(b["segment_ids"], [[1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
                                                     [1, 1, 1, 1, 2, 2, 2, 2, 2, 2]])
    np.testing.assert_array_equal(b["positions"], [[0, 1, 2, 3, 4, 5, 6, 0, 0, 0],
                                                   [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]])
    np.testing.assert_array_equal(b["sample_row"], [0, 1, 1])
    np.testing.assert_array_equal(b["sample_segment"], [1, 1, 2])
    np.testing.assert_array_equal(b["sample_start"], [0, 0, 4])
    np.testing.assert_array_equal(b["sample_tokens"], [7, 4, 6])
    np.testing.assert_array_equal(b["image_masks"]["a"], [True, False, True])
    np.testing.assert_array_equal(b["image_masks"]["b"], [True, True, False])
    assert b["sample_mask"].all() and b["images"]["b"][2].sum() == 0  # absent camera: zeros


def test_worked_example_fixed_and_dynamic():
    (f,) = batches(WORKED, "fixed", 4)  # 3 samples in 4 slots: the last slot is empty
    np.testing.assert_array_equal(f["segment_ids"], [[1, 1, 1, 1, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0, 0, 1],
                                                     [1, 1, 0, 0, 1, 1, 1, 1], [0] * 8])
    np.testing.assert_array_equal(f["positions"][1], [0, 0, 0, 1, 2, 0, 0, 3])
    np.testing.assert_array_equal(f["prefix_index"][2], 16 + np.arange(8))
    np.testing.assert_array_equal(f["sample_mask"], [True, True, True, False])
    (d,) = batches(WORKED, "dynamic", 3)  # longest = 7 tokens (seq_multiple 1)
    np.testing.assert_array_equal(d["prefix_index"], [[0, 1, 2, 3, 4, 5, 7], [10, 11, 12, 15, 0, 0, 0],
                                                      [16, 17, 20, 21, 22, 23, 0]])
    np.testing.assert_array_equal(d["segment_ids"], [[1] * 7, [1] * 4 + [0] * 3, [1] * 6 + [0]])


def _check_lossless(b, spec):
    """Every valid slot of every live sample appears once, in order, with positions 0..n-1."""
    n_slots = len(b["sample_mask"])
    seen = {}
    for r in range(b["segment_ids"].shape[0]):
        for t in np.flatnonzero(b["segment_ids"][r]):
            src = int(b["prefix_index"][r, t])
            assert src not in seen
            seen[src] = (r, int(b["segment_ids"][r, t]), int(b["positions"][r, t]))
    count = 0
    for i in range(n_slots):
        if not b["sample_mask"][i]:
            continue
        smp = {"images": {c: 0 for c in spec.cameras if b["image_masks"][c][i]}, "token_mask": b["token_mask"][i]}
        slots = np.flatnonzero(spec.valid(smp))
        got = [seen[i * spec.length + s] for s in slots]
        assert {(r, g) for r, g, _ in got} == {(b["sample_row"][i], b["sample_segment"][i])}
        assert [p for *_, p in got] == list(range(len(slots)))
        count += len(slots)
    assert count == len(seen)
    return count


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_no_sample_or_token_is_lost(mode):
    rng = np.random.default_rng(0)
    cams = [("a", "b"), ("a",), ("b",), ()]
    samples = [sample(i, cams[rng.integers(4)], int(rng.integers(0, 4))) for i in range(101)]
    out = batches(samples, mode, 8, rows=3, row_len=12, max_segments=3)
    ids, tokens = [], 0
    for b in out:
        tokens += _check_lossless(b, SPEC)
        ids += [int(x) for x, m in zip(b["task_index"], b["sample_mask"]) if m]
        if mode == "packed":
            assert np.bincount(b["sample_row"][b["sample_mask"]], minlength=3).max() <= 3
    assert ids == list(range(101))  # every sample once, in order
    assert tokens == sum(SPEC.num_tokens(s) for s in samples)


def test_too_long_for_a_row_is_an_error():
    with pytest.raises(ValueError, match="packed row length 4 < the longest possible prefix 8"):
        batches(WORKED, "packed", 2, rows=2, row_len=4)


def test_gather_scatter_round_trip():
    (b,) = batches(WORKED, "packed", 3, rows=2, row_len=10)
    emb = jnp.arange(3 * 8 * 2, dtype=jnp.float32).reshape(3, 8, 2) + 1
    rows = gather_prefix(emb, b["prefix_index"], b["segment_ids"])
    assert rows.shape == (2, 10, 2) and float(rows[0, 7:].sum()) == 0
    back = scatter_prefix(rows, b["prefix_index"], b["segment_ids"], 3, 8)
    valid = np.zeros((3, 8), bool)
    for i, s in enumerate(WORKED):
        valid[i] = SPEC.valid(s)
    np.testing.assert_array_equal(np.asarray(back)[valid], np.asarray(emb)[valid])
    assert float(np.abs(np.asarray(back)[~valid]).sum()) == 0


# -- the model's contract ---------------------------------------------------------------------


def _observation(b):
    from vlajax.models.observation import Observation

    return Observation(
        images={c: jnp.asarray(v, jnp.float32) / 255.0 for c, v in b["images"].items()},
        image_masks={c: jnp.asarray(v) for c, v in b["image_masks"].items()},
        tokens=jnp.asarray(b["tokens"]), token_mask=jnp.asarray(b["token_mask"]), state=jnp.asarray(b["state"]),
    )


def test_packed_and_dynamic_prefix_equal_padded_per_sample_through_the_model():
    from vlajax.config.schema import ModelConfig
    from vlajax.models.tokenizer import encode
    from vlajax.models.vla import VLA

    cfg = ModelConfig(vit_depth=1)  # one ViT block: the image tower runs before packing (less to compile)
    spec = PrefixSpec.from_model(cfg, ("wrist", "agentview"))
    assert spec.cameras == ("agentview", "wrist") and spec.length == cfg.prefix_len
    rng = np.random.default_rng(1)
    words = ["pick", "up", "the", "red", "cube", "and", "place", "it", "in", "the", "bowl"]
    samples = []
    for i in range(6):
        ids, mask = encode(" ".join(words[: rng.integers(1, len(words))]), cfg.max_text_len)
        cams = [("agentview", "wrist"), ("agentview",), ("wrist",)][i % 3]
        samples.append({
            "images": {c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in cams},
            "tokens": ids, "token_mask": mask, "state": rng.standard_normal(cfg.state_dim).astype(np.float32),
            "actions": np.zeros((cfg.action_horizon, cfg.action_dim), np.float32),
            "action_mask": np.ones(cfg.action_horizon, bool), "task_index": i, "index": i,
        })
    src = grain.MapDataset.source(samples).to_iter_dataset()
    (fixed,) = list(PackedBatchDataset(src, spec, "fixed", 6))
    (packed,) = list(PackedBatchDataset(src, spec, "packed", 6, rows=3, row_len=2 * spec.length))
    (dyn,) = list(PackedBatchDataset(src, spec, "dynamic", 6))
    assert packed["segment_ids"].shape[0] == 3 and dyn["segment_ids"].shape[1] < spec.length

    model = VLA(cfg)
    obs = _observation(fixed)
    variables = jax.jit(model.init)(jax.random.key(0), obs)
    emb, mask = jax.jit(lambda v, o: model.apply(v, o, method=VLA.embed_prefix))(variables, obs)
    np.testing.assert_array_equal(np.asarray(mask), fixed["segment_ids"] > 0)  # our layout == the model's
    ref, _ = jax.jit(lambda v, o: model.apply(v, o, method=VLA.prefix))(variables, obs)
    enc = jax.jit(lambda v, e, s, p: model.apply(v, e, s, p, method=VLA.encode_prefix))
    valid = np.asarray(mask)
    for b in (packed, dyn):
        for k in ("tokens", "token_mask", "state"):
            np.testing.assert_array_equal(b[k], fixed[k])
        rows = gather_prefix(emb, jnp.asarray(b["prefix_index"]), jnp.asarray(b["segment_ids"]))
        hidden, _ = enc(variables, rows, jnp.asarray(b["segment_ids"]), jnp.asarray(b["positions"]))
        back = scatter_prefix(hidden, jnp.asarray(b["prefix_index"]), jnp.asarray(b["segment_ids"]), 6, spec.length)
        np.testing.assert_allclose(np.asarray(back)[valid], np.asarray(ref)[valid], atol=2e-5)


def test_groups_keep_rows_on_their_own_samples():
    rng = np.random.default_rng(2)
    cams = [("a", "b"), ("a",), ("b",)]
    samples = [sample(i, cams[rng.integers(3)], int(rng.integers(0, 4))) for i in range(40)]
    out = batches(samples, "packed", 8, rows=4, row_len=12, groups=2)  # 2 groups of 4 slots and 2 rows
    ids = []
    for b in out:
        assert b["segment_ids"].shape == (4, 12) and b["sample_mask"].shape == (8,)
        _check_lossless(b, SPEC)
        for r in range(4):
            src = b["prefix_index"][r][b["segment_ids"][r] > 0] // SPEC.length
            assert np.all(src // 4 == r // 2)  # rows 0-1 read samples 0-3, rows 2-3 samples 4-7
        ids += [int(x) for x, m in zip(b["index"], b["sample_mask"]) if m]
    assert ids == list(range(40))
    emb = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8, 3)), jnp.float32)
    b = out[0]
    np.testing.assert_array_equal(gather_prefix(emb, b["prefix_index"], b["segment_ids"], groups=2),
                                  gather_prefix(emb, b["prefix_index"], b["segment_ids"]))


def test_packed_flow_velocity_equals_padded_per_sample_through_the_model():
    """Prefix packed in rows, then each sample's action suffix attends to its own row segment:
    the flow expert's velocity equals the unpacked model's, sample by sample."""
    from vlajax.config.schema import ModelConfig
    from vlajax.data.packing import rows_to_samples
    from vlajax.models.tokenizer import encode
    from vlajax.models.transformer import KVCache
    from vlajax.models.vla import VLA

    cfg = ModelConfig(vit_depth=1)  # one ViT block: the image tower runs before packing (less to compile)
    spec = PrefixSpec.from_model(cfg, ("agentview", "wrist"))
    rng = np.random.default_rng(3)
    samples = []
    for i, text in enumerate(["pick up the cube", "put the red block in the bowl", "push", "open the drawer now"]):
        ids, mask = encode(text, cfg.max_text_len)
        cams = [("agentview", "wrist"), ("wrist",), ("agentview",), ("agentview", "wrist")][i]
        samples.append({
            "images": {c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in cams},
            "tokens": ids, "token_mask": mask, "state": rng.standard_normal(cfg.state_dim).astype(np.float32),
            "actions": rng.standard_normal((cfg.action_horizon, cfg.action_dim)).astype(np.float32),
            "action_mask": np.ones(cfg.action_horizon, bool), "task_index": i, "index": i,
        })
    src = grain.MapDataset.source(samples).to_iter_dataset()
    (fixed,) = list(PackedBatchDataset(src, spec, "fixed", 4))
    (packed,) = list(PackedBatchDataset(src, spec, "packed", 4, rows=2, row_len=2 * spec.length))
    assert np.max(np.bincount(packed["sample_row"])) >= 2  # some row really holds two samples

    model = VLA(cfg)
    obs = _observation(fixed)
    variables = jax.jit(model.init)(jax.random.key(0), obs)
    x_t = jnp.asarray(fixed["actions"])
    t = jnp.full((4,), 0.3)

    @jax.jit
    def padded(v):
        _, cache = model.apply(v, obs, method=VLA.prefix)
        return model.apply(v, cache, x_t, t, method=VLA.velocity)[0]

    @functools.partial(jax.jit, static_argnums=1)
    def packed_velocity(v, compact):
        emb, _ = model.apply(v, obs, method=VLA.embed_prefix)
        seg, pos = jnp.asarray(packed["segment_ids"]), jnp.asarray(packed["positions"])
        rows = gather_prefix(emb, jnp.asarray(packed["prefix_index"]), seg)
        _, cache = model.apply(v, rows, seg, pos, method=VLA.encode_prefix)
        kw = dict(sample_start=jnp.asarray(packed["sample_start"]), length=spec.length) if compact else {}
        (k, vv, p), own = rows_to_samples((cache.k, cache.v, cache.positions), seg, jnp.asarray(packed["sample_row"]),
                                          jnp.asarray(packed["sample_segment"]), **kw)
        assert own.shape == (4, spec.length if compact else 2 * spec.length)
        return model.apply(v, KVCache(k, vv, own, p), x_t, t, method=VLA.velocity)[0]

    want = np.asarray(padded(variables))
    for compact in (False, True):  # whole rows, or each sample's own window of prefix_len keys
        np.testing.assert_allclose(np.asarray(packed_velocity(variables, compact)), want, atol=3e-5)


def test_stream_end_leaves_later_groups_empty():
    (b,) = batches(WORKED, "packed", 8, rows=4, row_len=12, groups=2)  # 3 samples, 2 groups of 4 slots
    np.testing.assert_array_equal(b["sample_mask"], [True, True, True, False, False, False, False, False])
    np.testing.assert_array_equal(b["index"], [0, 1, 2, -1, -1, -1, -1, -1])
    assert b["segment_ids"][2:].sum() == 0 and b["images"]["a"].shape == (8, 4, 4, 3)
    _check_lossless(b, SPEC)


def test_compact_windows_never_reach_into_the_next_row():
    from vlajax.data.packing import rows_to_samples

    # row 0: A (segment 1) 3 tokens, B (segment 2) 5 tokens; row 1: C (1) 2 tokens, D (2) 4 tokens, padding.
    seg = jnp.array([[1, 1, 1, 2, 2, 2, 2, 2], [1, 1, 2, 2, 2, 2, 0, 0]], jnp.int32)
    vals = jnp.arange(16, dtype=jnp.float32).reshape(2, 8)
    out, own = rows_to_samples(vals, seg, jnp.array([0, 0, 1, 1]), jnp.array([1, 2, 1, 2]),
                               sample_start=jnp.array([0, 3, 0, 2]), length=8)
    # B's window [3, 11) runs past row 0 into row 1, whose 3rd token is also segment 2: not B's
    np.testing.assert_array_equal(np.asarray(own).sum(1), [3, 5, 2, 4])
    np.testing.assert_array_equal(np.asarray(out)[1][np.asarray(own)[1] > 0], [3, 4, 5, 6, 7])


def test_rows_sized_by_samples_and_tokens_carry_every_slot_in_fewer_tokens():
    """With every prefix ~138 of 200 tokens (our demos), rows sized by the mean tokens alone
    (12 rows of 400) hold 2 samples each -- 24 of 32 per batch in 4,800 tokens, fixed padding's 200 per
    sample; first-fit sizing gives 16 rows of ~280: all 32 samples in ~4,500 tokens (~140 per sample)."""
    from vlajax.data.build import auto_packed_layout, first_fit_rows, fit_packed_layout

    demos = np.random.default_rng(0).integers(134, 140, 256)  # 128 image tokens + instruction + state
    assert auto_packed_layout(138.4, 32, 200, 1) == (12, 400)  # the demos' measured mean, the old rule
    assert first_fit_rows([138] * 32, 400) == 16  # the old layout needs 16 rows of 400 for 32 such samples
    rows, row_len = fit_packed_layout(demos, 32, 200, 1)
    assert rows == 16 and 2 * demos.max() <= row_len <= 288 and rows * row_len / 32 < 0.75 * 200
    # through the packer: every batch of 32 demo-like samples is whole in that layout
    samples = [sample(i, ("a", "b"), 1 + i % 3) for i in range(64)]
    spec_len = SPEC.num_tokens(samples[0])
    lengths = [SPEC.num_tokens(s) for s in samples]
    r, t = fit_packed_layout(lengths, 8, SPEC.length, 1, step=1)
    out = batches(samples, "packed", 8, rows=r, row_len=t)
    assert [int(b["sample_mask"].sum()) for b in out] == [8] * 8 and spec_len <= t <= 2 * SPEC.length
    # a two-camera + one-camera mix packs in fewer tokens than fixed padding, every sample carried
    mix = np.concatenate([demos[:128], np.random.default_rng(1).integers(76, 96, 128)])
    rows, row_len = fit_packed_layout(mix, 32, 200, 1)
    assert 200 <= row_len <= 400 and rows * row_len < 0.7 * 32 * 200
    assert fit_packed_layout(mix, 32, 200, 8)[0] % 8 == 0  # rows rounded up to the mesh's multiple
    assert first_fit_rows([5, 5, 5], 10, max_segments=1) == 3
