"""Trace 20 MJX steps x 16 envs of the rollout env with MJX functions in named scopes; print each scope's share
(2026-11-25)."""

import collections
import glob
import gzip
import json
import re
import shutil

import jax
import jax.numpy as jnp
from mujoco import mjx
from mujoco.mjx._src import collision_driver, constraint, passive, smooth, solver


def scoped(mod, name):
    f = getattr(mod, name)

    def g(*a, **k):
        with jax.named_scope("S_" + name):
            return f(*a, **k)

    setattr(mod, name, g)


for mod, names in [
    (smooth, ["kinematics", "com_pos", "camlight", "crb", "factor_m", "com_vel", "rne", "transmission"]),
    (collision_driver, ["collision"]),
    (constraint, ["make_constraint"]),
    (passive, ["passive"]),
]:
    for n in names:
        scoped(mod, n)
for n in ["_linesearch", "_update_constraint", "_update_gradient"]:
    scoped(solver, n)
from vlajax.config.schema import EnvConfig
from vlajax.rl import rollout as ro

B = 16
env = ro.make_env(EnvConfig(suite="goal", obs_mode="pixels", num_envs=B, image_size=32, episode_length=200), 4)
state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, B)))(jax.random.key(0))
acts = jnp.tile(jnp.array([0.0, 0.5, -1.0, 0.0]), (B, 4, 1))
st = jax.jit(lambda s: env.step(s, acts, observe=False))
for _ in range(5):
    state = st(state)
m = env.unwrapped.mjx_model
f = jax.jit(jax.vmap(lambda d: jax.lax.fori_loop(0, 20, lambda _, x: mjx.step(m, x), d)))
c = f.lower(state.data).compile()
meta = {}
for line in c.as_text().splitlines():
    mm = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name=\"([^\"]*)\"", line)
    if mm:
        meta[mm.group(1)] = mm.group(2)
d = state.data
jax.block_until_ready(c(d))
out = "/tmp/s11/prof/trp"
shutil.rmtree(out, ignore_errors=True)
N = 5
with jax.profiler.trace(out):
    for i in range(N):
        jax.block_until_ready(c(d))
t = json.load(gzip.open(glob.glob(f"{out}/plugins/profile/*/*.trace.json.gz")[0]))
agg = collections.Counter()
unk = collections.Counter()
for e in t["traceEvents"]:
    if e.get("ph") != "X":
        continue
    n = e["name"]
    if n.startswith(("ThunkExecutor", "$", "Pjit", "while", "conditional", "call", "Common")):
        continue
    op = meta.get(n)
    if op is None:
        unk[n] += e["dur"]
        continue
    s = re.findall(r"S_(\w+)", op)
    key = s[-1] if s else ("solve-other" if "solve" in op else ("implicit" if "implicit" in op else "other"))
    agg[key] += e["dur"]
tot = sum(agg.values()) + sum(unk.values())
print(f"per 20-step chunk of 16 envs: leaf thunk total {tot / 1e3 / N:.2f} ms")
for k, v in agg.most_common():
    print(f"{k:20s} {v / 1e3 / N:7.2f} ms {100 * v / tot:5.1f}%")
print("nometa", sum(unk.values()) / 1e3 / N, unk.most_common(5))
