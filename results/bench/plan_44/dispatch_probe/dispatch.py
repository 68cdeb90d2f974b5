# Issue 44.5 tenth try, evidence (docs/planner.md "tenth"): a slot step returns to Python before it has computed.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python results/bench/plan_44/dispatch_probe/dispatch.py (log.txt: 2026-11-29 ~09:57 UTC)
import time

import jax

from probe_slots import slot_path

params, reset, step, infer, _ = slot_path("mjx")
envs_of = {s: reset(s) for s in range(4)}
block = jax.block_until_ready
for rnd in range(12):
    outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
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
    t0=time.perf_counter(); o = infer(params, [envs_of[s][1] for s in range(4)]); t1=time.perf_counter(); block(o); t2=time.perf_counter()
    print("infer", round((t1-t0)*1e3,2), round((t2-t0)*1e3,2))
print("--- inputs not ready: infer dispatched, steps dispatched right after")
for rnd in range(8):
    t0 = time.perf_counter()
    outs = infer(params, [envs_of[s][1] for s in range(4)])
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
