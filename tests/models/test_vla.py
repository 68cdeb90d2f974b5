"""The prefix: cameras, masks, packing, tokenizer, presets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.bench import memory as bench_memory
from vlajax.config.schema import ConfigError, ModelConfig
from vlajax.models import presets, tokenizer
from vlajax.models.observation import Observation, fake_observation
from vlajax.models.vla import VLA

CFG = ModelConfig()


@pytest.fixture(scope="module")
def model_and_vars():
    model = VLA(CFG)
    obs = fake_observation(jax.random.key(0), 2, CFG)
    return model, jax.jit(model.init)(jax.random.key(1), obs), obs


def _prefix(model, variables, obs):
    return jax.jit(lambda v, o: model.apply(v, o, method=VLA.prefix))(variables, obs)


def test_masked_camera_equals_absent_camera(model_and_vars):
    """A camera with mask False contributes nothing: same prefix outputs as without that camera."""
    model, variables, obs = model_and_vars
    masked = obs.replace(image_masks={**obs.image_masks, "cam1": jnp.zeros((2,), bool)})
    absent = obs.replace(images={"cam0": obs.images["cam0"]}, image_masks={"cam0": obs.image_masks["cam0"]})
    h_m, c_m = _prefix(model, variables, masked)
    h_a, c_a = _prefix(model, variables, absent)
    vm = np.asarray(c_m.segment_ids > 0)
    va = np.asarray(c_a.segment_ids > 0)
    assert vm.sum() == va.sum() < np.asarray(_prefix(model, variables, obs)[1].segment_ids > 0).sum()
    np.testing.assert_allclose(np.asarray(h_m)[vm], np.asarray(h_a)[va], atol=1e-5)


def test_packed_prefix_equals_one_by_one(model_and_vars):
    """Two samples' prefix tokens packed in one row (segment ids 1, 2; own positions) == run alone."""
    model, variables, obs = model_and_vars
    emb, mask = jax.jit(lambda v, o: model.apply(v, o, method=VLA.embed_prefix))(variables, obs)
    enc = jax.jit(lambda v, e, s, p: model.apply(v, e, s, p, method=VLA.encode_prefix))
    rows, segs, poss, alone = [], [], [], []
    for b in range(2):
        m = np.asarray(mask[b])
        e = np.asarray(emb[b])[m]
        n = e.shape[0]
        rows.append(e)
        segs.append(np.full(n, b + 1))
        poss.append(np.arange(n))
        h, _ = enc(variables, e[None], jnp.ones((1, n), jnp.int32), jnp.arange(n, dtype=jnp.int32)[None])
        alone.append(np.asarray(h[0]))
    total = sum(r.shape[0] for r in rows)
    pad = -total % 8
    packed_emb = np.concatenate(rows + [np.zeros((pad, emb.shape[-1]), np.float32)])[None]
    seg = np.concatenate(segs + [np.zeros(pad)]).astype(np.int32)[None]
    pos = np.concatenate(poss + [np.zeros(pad)]).astype(np.int32)[None]
    h, cache = enc(variables, packed_emb, seg, pos)
    np.testing.assert_allclose(np.asarray(h[0, :total]), np.concatenate(alone), atol=1e-5)
    assert len(cache.k) == CFG.depth


def test_prefix_too_long_is_an_error(model_and_vars):
    model, variables, obs = model_and_vars
    extra = obs.replace(images={**obs.images, "cam2": obs.images["cam0"]},
                        image_masks={**obs.image_masks, "cam2": obs.image_masks["cam0"]})
    with pytest.raises(ValueError, match="prefix_len"):
        jax.eval_shape(lambda v, o: model.apply(v, o, method=VLA.prefix), variables, extra)


def test_observation_rejects_mismatched_cameras():
    with pytest.raises(ValueError, match="differ"):
        Observation({"a": jnp.zeros((1, 8, 8, 3))}, {"b": jnp.ones((1,), bool)}, jnp.zeros((1, 4), jnp.int32),
                    jnp.ones((1, 4), bool), jnp.zeros((1, 3)))


