"""The cost measurement behind results/async/preregistration_45c.md (not a run of either workload): the sync arm of
eq45-ppo-flow with 4 iterations and 2 evaluation episodes per task, on each simulator given, back to back.

    nice -n 10 .venv/bin/python results/async/preregistration_45c_cost.py c jax   # output: preregistration_45c_cost.txt

Prints the loop's progress lines (steady-state `sps` = env steps/s of training) and one RESULT line per simulator:
the whole run's seconds, its evaluations (update, seconds into the run, success) and /proc/loadavg after it.
"""

import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments import async_protocol as ap  # noqa: E402
from experiments.outputs import loadavg  # noqa: E402
from vlajax.shared import compile_cache  # noqa: E402

compile_cache.enable()
for phys in sys.argv[1:]:
    p = dataclasses.replace(ap.get_protocol("eq45-ppo-flow"), physics_impl=phys, iterations=4, eval_every=4,
                            eval_episodes=2)
    t = time.time()
    rec = ap.run_one(p, "sync", 0, f"/tmp/ppot_work_{phys}", f"/tmp/ppot_runs_{phys}")
    curve = [(c.get("update"), c.get("wall_s"), c["success"]) for c in rec["curve"]]
    print("RESULT", phys, json.dumps({"seconds": round(time.time() - t, 1), "curve": curve}), loadavg(), flush=True)
