"""Normalization (stats errors, inverses) and the sample transforms."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vlajax.data.lerobot import DatasetError, LeRobotData
from vlajax.data.normalize import NormStats, load_norm_stats, normalize, unnormalize
from vlajax.data.source import ActionChunkSource
from vlajax.data.transforms import (
    AugmentImages,
    Compose,
    Normalize,
    RandomDropCamera,
    ResizeImages,
    SelectCameras,
    Tokenize,
)

from .helpers import FIXTURE, load_json, save_json, write_dataset


def test_stats_from_the_fixture_and_exact_inverses():
    st = load_norm_stats(FIXTURE, ("action", "observation.state"), dims={"action": 7, "observation.state": 8})
    a = st["action"]
    assert a.mean.shape == (7,) and a.mean.dtype == np.float32
    x = np.random.default_rng(0).normal(size=(5, 4, 7)).astype(np.float32) + a.mean
    for mode in ("mean_std", "quantile"):
        y = normalize(x, a, mode)
        np.testing.assert_allclose(unnormalize(y, a, mode), x, atol=1e-5)
    # quantile: q01 -> -1 and q99 -> +1 (up to eps)
    np.testing.assert_allclose(normalize(a.q01, a, "quantile"), -1, atol=1e-4)
    np.testing.assert_allclose(normalize(a.q99, a, "quantile"), 1, atol=1e-4)
    np.testing.assert_allclose(normalize(a.mean + a.std, a, "mean_std"), 1, atol=1e-3)


def test_min_max_mode_covers_the_whole_range_and_needs_min_max():
    # the lerobot fixture's stats.json has min/max: every recorded action maps into [-1, 1]
    a = load_norm_stats(FIXTURE, ("action",))["action"]
    assert a.min is not None and np.all(a.min <= a.q01) and np.all(a.max >= a.q99)
    np.testing.assert_allclose(normalize(a.min, a, "min_max"), -1, atol=1e-4)
    np.testing.assert_allclose(normalize(a.max, a, "min_max"), 1, atol=1e-4)
    x = np.random.default_rng(1).uniform(a.min, a.max, size=(6, 7)).astype(np.float32)
    np.testing.assert_allclose(unnormalize(normalize(x, a, "min_max"), a, "min_max"), x, atol=1e-5)
    # what quantile loses: the action minimum lies below -1 there (outside the token bins)
    assert np.any(normalize(a.min, a, "quantile") < -1.001) or np.allclose(a.min, a.q01)
    no_minmax = NormStats(a.mean, a.std, a.q01, a.q99)
    with pytest.raises(ValueError, match="min_max"):
        normalize(x, no_minmax, "min_max")


def test_min_max_must_be_well_formed(root):
    path = os.path.join(root, "meta", "stats.json")
    stats = load_json(path)
    stats["action"]["max"] = [v - 10.0 for v in stats["action"]["min"]]  # max < min
    save_json(path, stats)
    with pytest.raises(DatasetError, match="min/max"):
        load_norm_stats(root, ("action",))


def test_constant_dimension_stays_finite():
    s = NormStats(*(np.array(v, np.float32) for v in ([1, 2], [0, 1], [1, 0], [1, 3])))
    y = normalize(np.array([1.0, 2.0]), s, "quantile")
    assert np.all(np.isfinite(y)) and y[0] == -1


@pytest.fixture
def root(tmp_path):
    return write_dataset(str(tmp_path / "ds"))


def test_missing_stats_file_is_an_error(root):
    os.remove(f"{root}/meta/stats.json")
    with pytest.raises(DatasetError, match="meta/stats.json: missing file"):
        load_norm_stats(root, ("action",))


def test_missing_feature_stats_is_an_error(root):
    st = load_json(f"{root}/meta/stats.json")
    del st["action"]
    save_json(f"{root}/meta/stats.json", st)
    with pytest.raises(DatasetError, match="stats.json: no statistics for feature 'action'"):
        load_norm_stats(root, ("action",))


@pytest.mark.parametrize("corrupt, message", [
    (lambda s: s.update(std=[float("nan")] * 7), "NaN or inf"),
    (lambda s: s.update(std=[-1.0] * 7), "negative std"),
    (lambda s: s.update(std=[0.0] * 7, q01=[0.5] * 7, q99=[0.5] * 7), "every dimension is constant"),
    (lambda s: s.update(mean=[0.0] * 6), "shapes"),
    (lambda s: s.pop("q99"), "lacks statistics \\['q99'\\]"),
])
def test_degenerate_stats_are_errors(root, corrupt, message):
    st = load_json(f"{root}/meta/stats.json")
    corrupt(st["action"])
    save_json(f"{root}/meta/stats.json", st)
    with pytest.raises(DatasetError, match=f"stats.json: .*{message}"):
        load_norm_stats(root, ("action",), dims={"action": 7})


def test_written_stats_describe_the_data(root):
    d = LeRobotData(root)
    st = load_norm_stats(root, ("action",))["action"]
    np.testing.assert_allclose(st.mean, d.columns["action"].mean(0), atol=1e-6)
    np.testing.assert_allclose(st.std, d.columns["action"].std(0), atol=1e-6)


def _sample(root, i=3):
    return ActionChunkSource(LeRobotData(root), 4)[i]


def test_camera_selection_removes_cameras(root):
    s = _sample(root)
    assert sorted(SelectCameras(drop=("wrist",))(s)["images"]) == ["agentview"]
    assert sorted(SelectCameras(keep=("wrist",))(s)["images"]) == ["wrist"]
    with pytest.raises(KeyError, match="'top'"):
        SelectCameras(drop=("top",))(s)
    src = ActionChunkSource(LeRobotData(root), 4)
    drop = RandomDropCamera("wrist", p=0.5, seed=0)
    kept = [("wrist" in drop(src[i])["images"]) for i in range(len(src))]
    assert 0 < sum(kept) < len(kept)  # some samples lose the camera, some keep it
    assert kept == [("wrist" in drop(src[i])["images"]) for i in range(len(src))]  # deterministic per record


def test_resize_augment_tokenize_normalize(root):
    s = _sample(root)
    r = ResizeImages(16)(s)
    assert r["images"]["wrist"].shape == (16, 16, 3) and r["images"]["wrist"].dtype == np.uint8
    aug = AugmentImages(seed=0)
    a1, a2 = aug(s), aug(s)
    np.testing.assert_array_equal(a1["images"]["agentview"], a2["images"]["agentview"])  # deterministic
    assert not np.array_equal(a1["images"]["agentview"], s["images"]["agentview"])
    assert a1["images"]["agentview"].shape == (32, 32, 3)
    t = Tokenize(16)(s)
    assert t["tokens"].shape == (16,) and t["tokens"].dtype == np.int32
    assert 2 < t["token_mask"].sum() <= 16
    stats = load_norm_stats(root, ("action", "observation.state"))
    n = Normalize({"actions": stats["action"], "state": stats["observation.state"]})
    out = Compose((Tokenize(16), n))(s)
    np.testing.assert_allclose(unnormalize(out["actions"], stats["action"], "quantile"), s["actions"], atol=1e-5)
    np.testing.assert_allclose(unnormalize(out["state"], stats["observation.state"], "mean_std"), s["state"],
                               atol=1e-5)


def test_group_outputs_undo_inputs(root):
    from vlajax.data.transforms import Group, Unnormalize

    stats = load_norm_stats(root, ("action", "observation.state"))
    norm = {"actions": stats["action"], "state": stats["observation.state"]}
    g = Group((Tokenize(16),)).push((Normalize(norm),), (Unnormalize(norm),))
    assert [type(t).__name__ for t in g.inputs] == ["Tokenize", "Normalize"]
    s = _sample(root)
    back = g.apply_outputs(g.apply_inputs(s))
    np.testing.assert_allclose(back["actions"], s["actions"], atol=1e-5)
    np.testing.assert_allclose(back["state"], s["state"], atol=1e-5)
    assert g.push(outputs=(Compose(),)).outputs[0] == Compose()  # pushed outputs run first


def test_action_norm_auto_follows_the_head():
    from vlajax.config.schema import DataConfig, ModelConfig, TrainConfig, action_norm

    assert action_norm(TrainConfig(model=ModelConfig(action_head="flow"))) == "quantile"
    assert action_norm(TrainConfig(model=ModelConfig(action_head="tokens"))) == "min_max"
    explicit = TrainConfig(model=ModelConfig(action_head="tokens"), data=DataConfig(action_norm="quantile"))
    assert action_norm(explicit) == "quantile"
