"""sft.init_from: a run's weights into a fresh train state; mismatched leaves are named, value
heads and LoRA factors the source lacks start fresh."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, ModelConfig, SFTConfig, TrainConfig
from vlajax.data.normalize import NormStats
from vlajax.policies.bridge import Bridge
from vlajax.policies.run_files import CONFIG_FILE, config_to_dict, init_fn
from vlajax.sft import init_from
from vlajax.training import checkpoint, sharding

CAMS = ("agentview", "wrist")


def _state(cfg: TrainConfig, mesh, seed: int):
    state, _ = sharding.init_sharded(init_fn(cfg, CAMS), mesh, cfg.mesh.logical_rules, jax.random.key(seed))
    return state


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A run directory as `vlajax.train sft` writes it (tiny VLA, step 7)."""
    d = str(tmp_path_factory.mktemp("src"))
    cfg = TrainConfig(model=ModelConfig(action_dim=4, state_dim=8))
    mesh = sharding.make_mesh(cfg.mesh)
    state = _state(cfg, mesh, 0)
    with checkpoint.Checkpointer(d, async_save=False) as ckpt:
        ckpt.save(7, state, extra={"step": 7}, force=True)
    with open(os.path.join(d, CONFIG_FILE), "w") as f:
        json.dump(config_to_dict(cfg), f)
    s = NormStats(mean=np.zeros(8, np.float32), std=np.ones(8, np.float32), q01=-np.ones(8, np.float32),
                  q99=np.ones(8, np.float32))
    Bridge(cfg.model, CAMS, {"actions": NormStats(*(x[:4] for x in (s.mean, s.std, s.q01, s.q99))),
                             "state": s}).save(d)
    return d, cfg, jax.device_get(state.params)


def test_weights_load_and_a_value_head_starts_fresh(source):
    d, src_cfg, src_params = source
    cfg = src_cfg.replace(model=dataclasses.replace(src_cfg.model, value_head="prefix"),
                          sft=SFTConfig(init_from=d))
    mesh = sharding.make_mesh(cfg.mesh)
    fresh = _state(cfg, mesh, 1)
    state = init_from.load_into(cfg, fresh, mesh)
    for path, leaf in jax.tree_util.tree_flatten_with_path(src_params)[0]:
        got = state.params
        for k in path:
            got = got[k.key]
        np.testing.assert_array_equal(np.asarray(got), np.asarray(leaf))
    np.testing.assert_array_equal(np.asarray(state.params["value_out"]["kernel"]),
                                  np.asarray(fresh.params["value_out"]["kernel"]))


def test_a_model_of_another_size_is_named(source):
    d, src_cfg, _ = source
    cfg = src_cfg.replace(model=dataclasses.replace(src_cfg.model, mlp_dim=96), sft=SFTConfig(init_from=d))
    mesh = sharding.make_mesh(cfg.mesh)
    want = r"does not match model=tiny: shapes differ: \['llm/\S+ \(96, \d+\) vs \(128, \d+\)"
    with pytest.raises(ConfigError, match=want):
        init_from.load_into(cfg, _state(cfg, mesh, 1), mesh)
