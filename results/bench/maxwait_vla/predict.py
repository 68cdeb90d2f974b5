"""The planner's what-if for the VLA slot modes' dynamic batching, written before the measurement:
predicted env steps/s and x sync on the mjx regime for `pipeline.max_wait_ms` 2 (the grid's) and 20,
from the profile of results/bench/plan_profile_vla (the 6.7% validation). Usage (checkout root):
    .venv/bin/python results/bench/maxwait_vla/predict.py > results/bench/maxwait_vla/predicted.json
"""

import dataclasses
import json

from research.planner.profile import load
from research.planner.validate import row_pipeline, simulate_mean

meta = json.load(open("results/bench/async_production_vla.json"))["meta"]
costs = load("results/bench/plan_profile_vla", "jax", "median", "probed")
out = {}
for wait in (2.0, 20.0):
    preds = {}
    for mode in ("sync", "rollout_async", "train_async+rollout_async", "+streaming"):
        pipe = row_pipeline(dict(meta, max_wait_ms=wait), {"placement": "colocated", "mode": mode, "updates_timed": 20})
        preds[mode] = simulate_mean(pipe, costs, 5)["trained_env_steps_per_s"]
    out[f"max_wait_ms={wait:g}"] = {m: {"env_steps_per_s": round(v, 1), "x_sync": round(v / preds["sync"], 3)}
                                    for m, v in preds.items()}
print(json.dumps(out, indent=1))
