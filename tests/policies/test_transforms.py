"""A policy is an ordered list of transforms built from `policy.json`; one robot key table; one SFT loss."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vlajax
from vlajax.config.openpi import OPENPI_CONFIGS
from vlajax.config.schema import ModelConfig
from vlajax.data.normalize import NormStats
from vlajax.libero import protocol
from vlajax.models import sp_tokenizer as spt
from vlajax.policies import transforms as T
from vlajax.policies.bridge import Bridge
from vlajax.serve.spec import KeyMap
from vlajax.sft import loss
from vlajax.shared.robots import ROBOTS, camera_keys


def _stats(d: int) -> NormStats:
    return NormStats(mean=np.full(d, 0.5, np.float32), std=np.full(d, 2.0, np.float32),
                     q01=np.full(d, -2.0, np.float32), q99=np.full(d, 3.0, np.float32))


def _names(group: list[str]) -> list[str]:
    return [s.split("(")[0] for s in group]


def test_small_vla_transform_list_is_data_and_runs_jitted(tmp_path):
    cfg = dataclasses.replace(ModelConfig(), action_dim=7)
    bridge = Bridge(cfg, ("agentview", "wrist"), {"actions": _stats(7), "state": _stats(8)}, env_action_dim=7)
    d = bridge.describe()
    assert _names(d["prompt"]) == ["ByteTokenizePrompt"] and d["robot"] == []
    assert _names(d["inputs"]) == ["CameraImages", "TaskTokens", "NormalizeState", "PadState"]
    assert d["outputs"] == ["Unnormalize(mode='quantile')", "KeepDims(dims=7)", "Clip(low=-1.0, high=1.0)"]
    # the list is rebuilt from policy.json alone, step for step
    bridge.save(str(tmp_path))
    assert Bridge.load(str(tmp_path)).describe() == d
    # a chain of transforms is one traced program: jitted == eager
    rng = np.random.default_rng(0)
    env_obs = {"pixels/agentview": rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8),
               "pixels/wrist": rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8),
               "state": rng.standard_normal((2, 8)).astype(np.float32), "instruction_id": np.array([0, 1], np.int32)}
    eager, jitted = bridge.observation(env_obs, 3), jax.jit(bridge.observation)(env_obs, 3)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    assert eager.images["agentview"].shape == (2, cfg.image_size, cfg.image_size, 3)
    actions = rng.uniform(-1, 1, (2, cfg.action_horizon, 7)).astype(np.float32)
    out = jax.jit(bridge.env_actions)(actions)
    want = T.compose((T.Unnormalize(_stats(7), "quantile"), T.Clip()), {"actions": actions})["actions"]
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-6)
    assert float(jnp.abs(out).max()) <= 1.0


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    from vlajax.envs.tabletop import tasks

    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    return spt.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "tiny.model"), texts)


def test_imported_openpi_policy_lists_openpis_order(tokenizer):
    """pi0_libero's record: prompt -> robot inputs -> normalize -> tokens -> pad | unnormalize ->
    AbsoluteActions -> the robot's outputs (openpi's order); pi05_libero has no delta mask."""
    for name, absolute in (("pi0_libero", True), ("pi05_libero", False)):
        c = OPENPI_CONFIGS[name]
        m = ModelConfig(family="pi05" if c.pi05 else "pi0", paligemma_variant="dummy", action_expert_variant="dummy",
                        siglip_variant="mu/14", siglip_depth=1, image_size=28, num_cameras=3, vocab_size=1024,
                        max_text_len=64, action_dim=32, state_dim=32, action_horizon=2, num_denoise_steps=2,
                        tokenizer_path=tokenizer, discrete_state_input=c.discrete_state_input)
        t = c.transforms
        bridge = Bridge(m, t.cameras, {"actions": _stats(7), "state": _stats(8)}, "mean_std", "mean_std",
                        t.keys.action_dims, t.keys.camera_map, t)
        d = bridge.describe()
        assert _names(d["prompt"]) == ["InjectDefaultPrompt", "TokenizePrompt"]
        assert d["robot"] == ["RobotInputs(robot='libero')"]
        assert _names(d["inputs"]) == ["SlotImages", "NormalizeState", "PromptTokens", "PadState"]
        assert d["outputs"] == ["Unnormalize(mode='mean_std')", *(["AbsoluteActions(robot='libero')"] * absolute),
                                "RobotOutputs(robot='libero')"]
        raw = {"observation/image": np.zeros((1, 40, 30, 3), np.uint8),
               "observation/wrist_image": np.zeros((1, 40, 30, 3), np.uint8),
               "observation/state": np.linspace(-1, 1, 8, dtype=np.float32)[None]}
        out = bridge.env_actions(np.zeros((1, 2, 32), np.float32), raw)
        assert out.shape == (1, 2, 7)
        if absolute:  # the robot's state added back on the first 6 dims, the gripper not
            np.testing.assert_allclose(np.asarray(out)[0, :, :6] - 0.5, np.broadcast_to(raw["observation/state"][0, :6],
                                                                                       (2, 6)), atol=1e-5)
            with pytest.raises(ValueError, match="returns absolute actions"):
                bridge.env_actions(np.zeros((1, 2, 32), np.float32))


def test_one_robot_key_table():
    libero = camera_keys("libero")
    # openpi's LIBERO example sends these keys; the worker protocol and the server's key map read the table
    want = ("observation/image", "observation/wrist_image", "observation/state")
    assert (libero["agentview"], libero["wrist"], ROBOTS["libero"].state[0]) == want
    keys = (protocol.IMAGE_KEY, protocol.WRIST_KEY, protocol.STATE_KEY, protocol.PROMPT_KEY)
    assert keys == (*want, "prompt")
    assert KeyMap.make("libero", ("agentview", "wrist")).images == tuple(libero.items())
    droid = KeyMap.make("droid", ("agentview", "wrist"))
    assert droid.state == "+".join(ROBOTS["droid"].state) and dict(droid.images) == camera_keys("droid")
    assert KeyMap.make("suite", ("agentview",)).images == (("agentview", "pixels/agentview"),)
    assert OPENPI_CONFIGS["pi0_aloha"].transforms.keys is ROBOTS["aloha"]


def test_sft_loss_is_the_sft_loss():
    assert vlajax.sft_loss is loss.loss_fn
