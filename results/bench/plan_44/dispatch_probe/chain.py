# Issue 44.5 tenth, evidence: a chain of 8 decisions dispatched without blocking -- how far Python runs ahead.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python results/bench/plan_44/dispatch_probe/chain.py
import time

import jax

from probe_slots import slot_path

params, reset, step, infer, _ = slot_path("mjx")
envs_of = {s: reset(s) for s in range(4)}
block = jax.block_until_ready
outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
for s in range(4):
    block(step(s, envs_of[s][0], outs[s]))
for seg in range(3):
    T0 = time.perf_counter(); marks = []
    for dec in range(8):
        outs = infer(params, [envs_of[s][1] for s in range(4)])
        for s in range(4):
            r = step(s, envs_of[s][0], outs[s]); envs_of[s] = r[:2]
        marks.append(round((time.perf_counter()-T0)*1e3, 1))
    block([envs_of[s] for s in range(4)])
    print("seg", seg, "dispatch marks per decision (ms)", marks, "all computed", round((time.perf_counter()-T0)*1e3, 1))
