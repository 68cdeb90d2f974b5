"""`model.aux_target='grasp_place'`: the targets derived from the demos, the loss term
(packed = padded, reaches the vision tower), and the refusals (one `error:` line)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from tests.sft.conftest import TEXTS, tiny_config
from tests.sft.test_sft import _batches
from vlajax import train as train_cli
from vlajax.config.schema import ConfigError
from vlajax.data.build import make_source
from vlajax.data.lerobot import DatasetError
from vlajax.data.writer import LeRobotWriter, policy_features
from vlajax.models.vla import VLA
from vlajax.policies.run_files import init_fn
from vlajax.sft.loop import loss_fn


def _write(root: str, grasps, length: int = 12) -> tuple[str, list, list]:
    """Episodes whose gripper closes at frame grasps[e] (None: never); returns the expected grasp/end xy."""
    rng = np.random.default_rng(1)
    want_grasp, want_end = [], []
    with LeRobotWriter(root, fps=50, features=policy_features(("agentview", "wrist"), 32, 8, 4)) as w:
        for e, g in enumerate(grasps):
            state = rng.standard_normal((length, 8)).astype(np.float32)
            action = rng.uniform(-1, 1, (length, 4)).astype(np.float32)
            action[:, 3] = -1.0
            if g is not None:
                action[g:, 3] = 1.0
                want_grasp.append(state[g, :2].copy())
            want_end.append(state[-1, :2].copy())
            w.add_episode({
                "observation.images.agentview": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.images.wrist": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.state": state, "action": action,
            }, task=TEXTS[e % len(TEXTS)])
    return root, want_grasp, want_end


def _aux_config(dataset: str, out: str, **sft):
    cfg = tiny_config(dataset, out, **sft)
    return cfg.replace(model=dataclasses.replace(cfg.model, aux_target="grasp_place"))


@pytest.fixture(scope="module")
def grasp_dataset(tmp_path_factory):
    return _write(str(tmp_path_factory.mktemp("aux") / "demos"), [3, 5, 2, 7, 4, 6, 1, 8])


def test_grasp_place_targets_are_the_grasp_and_last_state(grasp_dataset, tmp_path):
    root, grasp, end = grasp_dataset
    src = make_source(_aux_config(root, str(tmp_path)))
    raw = np.concatenate([np.repeat(np.concatenate([g, e])[None], 12, 0) for g, e in zip(grasp, end)])
    want = (raw - raw.mean(0)) / raw.std(0)
    got = np.stack([src[i]["aux_target"] for i in range(len(src))])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert all(src[i]["aux_frame_weight"] for i in range(len(src)))  # 'grasp_place': every frame counts
    assert "aux_target" not in make_source(tiny_config(root, str(tmp_path)))[0]  # off by default
    # 'grasp_place_pregrasp': the same targets, the loss only on the frames before the grasp
    cfg = _aux_config(root, str(tmp_path))
    pre = make_source(cfg.replace(model=dataclasses.replace(cfg.model, aux_target="grasp_place_pregrasp")))
    want_mask = np.concatenate([np.arange(12) < g for g in (3, 5, 2, 7, 4, 6, 1, 8)])
    np.testing.assert_array_equal([pre[i]["aux_frame_weight"] for i in range(len(pre))], want_mask)
    np.testing.assert_allclose(np.stack([pre[i]["aux_target"] for i in range(len(pre))]), want, rtol=1e-5, atol=1e-5)
    # 'grasp_place_start': before the grasp and within 2 cm (xy) of the episode's first frame
    st = make_source(cfg.replace(model=dataclasses.replace(cfg.model, aux_target="grasp_place_start")))
    xy = np.stack([st[i]["state"][:2] for i in range(len(st))]).reshape(8, 12, 2)
    near = (np.linalg.norm(xy - xy[:, :1], axis=-1) < 0.02).reshape(-1)
    got_mask = np.asarray([st[i]["aux_frame_weight"] for i in range(len(st))])
    np.testing.assert_array_equal(got_mask, near & want_mask)
    assert got_mask.sum() >= 8  # every episode's first frame at least


def test_an_episode_without_a_grasp_is_refused(tmp_path):
    root, _, _ = _write(str(tmp_path / "demos"), [3, None, 2])
    with pytest.raises(DatasetError, match="episode 1 never closes the gripper"):
        make_source(_aux_config(root, str(tmp_path)))


def test_aux_loss_packed_equals_padded_and_trains_the_vision_tower(grasp_dataset, tmp_path):
    cfg = _aux_config(grasp_dataset[0], str(tmp_path))
    cams, fixed, packed, _ = _batches(cfg)
    assert fixed["aux_target"].shape == (6, 4)
    params = jax.jit(init_fn(cfg, cams))(jax.random.key(0)).params
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    assert "aux_out" in params
    model = VLA(cfg.model)
    f = jax.jit(lambda p, b, w: loss_fn(p, model, b, jax.random.key(3), aux_weight=w))
    (ref, m_ref), (got, m) = f(params, fixed, 2.0), f(params, packed, 2.0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m["aux_target_mse"], m_ref["aux_target_mse"], rtol=1e-5, atol=1e-6)
    assert float(m_ref["aux_target_mse"]) > 0
    np.testing.assert_allclose(ref, m_ref["flow_mse"] + 2.0 * m_ref["aux_target_mse"], rtol=1e-6)
    zero = np.zeros_like(fixed["aux_frame_weight"])
    _, m_off = f(params, {**fixed, "aux_frame_weight": zero}, 2.0)  # frames of weight 0: no loss
    assert float(m_off["aux_target_mse"]) == 0.0 and float(m_off["flow_mse"]) == float(m_ref["flow_mse"])
    # The auxiliary loss alone moves the vision tower and the text embedding (it reads the prefix).
    g = jax.grad(lambda p: loss_fn(p, model, fixed, jax.random.key(3), aux_weight=1.0)[1]["aux_target_mse"])(params)
    for name in ("vision", "embed", "llm", "aux_out"):
        assert max(float(np.abs(x).max()) for x in jax.tree.leaves(g[name])) > 0, name
    assert all(float(np.abs(x).max()) == 0 for x in jax.tree.leaves(g["expert"]))


def test_refusals_are_one_error_line(grasp_dataset, tmp_path, capsys):
    root = grasp_dataset[0]
    code = train_cli.main(["sft", "--preset", "sft-tiny", "--data.dataset-dir", root, "--output-dir",
                           str(tmp_path / "a"), "--sft.aux-target-weight", "0.5", "--logging.progress", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: sft.aux_target_weight=0.5 needs"), err
    with pytest.raises(ConfigError, match="model.aux_target='grasp_place' is for model.family='vla'"):
        dataclasses.replace(tiny_config(root, str(tmp_path)).model, family="pi0", aux_target="grasp_place")


def test_token_head_adds_the_aux_loss_too(grasp_dataset, tmp_path):
    cfg = _aux_config(grasp_dataset[0], str(tmp_path))
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, action_head="tokens"))
    cams, fixed, _, _ = _batches(cfg)
    params = jax.jit(init_fn(cfg, cams))(jax.random.key(0)).params
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    model = VLA(cfg.model)
    total, m = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3), aux_weight=0.5))(params, fixed)
    assert float(m["aux_target_mse"]) > 0
    np.testing.assert_allclose(total, m["token_ce"] + 0.5 * m["aux_target_mse"], rtol=1e-6)


def test_aux_start_weight_weighs_the_start_frames(grasp_dataset, tmp_path, capsys):
    """`sft.aux_start_weight` W: the start frames (grasp_place_start's mask) weigh W in the aux loss, the
    others 1, and the loss is the weighted mean; refused unless model.aux_target='grasp_place'."""
    root = grasp_dataset[0]
    cfg = _aux_config(root, str(tmp_path))
    start = make_source(cfg.replace(model=dataclasses.replace(cfg.model, aux_target="grasp_place_start")))
    want = np.where(start.aux_frame_weight > 0, 7.0, 1.0)
    src = make_source(cfg.replace(sft=dataclasses.replace(cfg.sft, aux_start_weight=7.0)))
    np.testing.assert_array_equal(src.aux_frame_weight, want)
    assert 0 < (want == 7.0).sum() < len(want)
    # the loss: a weighted mean of the per-slot squared errors
    _, fixed, _, _ = _batches(cfg)
    params = jax.jit(init_fn(cfg, ("agentview", "wrist")))(jax.random.key(0)).params
    params = jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))
    model = VLA(cfg.model)
    f = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3))[1]["aux_target_mse"])
    n = fixed["aux_frame_weight"].shape[0]
    per_slot = []
    for k in range(n):  # each live slot alone: its own squared error
        one = np.zeros(n, np.float32)
        one[k] = 1.0
        per_slot.append(float(f(params, {**fixed, "aux_frame_weight": one})) if fixed["sample_mask"][k] else 0.0)
    w = np.linspace(1.0, 5.0, n).astype(np.float32) * fixed["sample_mask"]
    got = float(f(params, {**fixed, "aux_frame_weight": w}))
    np.testing.assert_allclose(got, np.sum(w * np.asarray(per_slot)) / np.sum(w), rtol=1e-5)
    assert len(set(np.round(per_slot, 6))) > 1  # slots differ, so the weights matter
    code = train_cli.main(["sft", "--preset", "sft-tiny", "--data.dataset-dir", root, "--output-dir",
                           str(tmp_path / "b"), "--sft.aux-start-weight", "30", "--logging.progress", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: sft.aux_start_weight=30.0 needs"), err
