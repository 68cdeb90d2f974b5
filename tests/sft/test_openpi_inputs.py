"""The π families' inputs: the data pipeline (vlajax.data.openpi) and the Bridge (vlajax.policies.pi)
build the same observation from the same frame; camera slots, resize with pad, padded dims."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, DataConfig, ModelConfig, TrainConfig
from vlajax.data import openpi
from vlajax.data.build import make_source, make_transform
from vlajax.data.normalize import NormStats, load_norm_stats, normalize
from vlajax.data.transforms import resize_with_pad
from vlajax.envs.tabletop import tasks
from vlajax.models import sp_tokenizer as spt
from vlajax.policies.bridge import Bridge
from vlajax.policies.pi import resize_uint8_with_pad
from vlajax.policies.pi import resize_with_pad as resize_with_pad_jax


def pi_model(tokenizer: str, family: str = "pi05", **kw) -> ModelConfig:
    """A small pi model config: dummy Gemma, SigLIP mu/14 x1 on 28x28 images (4 patches)."""
    base = dict(family=family, paligemma_variant="dummy", action_expert_variant="dummy", siglip_variant="mu/14",
                siglip_depth=1, image_size=28, num_cameras=3, vocab_size=1024, max_text_len=64, action_dim=8,
                state_dim=8, action_horizon=2, num_denoise_steps=2, tokenizer_path=tokenizer,
                flow_sampler="flow_sde", flow_sde_steps="last", flow_x1="zeros")
    return ModelConfig(**(base | kw))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    return spt.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "tiny.model"), texts)


@pytest.mark.parametrize("shape, size, border", [((32, 32, 3), 56, (0, 0)), ((32, 48, 3), 56, (9, 10)),
                                                 ((64, 40, 3), 28, (5, 6)), ((47, 30, 3), 56, (10, 11)),
                                                 ((32, 40, 3), 56, (6, 6))])
def test_resize_with_pad_host_and_jax_agree(shape, size, border):
    """The host path (`vlajax.shared.resize_pad`, PIL), the jitted uint8 path (PIL's integer bilinear) and the jitted
    float path (jax bilinear) share one layout: the same black borders, the odd pixel bottom / right; the
    two PIL paths bit for bit."""
    img = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    host = resize_with_pad(img, size, size).astype(np.float32) / 255.0
    dev = np.asarray(resize_with_pad_jax(jnp.asarray(img[None], jnp.float32) / 255.0, size))[0]
    assert host.shape == dev.shape == (size, size, 3)
    np.testing.assert_array_equal(host.max(-1) == 0, dev.max(-1) == 0)  # the same black borders
    assert np.abs(host - dev).max() <= 1.5 / 255  # PIL rounds to uint8
    pil = np.asarray(jax.jit(resize_uint8_with_pad, static_argnums=1)(img[None], size))[0]
    np.testing.assert_array_equal(np.round(pil * 255).astype(np.uint8), resize_with_pad(img, size, size))
    black = host.max(-1) == 0
    lines = black.all(1) if shape[0] <= shape[1] else black.all(0)  # fully black rows (wide) / columns (tall)
    assert (int(np.argmin(lines)), int(np.argmin(lines[::-1]))) == border  # (top / left, bottom / right)


def test_camera_map_errors():
    assert openpi.camera_map(("a=base_0_rgb", "b=left_wrist_0_rgb"), ("a", "b")) == (
        ("a", "base_0_rgb"), ("b", "left_wrist_0_rgb"))
    with pytest.raises(ConfigError, match="not one of the model.s slots"):
        openpi.camera_map(("a=front",), ("a",))
    with pytest.raises(ConfigError, match=r"\['b'\] have no entry"):
        openpi.camera_map(("a=base_0_rgb",), ("a", "b"))
    with pytest.raises(ConfigError, match="two of the cameras"):
        openpi.camera_map(("a=base_0_rgb", "b=base_0_rgb"), ("a", "b"))


def _cfg(dataset: str, model: ModelConfig, **data) -> TrainConfig:
    return TrainConfig(model=model, data=DataConfig(dataset_dir=dataset, batching="fixed", state_norm="quantile",
                                                    action_norm="quantile", **data))


def test_packed_batching_is_refused(synthetic_dataset, tokenizer):
    with pytest.raises(ConfigError, match="data.batching='packed' is not available for model.family='pi05'"):
        make_source(_cfg(synthetic_dataset, pi_model(tokenizer)).replace(
            data=DataConfig(dataset_dir=synthetic_dataset, batching="packed")))


def test_missing_tokenizer_file_fails_before_training(synthetic_dataset, tmp_path):
    cfg = _cfg(synthetic_dataset, pi_model(str(tmp_path / "missing.model")))
    src = make_source(cfg)
    stats = load_norm_stats(src.data.root, (src.action_key, src.state_key))
    norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
    with pytest.raises(FileNotFoundError, match="model.tokenizer_path=.*missing.model"):
        make_transform(cfg, ("agentview", "wrist"), norm)


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_pipeline_and_bridge_build_the_same_observation(synthetic_dataset, tokenizer, family):
    cfg = _cfg(synthetic_dataset, pi_model(tokenizer, family))
    src = make_source(cfg)
    stats = load_norm_stats(src.data.root, (src.action_key, src.state_key))
    norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
    cams = ("agentview", "wrist")
    group = make_transform(cfg, cams, norm, train=False)
    task_id, iid = 3, 1
    text = tasks.TASKS[task_id].instructions()[iid]
    rec = src[5]
    sample = group.apply_inputs({**rec, "instruction": text})
    assert sorted(sample["images"]) == ["base_0_rgb", "left_wrist_0_rgb"]  # the right wrist slot is left empty
    assert sample["images"]["base_0_rgb"].shape == (28, 28, 3)
    assert sample["state"].shape == (8,) and sample["actions"].shape == (2, 8)
    assert not sample["actions"][:, 4:].any()  # the dataset's 4 action dims, zero-padded
    tok = spt.PromptTokenizer.load(tokenizer, 64)
    raw_state = (rec["state"] - norm["state"].q01) * 2 / (norm["state"].q99 - norm["state"].q01 + 1e-6) - 1
    want = tok.pi05(text, raw_state) if family == "pi05" else tok.pi0(text)
    np.testing.assert_array_equal(sample["tokens"], want[0])

    bridge = Bridge.from_data(cfg, type("Info", (), {"cameras": cams, "norm": norm})())
    assert bridge.camera_map == (("agentview", "base_0_rgb"), ("wrist", "left_wrist_0_rgb"))
    bridge = Bridge.from_json(bridge.to_json())  # policy.json round trip
    env_obs = {f"pixels/{c}": jnp.asarray(rec["images"][c])[None] for c in cams}
    env_obs |= {"state": jnp.asarray(rec["state"])[None], "instruction_id": jnp.asarray([iid])}
    obs = jax.jit(bridge.observation)(env_obs, jnp.asarray([task_id]))
    assert sorted(obs.images) == list(openpi.SLOTS)
    assert obs.image_masks["right_wrist_0_rgb"].tolist() == [False] and not obs.images["right_wrist_0_rgb"].any()
    np.testing.assert_array_equal(np.asarray(obs.tokens[0]), sample["tokens"])
    np.testing.assert_array_equal(np.asarray(obs.token_mask[0]), sample["token_mask"])
    np.testing.assert_allclose(np.asarray(obs.state[0]), sample["state"], atol=1e-5)
    for _, slot in bridge.camera_map:
        np.testing.assert_allclose(np.asarray(obs.images[slot][0]), sample["images"][slot] / 255.0, atol=1.5 / 255)
    actions = jnp.zeros((1, 2, 8)).at[..., :4].set(0.5).at[..., 4:].set(9.0)
    env = bridge.env_actions(actions)
    assert env.shape == (1, 2, 4)  # the padded dims are cut before unnormalizing
    np.testing.assert_allclose(np.asarray(env), np.clip(group.apply_outputs({"actions": np.asarray(actions)})
                                                       ["actions"], -1, 1), atol=1e-6)


def test_pi05_without_discrete_state_uses_the_pi0_prompt(synthetic_dataset, tokenizer):
    cfg = _cfg(synthetic_dataset, pi_model(tokenizer, "pi05", discrete_state_input=False))
    src = make_source(cfg)
    stats = load_norm_stats(src.data.root, (src.action_key, src.state_key))
    norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
    sample = make_transform(cfg, ("agentview", "wrist"), norm).apply_inputs({**src[0], "instruction": "stack it"})
    np.testing.assert_array_equal(sample["tokens"], spt.PromptTokenizer.load(tokenizer, 64).pi0("stack it")[0])


def test_bridge_with_an_imported_checkpoints_wide_identity_stats(tokenizer):
    """The importer's policy.json without openpi norm stats: identity stats at 32 dims; the env's
    8-dim state is zero-padded before normalizing, the prompt carries 32 bins, actions come back 4-dim."""
    m = pi_model(tokenizer, "pi05", state_dim=32, action_dim=32, max_text_len=200, num_cameras=1)
    z, o = np.zeros(32, np.float32), np.ones(32, np.float32)
    ident = NormStats(mean=z, std=o, q01=-o, q99=o)
    bridge = Bridge(m, ("agentview",), {"actions": ident, "state": ident}, "quantile", "quantile", 4,
                    (("agentview", "base_0_rgb"),))
    state = np.linspace(-0.9, 0.9, 8).astype(np.float32)
    env_obs = {"pixels/agentview": jnp.zeros((1, 32, 32, 3), jnp.uint8), "state": jnp.asarray(state)[None],
               "instruction_id": jnp.asarray([0])}
    obs = bridge.observation(env_obs, jnp.asarray([2]))
    normalized = normalize(np.pad(state, (0, 24)), ident, "quantile")  # the padded zeros: bin 127 (EPS)
    want = spt.PromptTokenizer.load(tokenizer, 200).pi05(tasks.TASKS[2].instructions()[0], normalized)
    np.testing.assert_array_equal(np.asarray(obs.tokens[0]), want[0])
    assert bridge.env_actions(jnp.zeros((1, 2, 32))).shape == (1, 2, 4)
