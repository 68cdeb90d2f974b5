# Issue 44.5 after the tenth, descriptive: how much of a slot step's dispatch holds Python's GIL. A spinner thread
# counts in pure Python while the main thread dispatches (and then waits for) slot steps; its count rate during the
# dispatches, against its rate while the main thread sleeps, is the share of the dispatch the GIL (and a core) was
# free. Usage: JAX_PLATFORMS=cpu .venv/bin/python results/bench/plan_44/dispatch_probe/gil.py mjx|cpu-sim
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
sys.setswitchinterval(1e-4)
count, stop = [0], [False]
def spin():
    while not stop[0]:
        count[0] += 1
with cm:
    for _ in range(3):  # compile
        outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
        for s in range(4):
            envs_of[s] = block(step(s, envs_of[s][0], outs[s]))[:2]
    t = threading.Thread(target=spin); t.start()
    idle, disp, comp = [], [], []
    for rnd in range(30):
        c0, t0 = count[0], time.perf_counter(); time.sleep(0.01); idle.append((count[0] - c0) / (time.perf_counter() - t0))
        outs = block(infer(params, [envs_of[s][1] for s in range(4)]))
        for s in range(4):
            c0, t0 = count[0], time.perf_counter()
            r = step(s, envs_of[s][0], outs[s])
            c1, t1 = count[0], time.perf_counter()
            block(r)
            c2, t2 = count[0], time.perf_counter()
            envs_of[s] = r[:2]
            disp.append(((c1 - c0) / (t1 - t0), t1 - t0)); comp.append(((c2 - c1) / max(t2 - t1, 1e-9), t2 - t1))
    stop[0] = True; t.join()
base = np.median(idle)
d, c = np.array(disp), np.array(comp)
print(f"{regime}: spinner rate while the main thread sleeps {base:.3g}/s; during a dispatch (median {1e3*np.median(d[:,1]):.2f} ms) "
      f"{np.median(d[:,0])/base:.2f} of it; while waiting for the rest (median {1e3*np.median(c[:,1]):.2f} ms) {np.median(c[:,0])/base:.2f}")
