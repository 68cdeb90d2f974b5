"""The dispatch probes' shared set-up: bench async's production workload (rl-debug, 16 envs, 4 slots, horizon 8,
width 256; as `plan profile` builds it) and its slot path's (reset, step, infer) from `RLWorkload.env`."""
import contextlib

import jax

import vlajax.config.presets  # noqa: F401  (registers the presets)
from vlajax.bench.async_loops import run_config
from vlajax.config.schema import get_config
from vlajax.envs.tabletop import c_physics
from vlajax.rl import learner
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_workload import RLWorkload
from vlajax.training import sharding
from vlajax.training.train_state import TrainState


def slot_path(regime: str = "mjx"):
    """-> (params, reset, step, infer, host) for `regime` ('mjx' | 'cpu-sim'); `host`: the context C MuJoCo's
    host calls run in (`c_physics.host_timing`, a null context for MJX)."""
    cfg = run_config(get_config("rl-debug"), regime, "+streaming", envs=16, slots=4, horizon=8, width=256,
                     updates=2, max_wait_ms=2.0, out_dir="/tmp/dispatch_probe")
    setup = rl_setup.build(cfg)
    mesh, rules = sharding.make_mesh(cfg.mesh), cfg.mesh.logical_rules
    tx = learner.make_optimizer(cfg.rl)
    state, _ = sharding.init_sharded(lambda r: TrainState.create(setup.init_params(r), tx, jax.random.fold_in(r, 1)),
                                     mesh, rules, jax.random.key(0))
    reset, step, infer = RLWorkload(cfg, setup).env(4, None)
    host = c_physics.host_timing() if regime == "cpu-sim" else contextlib.nullcontext()
    return state.params, reset, step, infer, host