def test_tokenizer_roundtrip_and_padding():
    ids, mask = tokenizer.encode("Put the RED cube  in the bowl", 16)
    assert ids[0] == tokenizer.BOS and ids.dtype == np.int32 and mask.sum() == 9  # bos + 7 words + eos
    assert tokenizer.decode(ids) == "put the red cube in the bowl"
    ids, mask = tokenizer.encode("zebra", 4)  # unknown word spelled as bytes, truncated to 4
    assert mask.all() and tokenizer.decode(ids) == "zeb"
    batch, bmask = tokenizer.encode_batch(["open the drawer", "x"], 8)
    assert batch.shape == (2, 8) and bmask.sum(1).tolist() == [5, 3]
    assert ModelConfig().vocab_size >= tokenizer.VOCAB_SIZE


def test_presets_sizes_and_unknown_name():
    counts = {n: presets.param_count(presets.abstract_variables(presets.get_model_config(n)))
              for n in ("tiny", "small")}
    assert counts["tiny"] < 5e6 and 10e6 <= counts["small"] < 100e6
    with pytest.raises(ConfigError, match="did you mean 'small'") as e:
        presets.get_model_config("smal")
    assert "\n" not in str(e.value)


def test_fsdp_memory_command(capsys):
    abstract = presets.abstract_variables(presets.get_model_config("tiny"))
    n = presets.param_count(abstract)
    one = presets.fsdp_bytes_per_device(abstract, 1)
    eight = presets.fsdp_bytes_per_device(abstract, 8)
    assert one["params"] == 4 * n and one["total"] == 16 * n  # fp32 params + grads + 2 Adam moments
    assert one["params"] / 8 <= eight["params"] < one["params"] / 2  # mostly split 8 ways
    assert bench_memory.main(["tiny", "--devices", "8"]) == 0
    out = capsys.readouterr().out
    assert f"{n:,} parameters" in out and "FSDP over    8 devices" in out
    assert bench_memory.main(["tinny"]) == 2


def test_packed_flow_expert_equals_one_by_one(model_and_vars):
    """Two samples packed in one row: prefix tokens and action chunks (segment ids 1, 2) == run alone."""
    model, variables, obs = model_and_vars
    h = CFG.action_horizon
    app = lambda m: jax.jit(lambda v, *a: model.apply(v, *a, method=m))  # noqa: E731
    emb, mask = app(VLA.embed_prefix)(variables, obs)
    x = jax.random.normal(jax.random.key(3), (2, h, CFG.action_dim))
    t = jnp.array([0.3, 0.8])
    v_alone, _, _ = app(VLA.velocity)(variables, app(VLA.prefix)(variables, obs)[1], x, t)
    rows, segs, poss, a_seg, a_pos = [], [], [], [], []
    for b in range(2):
        e = np.asarray(emb[b])[np.asarray(mask[b])]
        n = e.shape[0]
        rows.append(e)
        segs.append(np.full(n, b + 1))
        poss.append(np.arange(n))
        a_seg.append(np.full(h, b + 1))
        a_pos.append(n + np.arange(h))
    pad = -sum(len(s) for s in segs) % 8
    packed = np.concatenate(rows + [np.zeros((pad, emb.shape[-1]), np.float32)])[None]
    seg = np.concatenate(segs + [np.zeros(pad)]).astype(np.int32)[None]
    pos = np.concatenate(poss + [np.zeros(pad)]).astype(np.int32)[None]
    _, cache = app(VLA.encode_prefix)(variables, packed, seg, pos)
    xp = x.reshape(1, 2 * h, CFG.action_dim)
    tp = jnp.repeat(t, h)[None]
    v_packed, _, _ = app(VLA.velocity)(variables, cache, xp, tp, jnp.asarray(np.concatenate(a_seg))[None],
                                       jnp.asarray(np.concatenate(a_pos))[None])
    np.testing.assert_allclose(v_packed.reshape(2, h, -1), v_alone, atol=1e-5)
