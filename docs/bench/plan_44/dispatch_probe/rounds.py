# Issue 44.5 tenth, evidence: 4 slot steps dispatched one after another vs from 4 threads released together.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python docs/bench/plan_44/dispatch_probe/rounds.py mjx|cpu-sim
import sys, threading, time, jax, numpy as np, contextlib
import vlajax.presets  # noqa
from vlajax import sharding
from vlajax.bench.async_loops import run_config
from vlajax.config import get_config
from vlajax.rl import learner, setup as rl_setup
from vlajax.rl.async_workload import RLWorkload
from vlajax.train_state import TrainState
from vlajax.envs.tabletop import c_physics
regime = sys.argv[1]
base = get_config("rl-debug")
kw = dict(envs=16, slots=4, horizon=8, width=256, updates=2, max_wait_ms=2.0, out_dir="/tmp/dispatch_probe")
cfg = run_config(base, regime, "+streaming", **kw)
setup = rl_setup.build(cfg)
mesh, rules = sharding.make_mesh(cfg.mesh), cfg.mesh.logical_rules
tx = learner.make_optimizer(cfg.rl)
init = lambda rng: TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))
state, sh = sharding.init_sharded(init, mesh, rules, jax.random.key(0))
work = RLWorkload(cfg, setup)
reset, step, infer = work.env(4, None)
envs_of = {s: reset(s) for s in range(4)}
block = jax.block_until_ready
cm = c_physics.host_timing() if regime == "cpu-sim" else contextlib.nullcontext()
with cm:
  for _ in range(3):
    outs = block(infer(state.params, [envs_of[s][1] for s in range(4)]))
    for s in range(4):
        envs_of[s] = block(step(s, envs_of[s][0], outs[s]))[:2]
  serial, par = [], []
  for rnd in range(20):
    outs = block(infer(state.params, [envs_of[s][1] for s in range(4)]))
    # serial dispatch
    t0 = time.perf_counter(); rs = []; ends = []
    for s in range(4):
        rs.append(step(s, envs_of[s][0], outs[s])); ends.append(time.perf_counter() - t0)
    block(rs); serial.append(ends)
    for s in range(4): envs_of[s] = rs[s][:2]
    outs = block(infer(state.params, [envs_of[s][1] for s in range(4)]))
    bar = threading.Barrier(5); ends = [None]*4; rs = [None]*4
    def go(s):
        bar.wait(); rs[s] = step(s, envs_of[s][0], outs[s]); ends[s] = time.perf_counter()
    ts = [threading.Thread(target=go, args=(s,)) for s in range(4)]
    for t in ts: t.start()
    bar.wait(); t0 = time.perf_counter()
    for t in ts: t.join()
    block(rs); par.append(sorted(e - t0 for e in ends))
    for s in range(4): envs_of[s] = rs[s][:2]
print(regime, "serial cumulative dispatch ends ms", np.round(np.median(np.array(serial), 0)*1e3, 2))
print(regime, "4 threads released together, sorted return ms", np.round(np.median(np.array(par), 0)*1e3, 2))
