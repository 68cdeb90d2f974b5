"""Where the async trainer's busy time per update goes (descriptive, no criterion; docs/planner.md "Issue 44.5,
sixth"): the bench's run (`bench async`'s workload: rl-debug, 16 envs, 4 slots, horizon 8, width 256, 20 updates)
of one regime and mode, with the runner's sample_step, train_step, publish, on_update and the collect path's
snapshot / consumed_metrics wrapped with timers; per part the median ms per call without the first. From the
repository root:

    JAX_PLATFORMS=cpu PYTHONPATH=. .venv/bin/python docs/bench/plan_44/trainer_parts.py cpu-sim train_async 2
    (BLOCK=1: also block on train_step's outputs, to see compute left in flight)
"""
import dataclasses, json, sys, time, collections
import numpy as np
import vlajax.presets  # noqa
from vlajax.config import get_config
from vlajax.rl.setup import build
from vlajax.bench import async_loops as al
from vlajax.pipeline import runner as rmod

T = collections.defaultdict(list)
import os
BLOCK = os.environ.get('BLOCK') == '1'
orig_init = rmod.AsyncRunner.__init__

def timed(name, fn):
    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            T[name].append(time.perf_counter() - t0)
    return w

def init(self, cfg, **kw):
    kw["train_step"] = timed("train_step", block_train_step(kw["train_step"]) if BLOCK else kw["train_step"])
    if kw.get("on_update") is not None:
        kw["on_update"] = timed("on_update", kw["on_update"])
    kw["sample_step"] = timed("sample_step", kw["sample_step"])
    orig_init(self, cfg, **kw)
    self.weights.publish = timed("publish", self.weights.publish)

rmod.AsyncRunner.__init__ = init
from vlajax.rl import async_loop as alp
from vlajax import checkpoint as ck, logging as vlog
alp._Collect.snapshot = timed("snapshot", alp._Collect.snapshot)
alp._Collect.consumed_metrics = timed("consumed_metrics", alp._Collect.consumed_metrics)
vlog.MetricsLogger.scalars = timed("scalars", vlog.MetricsLogger.scalars)
CK = [c for c in vars(ck).values() if isinstance(c, type) and hasattr(c, "save") and c.__module__ == ck.__name__][0]
CK.save = timed("ckpt_save", CK.save)
import jax as _jax
_ts = None
def block_train_step(fn):
    def w(*a, **k):
        out = fn(*a, **k)
        t0 = time.perf_counter(); _jax.block_until_ready(out); T["train_step_block_extra"].append(time.perf_counter() - t0)
        return out
    return w
orig_update = rmod.AsyncRunner._update
rmod.AsyncRunner._update = timed("_update", orig_update)

regime, mode = sys.argv[1], sys.argv[2]

base = get_config("rl-debug")
cfg = al.run_config(base, regime, mode, envs=16, slots=4, horizon=8, width=256, updates=20, max_wait_ms=2.0,
                    out_dir=f"/tmp/diag/run_{regime}_{mode}".replace("+", "p"))
setup = build(cfg)
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 2):
    T.clear()
    import tempfile
    cfg = dataclasses.replace(cfg, output_dir=tempfile.mkdtemp(prefix='diag_'))
    row = al.run_one(cfg, setup, regime, mode)
    s = {k: (len(v), round(1e3 * float(np.median(v[1:])), 2)) for k, v in T.items()}
    print(json.dumps({"rep": rep, "env_steps_per_s": round(row["env_steps_per_s"]), "trainer_idle": row["trainer_idle_ratio"],
                      "window_s": round(row["window_s"], 3), "updates": row["updates_timed"],
                      "ms_median_without_first": s}), flush=True)
