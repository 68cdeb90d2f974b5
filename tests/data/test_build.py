"""From a TrainConfig to batches: checks against the model, the three modes, automatic row sizing."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from vlajax.config.schema import MeshConfig, ModelConfig, get_config
from vlajax.data.build import make_loader, packed_rows
from vlajax.data.lerobot import DatasetError
from vlajax.data.normalize import unnormalize

from .helpers import write_dataset


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("b") / "ds"), lengths=(6, 7, 8, 9, 10, 11, 12, 13))


def _cfg(root, **data):
    cfg = get_config("debug")
    return cfg.replace(data=dataclasses.replace(cfg.data, dataset_dir=root, batch_size=8, **data))


def _mesh():
    from vlajax.training.sharding import make_mesh

    return make_mesh(MeshConfig(dp=4), jax.devices()[:4])


@pytest.mark.parametrize("mode", ["fixed", "dynamic", "packed"])
def test_modes_give_model_ready_batches(root, mode):
    cfg = _cfg(root, batching=mode, drop_cameras=("wrist",))
    loader, info = make_loader(cfg, _mesh())
    b = next(loader)
    loader.close()
    assert info.cameras == ("agentview",) and set(b["images"]) == {"agentview"}
    assert b["actions"].shape == (8, cfg.model.action_horizon, 7) and b["tokens"].shape == (8, 16)
    # one camera of 16 patches + instruction + state: far below the padded length
    seg = np.asarray(b["segment_ids"])
    if mode == "fixed":
        assert seg.shape == (8, info.spec.length)
    if mode == "dynamic":
        assert seg.shape[1] < info.spec.length and seg.shape[1] % cfg.model.seq_multiple == 0
    if mode == "packed":
        assert seg.shape == (info.rows, info.row_len) and info.rows % 4 == 0 and info.rows < 8
    # actions were normalized with the dataset's quantiles and invert to the raw actions' range
    raw = unnormalize(np.asarray(b["actions"]), info.norm["actions"], "quantile")
    assert raw.min() >= -0.01 and raw.max() <= 7.8


def test_packing_groups_keep_enough_samples_per_group():
    from vlajax.data.build import packing_groups

    assert packing_groups(64, 8) == 8  # 8 samples per device: one group each
    assert packing_groups(32, 8) == 1  # 4 per device would pack badly: one group for the process
    assert packing_groups(48, 4) == 4 and packing_groups(24, 4) == 1 and packing_groups(64, 1) == 1


def test_auto_rows_formula():
    # 64 samples of 40 tokens in rows of 128: 1.05 * 64 * 40 / 128 = 21 rows -> 24 (multiple of 8)
    assert packed_rows(40, 64, 128, 8) == 24


def test_dataset_that_does_not_fit_the_model_is_an_error(root):
    cfg = _cfg(root)
    with pytest.raises(DatasetError, match="actions have 7 dims, model.action_dim=6"):
        make_loader(cfg.replace(model=ModelConfig(action_dim=6)), None)
    with pytest.raises(DatasetError, match=r"data.drop_cameras \['top'\] are not in the dataset"):
        make_loader(_cfg(root, drop_cameras=("top",)), None)
    with pytest.raises(DatasetError, match="meta/info.json: missing file"):
        make_loader(_cfg(root + "/meta"), None)


def test_auto_packing_never_needs_more_tokens_than_fixed_on_tiny_batches(root):
    # 4 samples of ~44 tokens on dp=4: rows come in multiples of 4, and 4 rows of 2 x 56 would be
    # 448 tokens > 4 x 56 = 224; rows of 56 give 224.
    cfg = _cfg(root, batching="packed")
    cfg = cfg.replace(data=dataclasses.replace(cfg.data, batch_size=4))
    loader, info = make_loader(cfg, _mesh())
    b = next(loader)
    loader.close()
    assert (info.rows, info.row_len) == (4, info.spec.length) and b["segment_ids"].shape == (4, 56)


def test_camera_dropout_makes_prefixes_shorter_but_keeps_a_camera(root):
    loader, info = make_loader(_cfg(root, batching="fixed", camera_dropout=0.5), None)
    b = next(loader)
    loader.close()
    agent, wrist = b["image_masks"]["agentview"], b["image_masks"]["wrist"]
    assert agent.all() and 0 < wrist.sum() < len(wrist)  # 'agentview' (first) is never dropped
    loader, _ = make_loader(_cfg(root, batching="fixed", camera_dropout=0.5), None, train=False)
    assert next(loader)["image_masks"]["wrist"].all()  # evaluation input is untouched
    loader.close()
