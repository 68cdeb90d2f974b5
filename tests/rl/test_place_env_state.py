"""The PPO env state split over `dp` keeps its shardings through `collect`: one compile for every iteration.

`mjx.Data` has zero-size leaves (e.g. `[B, 0]` for a model without some element). Placed on
`dp` they came back from the jitted collect replicated, so iteration 2 saw other input
shardings than iteration 1 and compiled the whole collect (MJX physics + the policy) a second
time on every multi-device run. `place_env_state` replicates them from the start.
"""

import dataclasses
import functools

import jax
import numpy as np
from jax.sharding import NamedSharding

import vlajax.config.presets  # noqa: F401  (registers the presets)
from vlajax.config.schema import MeshConfig, get_config
from vlajax.rl import setup as rl_setup
from vlajax.training import sharding


def test_collect_compiles_once_on_a_dp_mesh():
    cfg = get_config("rl-debug")
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=4),
                              rl=dataclasses.replace(cfg.rl, rollout_length=2))
    mesh = sharding.make_mesh(MeshConfig(dp=2), devices=jax.devices()[:2])
    rules = cfg.mesh.logical_rules
    setup = rl_setup.build(cfg, mesh)
    params = jax.device_put(setup.init_params(jax.random.key(0)), sharding.replicated(mesh))
    collect_fn = jax.jit(functools.partial(rl_setup.collect, cfg, setup))
    with sharding.use_mesh(mesh, rules):
        env_state = jax.jit(functools.partial(rl_setup.initial_env_state, cfg, setup.env))()  # as loop.train
        env_state = rl_setup.place_env_state(env_state, mesh)
        leaves = jax.tree.leaves(env_state)
        assert any(x.size == 0 for x in leaves), "the test needs mjx.Data's zero-size leaves"
        split, whole = sharding.data_sharding(mesh).spec, sharding.replicated(mesh).spec
        for x in leaves:  # per-env leaves split over dp, zero-size ones replicated
            spec = x.sharding.spec if isinstance(x.sharding, NamedSharding) else None
            assert spec == (whole if x.size == 0 or x.shape[0] % 2 else split)
        for it in range(3):
            before = [x.sharding for x in jax.tree.leaves(env_state)]
            env_state, batch, _ = collect_fn(params, env_state, jax.random.key(it), np.int32(it))
            assert [x.sharding for x in jax.tree.leaves(env_state)] == before
        jax.block_until_ready(batch)
    assert collect_fn._cache_size() == 1
