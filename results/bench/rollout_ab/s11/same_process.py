"""Same-process A/B of the rollout's code changes (less noise than two processes): the bench's flow
workload, three arms timed interleaved in one process -- previous `vlajax/rl/rollout.py` (c31e687^,
loaded from the /tmp/s11/prev worktree) on the MJCF without the palm-button exclude, the current
rollout on that MJCF, and the current rollout on the current MJCF. Usage: python same_process.py [repeats]."""

import importlib.util
import json
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from research.bench import rollout_profile as rp
from vlajax.envs.tabletop import scene
from vlajax.rl import rollout as cur_ro

spec = importlib.util.spec_from_file_location("prev_rollout", "/tmp/s11/prev/vlajax/rl/rollout.py")
prev_ro = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prev_ro)
R, D, B = int(sys.argv[1]) if len(sys.argv) > 1 else 9, 8, 16
full_xml = re.sub(r"<contact>.*?</contact>", "", scene.ASSET.read_text(), flags=re.S)
full = mujoco.MjModel.from_xml_string(full_xml)


def arm(module, exclude: bool):
    env, actor, params, _, h = rp._setup("flow", B)
    if not exclude:  # the MJCF before f86e426 (72 contact slots)
        inner = env.unwrapped
        inner.mj_model, inner.mjx_model = full, mjx.put_model(full, device=jax.local_devices()[0], impl="jax")
    state = jax.jit(lambda k: module.reset(env, module.group_keys(k, B)))(jax.random.key(0))
    offsets = (np.arange(B) * 200 // B) // h * h
    state = state.replace(info={**state.info, "steps": jnp.asarray(offsets, jnp.float32)})

    @jax.jit
    def run(p, s, k):
        s, traj = module.rollout(actor, env, p, s, k, D, 0, True)
        return s, jnp.sum(traj["done"])

    return run, params, state


arms = {"prev rollout, 72 slots": arm(prev_ro, False), "new rollout, 72 slots": arm(cur_ro, False),
        "new rollout, 68 slots": arm(cur_ro, True)}
for name, (run, p, s) in arms.items():
    arms[name] = (run, p, jax.block_until_ready(run(p, s, jax.random.key(1)))[0])
times = {k: [] for k in arms}
load0 = os.getloadavg()[0]
for i in range(R):
    for name, (run, p, s) in arms.items():
        t0 = time.perf_counter()
        s = jax.block_until_ready(run(p, s, jax.random.key(2 + i)))[0]
        times[name].append(time.perf_counter() - t0)
        arms[name] = (run, p, s)
out = {"load_1m_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)], "repeats": R, "decisions_per_call": D,
       "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": times}
base = times["prev rollout, 72 slots"]
for name, t in times.items():
    ratios = [b / x for b, x in zip(base, t)]
    print(f"{name:24s} median {B * D / np.median(t):7.1f} decisions/s  fastest {B * D / min(t):7.1f}  "
          f"x prev per round: median {np.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
print(json.dumps(out))
