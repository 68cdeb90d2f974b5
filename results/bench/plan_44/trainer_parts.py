"""Where the async trainer's busy time per update goes (descriptive, no criterion; docs/planner.md "Issue 44.5,
sixth"): the bench's run (`bench async`'s workload: rl-debug, 16 envs, 4 slots, horizon 8, width 256, 20 updates)
of one regime and mode, with the runner's sample_step, train_step, publish, on_update and the collect path's
snapshot / consumed_metrics wrapped with timers; per part the median ms per call without the first. From the
repository root:

    JAX_PLATFORMS=cpu PYTHONPATH=. .venv/bin/python results/bench/plan_44/trainer_parts.py cpu-sim train_async 2
    (BLOCK=1: also block on train_step's outputs, to see compute left in flight)
"""

import collections
import dataclasses
import json
import os
import sys
import tempfile
import time

import jax
import numpy as np

import vlajax.config.presets  # noqa: F401  (registers the presets)
from vlajax.bench import async_loops
from vlajax.config.schema import get_config
from vlajax.pipeline import runner
from vlajax.rl import async_loop
from vlajax.rl.setup import build
from vlajax.training import checkpoint
from vlajax.training import logging as vlog

T: dict[str, list[float]] = collections.defaultdict(list)
BLOCK = os.environ.get("BLOCK") == "1"


def timed(name, fn):
    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            T[name].append(time.perf_counter() - t0)
    return wrapped


def blocking(fn):
    def wrapped(*a, **k):
        out = fn(*a, **k)
        t0 = time.perf_counter()
        jax.block_until_ready(out)
        T["train_step_block_extra"].append(time.perf_counter() - t0)
        return out
    return wrapped


def patch() -> None:
    init = runner.AsyncRunner.__init__

    def timed_init(self, cfg, **kw):
        kw["train_step"] = timed("train_step", blocking(kw["train_step"]) if BLOCK else kw["train_step"])
        if kw.get("on_update") is not None:
            kw["on_update"] = timed("on_update", kw["on_update"])
        kw["sample_step"] = timed("sample_step", kw["sample_step"])
        init(self, cfg, **kw)
        self.weights.publish = timed("publish", self.weights.publish)

    runner.AsyncRunner.__init__ = timed_init
    runner.AsyncRunner._update = timed("_update", runner.AsyncRunner._update)
    async_loop._Collect.snapshot = timed("snapshot", async_loop._Collect.snapshot)
    async_loop._Collect.consumed_metrics = timed("consumed_metrics", async_loop._Collect.consumed_metrics)
    vlog.MetricsLogger.scalars = timed("scalars", vlog.MetricsLogger.scalars)
    checkpoint.Checkpointer.save = timed("ckpt_save", checkpoint.Checkpointer.save)


def main(regime: str, mode: str, repeats: int) -> None:
    patch()
    cfg = async_loops.run_config(get_config("rl-debug"), regime, mode, envs=16, slots=4, horizon=8, width=256,
                                 updates=20, max_wait_ms=2.0, out_dir=tempfile.mkdtemp(prefix="trainer_parts_"))
    setup = build(cfg)
    for rep in range(repeats):
        T.clear()
        run_cfg = dataclasses.replace(cfg, output_dir=tempfile.mkdtemp(prefix="trainer_parts_"))
        row = async_loops.run_one(run_cfg, setup, regime, mode)
        parts = {k: (len(v), round(1e3 * float(np.median(v[1:])), 2)) for k, v in T.items()}
        print(json.dumps({"rep": rep, "env_steps_per_s": round(row["env_steps_per_s"]),
                          "trainer_idle": row["trainer_idle_ratio"], "window_s": round(row["window_s"], 3),
                          "updates": row["updates_timed"], "ms_median_without_first": parts}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2)
