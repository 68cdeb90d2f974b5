# Issue 44.5 tenth, evidence: 4 slot steps dispatched one after another vs from 4 threads released together.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python results/bench/plan_44/dispatch_probe/rounds.py mjx|cpu-sim
import sys
import threading
import time

import jax
import numpy as np

from probe_slots import slot_path

regime = sys.argv[1]
params, reset, step, infer, cm = slot_path(regime)
envs_of = {s: reset(s) for s in range(4)}
block = jax.block_until_ready
with cm:
  for _ in range(3):
    outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
    for s in range(4):
        envs_of[s] = block(step(s, envs_of[s][0], outs[s]))[:2]
  serial, par = [], []
  for rnd in range(20):
    outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
    # serial dispatch
    t0 = time.perf_counter(); rs = []; ends = []
    for s in range(4):
        rs.append(step(s, envs_of[s][0], outs[s])); ends.append(time.perf_counter() - t0)
    block(rs); serial.append(ends)
    for s in range(4): envs_of[s] = rs[s][:2]
    outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
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
