"""Issue 44.5, second try, criterion 3 (docs/planner.md): the planner's prediction with `--jitter`,
written before the measurement, of requests per inference call and x sync on the mjx regime of the
VLA workload at `pipeline.max_wait_ms` 5 and 10 (never measured before), from the profile of the
6.7% validation. Usage (checkout root):
    .venv/bin/python results/bench/maxwait_vla/predict_jitter.py > results/bench/maxwait_vla/predicted_jitter.json
"""

import dataclasses
import json
import subprocess

from research.planner.profile import load
from research.planner.validate import row_pipeline, simulate_mean

meta = json.load(open("results/bench/async_production_vla.json"))["meta"]
costs = load("results/bench/plan_profile_vla", "jax", "median", "probed")
out = {"model": "plan validate --jitter (Pipeline.jitter=True), 5 seeds, profile results/bench/plan_profile_vla",
       "git_head": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()}
for wait in (5.0, 10.0):
    preds = {}
    for mode in ("sync", "rollout_async", "train_async+rollout_async"):
        row = {"placement": "colocated", "mode": mode, "updates_timed": 20}
        pipe = dataclasses.replace(row_pipeline(dict(meta, max_wait_ms=wait), row), jitter=True)
        preds[mode] = simulate_mean(pipe, costs, 5)
    sync = preds["sync"]["trained_env_steps_per_s"]
    out[f"max_wait_ms={wait:g}"] = {
        m: {"env_steps_per_s": round(v["trained_env_steps_per_s"], 1),
            "x_sync": round(v["trained_env_steps_per_s"] / sync, 3),
            "requests_per_call": round(v["inference_batch_mean"], 2) if m != "sync" else None}
        for m, v in preds.items()}
print(json.dumps(out, indent=1))
