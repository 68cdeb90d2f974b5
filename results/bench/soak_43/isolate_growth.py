"""Issue 43: which part of train_async's evaluation / checkpoint grows RSS? Each part alone, in one thread.

    .venv/bin/python results/bench/soak_43/isolate_growth.py {eval,eval_log,ckpt,ckpt_env,idle} N EVERY OUT_JSON

Builds the soak's config (`rl-debug`, MLP PPO on the MJX tabletop, one CPU device) and repeats one part
N times, recording RSS every EVERY repetitions (the first 10% are warm-up; slope = least squares after).
- eval:      `setup.evaluate(params, i)` (the jitted closed loop + device_get + per-task dict)
- eval_log:  `rl_setup.log_eval` (evaluate + TensorBoard scalars + log line), as the loop calls it
- ckpt:      `Checkpointer.save(step, {'train': state})` every step (max_to_keep as configured), then wait
- ckpt_env:  the same with the env state packed beside it (as the async loop saves)
- idle:      nothing (the baseline: RSS of a process that only sleeps between samples)
"""
import dataclasses
import json
import logging
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
import jax

from research.bench.soak import process_counts, rss_mb
from vlajax.config.schema import get_config
from vlajax.policies import run_files
from vlajax.rl import learner
from vlajax.rl import setup as rl_setup
from vlajax.training.logging import MetricsLogger
from vlajax.training.train_state import TrainState

part, n, every, out_json = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
logging.basicConfig(level=logging.WARNING)
out = f"/tmp/isolate_{part}"
shutil.rmtree(out, ignore_errors=True)
base = get_config("rl-debug")
cfg = base.replace(output_dir=out, checkpoint=dataclasses.replace(base.checkpoint, every_steps=1),
                   logging=dataclasses.replace(base.logging, tensorboard=True, progress="off"))
setup = rl_setup.build(cfg, None)
tx = learner.make_optimizer(cfg.rl)
state = TrainState.create(setup.init_params(jax.random.key(0)), tx, jax.random.key(1))
env_state = jax.jit(lambda: rl_setup.initial_env_state(cfg, setup.env))()
logger = MetricsLogger(os.path.join(out, "tb")) if part == "eval_log" else None
ckdir, ckpt = run_files.run_checkpointer(cfg) if part.startswith("ckpt") else (None, None)

def one(i):
    if part == "eval":
        setup.evaluate(state.params, i)
    elif part == "eval_log":
        rl_setup.log_eval(setup, logger, state.params, i, float(i), step_name="update")
    elif part == "ckpt":
        ckpt.save(i, {"train": state}, force=True); ckpt.wait()
    elif part == "ckpt_env":
        ckpt.save(i, {"train": state, "env": rl_setup.env_leaves(env_state)}, force=True,
                                                                 extra={"counters": {"updates": i},
                                                                                     "env_steps": float(i)}); ckpt.wait()
    elif part == "idle":
        time.sleep(0.05)

samples = []
t0 = time.perf_counter()
for i in range(1, n + 1):
    one(i)
    if i % every == 0:
        samples.append({"i": i, "s": round(time.perf_counter() - t0, 1), "rss_mib": round(rss_mb(), 1),
                                                                                                 **process_counts()})
        print(json.dumps(samples[-1]), flush=True)
warm = [s for s in samples if s["i"] > n // 10]
x, y = np.array([s["i"] for s in warm], float), np.array([s["rss_mib"] for s in warm])
b = np.polyfit(x, y, 1)[0]
res = {"part": part, "n": n, "every": every, "kib_per_rep": round(b * 1024, 2),
                                                                  "load": open("/proc/loadavg").read().split()[:3],
       "jax": jax.__version__, "samples": samples}
print(json.dumps({k: v for k, v in res.items() if k != "samples"}), flush=True)
json.dump(res, open(out_json, "w"), indent=1)
