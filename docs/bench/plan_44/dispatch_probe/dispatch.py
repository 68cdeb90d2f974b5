# Issue 44.5 tenth try, evidence (docs/planner.md "tenth"): a slot step returns to Python before it has computed.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python docs/bench/plan_44/dispatch_probe/dispatch.py (log.txt: 2026-11-29 ~09:57 UTC)
import dataclasses, time, jax, numpy as np
import vlajax.presets  # noqa
from vlajax import sharding
from vlajax.bench.async_loops import run_config
from vlajax.config import get_config
from vlajax.rl import learner, setup as rl_setup
from vlajax.rl.async_workload import RLWorkload
from vlajax.train_state import TrainState
base = get_config("rl-debug")
kw = dict(envs=16, slots=4, horizon=8, width=256, updates=2, max_wait_ms=2.0, out_dir="/tmp/dispatch_probe")
cfg = run_config(base, "mjx", "+streaming", **kw)
setup = rl_setup.build(cfg)
mesh, rules = sharding.make_mesh(cfg.mesh), cfg.mesh.logical_rules
tx = learner.make_optimizer(cfg.rl)
init = lambda rng: TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))
state, sh = sharding.init_sharded(init, mesh, rules, jax.random.key(0))
work = RLWorkload(cfg, setup)
reset, step, infer = work.env(4, None)
envs_of = {s: reset(s) for s in range(4)}
block = jax.block_until_ready
for rnd in range(12):
    outs = block(infer(state.params, [envs_of[s][1] for s in range(4)]))
    ts = []
    for s in range(4):
        t0 = time.perf_counter()
        r = step(s, envs_of[s][0], outs[s])
        t1 = time.perf_counter()
        block(r)
        t2 = time.perf_counter()
        envs_of[s] = r[:2]
        ts.append((round((t1-t0)*1e3,2), round((t2-t0)*1e3,2)))
    print(rnd, ts)
# infer dispatch
for rnd in range(5):
    t0=time.perf_counter(); o = infer(state.params, [envs_of[s][1] for s in range(4)]); t1=time.perf_counter(); block(o); t2=time.perf_counter()
    print("infer", round((t1-t0)*1e3,2), round((t2-t0)*1e3,2))
print("--- inputs not ready: infer dispatched, steps dispatched right after")
for rnd in range(8):
    t0 = time.perf_counter()
    outs = infer(state.params, [envs_of[s][1] for s in range(4)])
    t1 = time.perf_counter()
    ts = []
    rs = []
    for s in range(4):
        a = time.perf_counter()
        r = step(s, envs_of[s][0], outs[s])
        ts.append(round((time.perf_counter()-a)*1e3, 2))
        rs.append(r)
    t2 = time.perf_counter()
    block(rs)
    t3 = time.perf_counter()
    for s in range(4):
        envs_of[s] = rs[s][:2]
    print(rnd, "infer disp", round((t1-t0)*1e3,2), "steps disp", ts, "all done", round((t3-t0)*1e3,2))
