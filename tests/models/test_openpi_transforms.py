"""openpi's robot data transforms (`vlajax.config.openpi`) on raw observations: LIBERO, DROID and
ALOHA keys, states and actions, and a Bridge that reads DROID's raw keys. No reference data needed."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.openpi import OPENPI_CONFIGS, OpenpiTransforms, make_bool_mask


def test_make_bool_mask_is_openpis():
    assert make_bool_mask(6, -1) == (True,) * 6 + (False,)
    assert make_bool_mask(2, -2, 2) == (True, True, False, False, True, True)


def test_libero_absolute_actions_and_dims():
    """pi0_libero: actions[..., :6] += state[..., :6] (AbsoluteActions), the first 7 dims kept."""
    t = OPENPI_CONFIGS["pi0_libero"].transforms
    actions = np.arange(2 * 3 * 9, dtype=np.float32).reshape(2, 3, 9)
    state = np.arange(16, dtype=np.float32).reshape(2, 8) * 0.5
    out = np.asarray(t.robot_actions(jnp.asarray(actions), jnp.asarray(state)))
    want = actions[..., :7].copy()
    want[..., :6] += state[:, None, :6]
    np.testing.assert_allclose(out, want)
    assert OPENPI_CONFIGS["pi05_libero"].transforms.delta_mask == ()  # pi05_libero: extra_delta_transform=False


def test_droid_keys_and_state():
    """DroidInputs: exterior / wrist images; state = joint_position [7] + gripper_position (a scalar
    or [1] per row); DroidOutputs: 8 dims."""
    t = OPENPI_CONFIGS["pi05_droid"].transforms
    b = 2
    img = np.zeros((b, 180, 320, 3), np.uint8)
    joints = np.arange(14, dtype=np.float32).reshape(b, 7)
    for gripper in (np.asarray([0.25, 0.75], np.float32), np.asarray([[0.25], [0.75]], np.float32)):
        view = t.env_view({"observation/exterior_image_1_left": img, "observation/wrist_image_left": img + 1,
                           "observation/joint_position": joints, "observation/gripper_position": gripper,
                           "prompt": "x"})
        np.testing.assert_array_equal(view["state"], np.concatenate([joints, [[0.25], [0.75]]], axis=1))
        assert view["pixels/agentview"].max() == 0 and view["pixels/wrist"].min() == 1 and view["prompt"] == "x"
    assert t.robot_actions(jnp.zeros((b, 15, 32)), None).shape == (b, 15, 8)
    assert dict(t.keys.camera_map) == {"agentview": "base_0_rgb", "wrist": "left_wrist_0_rgb"}


def _aloha_reference(state, actions):
    """openpi's aloha_policy formulas (adapt_to_pi=True), in numpy, for the check."""
    flip = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1])
    s = flip * state
    g = s[..., [6, 13]] * (0.05800 - 0.01844) + 0.01844
    g = np.arcsin(np.clip((0.022**2 + g**2 - 0.036**2) / (2 * 0.022 * g), -1.0, 1.0))
    s[..., [6, 13]] = (g - 0.5476) / (1.6296 - 0.5476)
    a = flip * actions[..., :14]
    a[..., [6, 13]] = (a[..., [6, 13]] + 0.5476 + 0.6213) / (1.4910 + 0.6213)
    return s, a


def test_aloha_state_images_and_actions():
    """AlohaInputs / AlohaOutputs (adapt_to_pi): joint flips, gripper maps, [3, h, w] images."""
    t = OPENPI_CONFIGS["pi0_aloha_sim"].transforms
    assert t.adapt_to_pi and t.default_prompt == "Transfer cube" and t.delta_mask == ()
    rng = np.random.default_rng(0)
    state = rng.uniform(0.1, 0.9, (2, 14)).astype(np.float32)
    actions = rng.normal(size=(2, 5, 32)).astype(np.float32)
    view = t.env_view({"images/cam_high": np.zeros((2, 3, 48, 64), np.uint8), "state": state})
    assert view["pixels/agentview"].shape == (2, 48, 64, 3) and "pixels/wrist" not in view
    want_state, want_actions = _aloha_reference(state.astype(np.float64), actions.astype(np.float64))
    np.testing.assert_allclose(np.asarray(view["state"]), want_state, atol=1e-5)
    np.testing.assert_allclose(np.asarray(t.robot_actions(jnp.asarray(actions), view["state"])), want_actions,
                               atol=1e-5)
    assert set(t.keys.optional) == {"wrist", "wrist_right"}


def test_record_round_trips_and_refuses_unknown_robots():
    t = OPENPI_CONFIGS["pi0_aloha"].transforms
    assert OpenpiTransforms.from_json(t.to_json()) == t and len(t.delta_mask) == 14
    with pytest.raises(ValueError, match="choose from"):
        OpenpiTransforms("x", "ur5", "a")


