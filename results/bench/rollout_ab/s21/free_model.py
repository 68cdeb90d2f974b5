"""How fast could the rollout get from the model side? Same-process A/B/C of the bench's flow workload
(`python -m vlajax.bench rollout`: 16 goal-suite envs from pixels, both cameras at 32x32, the
`sft-small` model, flow_sde 'last' + expert value, chunks of 8 with 4 executed, staggered episodes,
8 decisions per timed call), three arms timed round-robin in one process:

- `prev`: the previous rollout (`vlajax/rl/rollout.py` of `c31e687^`, read with `git show`), real VLA;
- `new`: today's rollout, real VLA (one forward per decision, finished envs reset alone);
- `free`: today's rollout with a model that costs nothing: actions drawn uniformly in [-1, 1] (a
  fresh VLA's are spread the same way), records, log-probs and values all zeros of the real actor's
  shapes (`jax.eval_shape`, no compute). The same env, physics, rendering, resets and bookkeeping.

`prev / free` bounds what any change to the model side of the rollout (fewer or cheaper forwards)
can give on this workload. Usage (from the checkout's root):
    .venv/bin/python results/bench/rollout_ab/s21/free_model.py [rounds] [--json PATH]
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.bench import rollout as bench
from vlajax.rl import rollout as cur_ro
from vlajax.rl.actors import Actor
from vlajax.shared import compile_cache

B, D, L = 16, 8, 200
args = [a for a in sys.argv[1:] if not a.startswith("--")]
R = int(args[0]) if args else 11
out_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
compile_cache.enable()

src = subprocess.run(["git", "show", "c31e687^:vlajax/rl/rollout.py"], capture_output=True, text=True,
                     check=True).stdout
with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(src)
spec = importlib.util.spec_from_file_location("prev_rollout", f.name)
prev_ro = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prev_ro)


def free(real: Actor) -> Actor:
    """`real`'s interface with no model: uniform actions, zero records / scores / values."""

    def act(params, obs, task_id, rng):
        shapes = jax.eval_shape(real.act, params, obs, task_id, rng)
        zeros = lambda t: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), t)
        actions = jax.random.uniform(rng, shapes[0].shape, shapes[0].dtype, -1.0, 1.0)
        return actions, zeros(shapes[1]), zeros(shapes[2])

    def value(params, obs, task_id):
        return jnp.zeros(task_id.shape[0], jnp.float32)

    return Actor(real.sample, real.logp_value, value, "free", act, real.score, real.logp_mask)


def arm(module, make_actor):
    env, actor, params, _, h = bench.setup("flow", B, L, stagger=True)
    actor = make_actor(actor)
    state = jax.jit(lambda k: module.reset(env, module.group_keys(k, B)))(jax.random.key(0))
    offsets = (np.arange(B) * L // B) // h * h
    state = state.replace(info={**state.info, "steps": jnp.asarray(offsets, jnp.float32)})

    @jax.jit
    def run(p, s, k):
        s, traj = module.rollout(actor, env, p, s, k, D, 0, True)
        return s, jnp.sum(traj["done"])

    return run, params, state


arms = {"prev": arm(prev_ro, lambda a: a), "new": arm(cur_ro, lambda a: a), "free": arm(cur_ro, free)}
compile_s = {}
for name, (run, p, s) in arms.items():
    t0 = time.perf_counter()
    arms[name] = (run, p, jax.block_until_ready(run(p, s, jax.random.key(1)))[0])
    compile_s[name] = round(time.perf_counter() - t0, 1)
times = {k: [] for k in arms}
load = [os.getloadavg()[0]]
for i in range(R):
    for name, (run, p, s) in arms.items():
        t0 = time.perf_counter()
        s = jax.block_until_ready(run(p, s, jax.random.key(2 + i)))[0]
        times[name].append(time.perf_counter() - t0)
        arms[name] = (run, p, s)
    load.append(os.getloadavg()[0])
rows = {}
for name, t in times.items():
    ratios = [b / x for b, x in zip(times["prev"], t)]
    rows[name] = {"decisions_per_s_median": round(B * D / float(np.median(t)), 1),
                  "decisions_per_s_fastest": round(B * D / min(t), 1),
                  "x_prev_per_round_median": round(float(np.median(ratios)), 3),
                  "x_prev_per_round_min_max": [round(min(ratios), 3), round(max(ratios), 3)]}
    print(f"{name:5s} median {rows[name]['decisions_per_s_median']:7.1f} decisions/s  fastest "
          f"{rows[name]['decisions_per_s_fastest']:7.1f}  x prev per round: median {np.median(ratios):.3f} "
          f"[{min(ratios):.3f}, {max(ratios):.3f}]")
result = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": R, "num_envs": B,
          "decisions_per_call": D, "load_1m_per_round": [round(x, 2) for x in load], "compile_s": compile_s,
          "rows": rows, "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
          "real": "everything (MJX physics, rendering, model) on this machine's CPU; `free` has no model"}
if out_path:
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
