"""The env <-> model bridge: instruction tokens, image/state conversion, action unnormalization."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import ModelConfig
from vlajax.data.normalize import NormStats, normalize
from vlajax.envs.tabletop import tasks
from vlajax.models.tokenizer import encode
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge


def _stats(d, lo=-2.0, hi=3.0):
    return NormStats(mean=np.full(d, 0.5, np.float32), std=np.full(d, 2.0, np.float32),
                     q01=np.full(d, lo, np.float32), q99=np.full(d, hi, np.float32))


def _bridge(**kw):
    cfg = dataclasses.replace(ModelConfig(), action_dim=4, **kw)
    return Bridge(cfg, ("agentview", "wrist"), {"actions": _stats(4), "state": _stats(8)})


def _env_obs(b, size=32):
    rng = np.random.default_rng(0)
    return {"pixels/agentview": rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8),
            "pixels/wrist": rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8),
            "state": rng.standard_normal((b, 8)).astype(np.float32),
            "instruction_id": np.array([0, 5, 17][:b], np.int32)}


def test_observation_matches_the_training_transforms():
    br = _bridge()
    env_obs = _env_obs(3)
    task_id = np.array([0, 4, 11], np.int32)
    obs = jax.jit(br.observation)(env_obs, task_id)
    for i in range(3):
        text = tasks.TASKS[task_id[i]].instructions()[env_obs["instruction_id"][i]]
        ids, mask = encode(text, br.model.max_text_len)
        np.testing.assert_array_equal(obs.tokens[i], ids)
        np.testing.assert_array_equal(obs.token_mask[i], mask)
    np.testing.assert_allclose(obs.images["wrist"], env_obs["pixels/wrist"] / 255.0, atol=1e-7)
    np.testing.assert_allclose(obs.state, normalize(env_obs["state"], br.norm["state"], "mean_std"), atol=1e-6)
    assert all(bool(m.all()) for m in obs.image_masks.values())


def test_env_actions_invert_normalization_and_clip():
    br = _bridge()
    raw = np.array([[-0.9, 0.0, 0.5, 0.99], [-3.0, 2.0, 1.5, -1.5]], np.float32)
    norm = normalize(raw, br.norm["actions"], "quantile")
    out = np.asarray(br.env_actions(norm))
    np.testing.assert_allclose(out, np.clip(raw, -1, 1), atol=1e-5)


def test_act_is_jittable_and_round_trips_through_json(tmp_path):
    br = _bridge()
    model = VLA(br.model)
    obs = br.observation(_env_obs(2), 3)
    variables = jax.jit(model.init)(jax.random.key(0), obs)
    act = jax.jit(lambda v, o, r: br.act(model, v, o, r, task_id=jnp.int32(3)))
    a = act(variables, _env_obs(2), jax.random.key(1))
    assert a.shape == (2, br.model.action_horizon, 4) and np.all(np.abs(np.asarray(a)) <= 1)
    br.save(str(tmp_path))
    back = Bridge.load(str(tmp_path))
    assert back.model == br.model and back.cameras == br.cameras
    np.testing.assert_allclose(back.norm["actions"].q99, br.norm["actions"].q99)
    np.testing.assert_array_equal(act(variables, _env_obs(2), jax.random.key(1)),
                                  jax.jit(lambda v, o, r: back.act(model, v, o, r, task_id=3))(
                                      variables, _env_obs(2), jax.random.key(1)))