def test_bridge_reads_droid_raw_keys(tmp_path):
    """A Bridge with DROID's transforms: the raw keys go to openpi's slots (right wrist black, mask
    False), the concatenated state is normalized and padded, the prompt is π0's, actions 8-dim."""
    from vlajax.config.schema import ModelConfig
    from vlajax.data.normalize import NormStats
    from vlajax.models import sp_tokenizer
    from vlajax.policies.bridge import Bridge

    tok = sp_tokenizer.train_tiny_model(str(tmp_path / "t.model"), ["pick up the cup", "open the drawer"])
    m = ModelConfig(family="pi0", paligemma_variant="dummy", action_expert_variant="dummy", siglip_variant="mu/14",
                    siglip_depth=1, image_size=28, num_cameras=3, vocab_size=1024, max_text_len=16, action_dim=32,
                    state_dim=32, action_horizon=2, num_denoise_steps=2, tokenizer_path=tok)
    z, o = np.zeros(8, np.float32), np.ones(8, np.float32)
    stats = NormStats(mean=z + 1, std=o * 2, q01=-o, q99=o)
    t = OPENPI_CONFIGS["pi0_droid"].transforms
    bridge = Bridge(m, t.cameras, {"actions": stats, "state": stats}, "mean_std", "mean_std", t.keys.action_dims,
                    t.keys.camera_map, openpi=t)
    raw = {"observation/exterior_image_1_left": np.full((1, 28, 56, 3), 255, np.uint8),
           "observation/wrist_image_left": np.full((1, 28, 28, 3), 255, np.uint8),
           "observation/joint_position": np.full((1, 7), 3.0, np.float32),
           "observation/gripper_position": np.full((1, 1), 5.0, np.float32)}
    ids, mask = bridge.encode_instructions(["pick up the cup"], raw)
    np.testing.assert_array_equal(ids[0], sp_tokenizer.PromptTokenizer.load(tok, 16).pi0("pick up the cup")[0])
    obs = bridge.observation({**raw, "tokens": ids, "token_mask": mask})
    assert bool(obs.image_masks["base_0_rgb"][0]) and not bool(obs.image_masks["right_wrist_0_rgb"][0])
    base = np.asarray(obs.images["base_0_rgb"][0])
    assert base[0].max() == 0 and base[14].min() == 1.0  # 28x56 -> 14 rows, centred on black
    np.testing.assert_allclose(np.asarray(obs.state[0, :8]), [1.0] * 7 + [2.0], atol=1e-5)  # (x - 1) / 2
    assert not np.asarray(obs.state[0, 8:]).any()
    assert bridge.env_actions(jnp.zeros((1, 2, 32)), raw).shape == (1, 2, 8)


def test_server_reads_droid_keys():
    """The server's `droid` key map: openpi's DROID client keys, the state joined from its two keys."""
    from vlajax.serve.spec import KeyMap, ObsError, ObsSpec

    keys = KeyMap.make("droid", ("agentview", "wrist"))
    spec = ObsSpec(keys, (8, 8, 3), 8, max_text_len=6, vocab_size=300)
    img = np.zeros((8, 8, 3), np.uint8)
    obs = {"observation/exterior_image_1_left": img, "observation/wrist_image_left": img,
           "observation/joint_position": np.arange(7, dtype=np.float64), "observation/gripper_position": 0.5,
           "prompt": "go"}
    np.testing.assert_array_equal(spec.parse(obs).state, [0, 1, 2, 3, 4, 5, 6, 0.5])
    with pytest.raises(ObsError, match="expected \\(8,\\)"):
        spec.parse({**obs, "observation/joint_position": np.arange(6, dtype=np.float64)})
    with pytest.raises(ObsError, match="missing key 'observation/gripper_position'"):
        spec.parse({k: v for k, v in obs.items() if k != "observation/gripper_position"})


def test_nested_observations_flatten_to_openpis_keys():
    from vlajax.policies.policy import _flatten

    img = np.zeros((3, 4, 4), np.uint8)
    flat = _flatten({"images": {"cam_high": img, "cam_left_wrist": img}, "state": np.zeros(14), "prompt": "p"})
    assert sorted(flat) == ["images/cam_high", "images/cam_left_wrist", "prompt", "state"]
    view = OPENPI_CONFIGS["pi0_aloha_sim"].transforms.env_view({k: np.asarray(v)[None] for k, v in flat.items()
                                                                 if k != "prompt"})
    assert view["pixels/agentview"].shape == (1, 4, 4, 3) and view["pixels/wrist"].shape == (1, 4, 4, 3)
