"""Count dot operations of sample / act / sample-then-score before and after XLA (CSE of the prefix passes;
2026-11-25)."""

import re

import jax
import jax.numpy as jnp

from research.bench import rollout_profile as rp

env, actor, params, state, h = rp._setup("flow", 16)
tid = state.info["episode"]["task_id"]
key = jax.random.key(3)
b = 16


def sts(p, o, t, k):
    acts, record = actor.sample(p, o, t, k)
    return acts, actor.logp_value(p, {"obs": o, "task_id": t, **record, "action_mask": jnp.ones((b, h), bool)}, k)


for name, fn in [("sample", actor.sample), ("act", actor.act), ("sample_then_score", sts)]:
    lowered = jax.jit(fn).lower(params, state.obs, tid, key)
    pre = lowered.as_text()
    post = lowered.compile().as_text()
    count = lambda txt: (
        len(re.findall(r"dot_general|\bdot\(", txt)),
        len(re.findall(r"VLA\.prefix[^\"]*block_0/mlp/gate_up", txt)),
    )
    print(
        f"{name:18s} before XLA: dots {count(pre)[0]:4d} (prefix block_0 gate_up refs {count(pre)[1]});  after: "
        f"dot-like ops {len(re.findall(r' dot\(| ynn_fusion| fusion\(.*kind=kOutput', post)):4d}, prefix block_0 "
        f"gate_up refs {count(post)[1]}"
    )
print("--- prefix dots after XLA (instructions whose op_name has VLA.prefix and that are dots/dot fusions)")
for name, fn in [("sample", actor.sample), ("act", actor.act), ("sample_then_score", sts)]:
    lowered = jax.jit(fn).lower(params, state.obs, tid, key)
    pre = lowered.as_text(dialect="hlo")
    post = lowered.compile().as_text()

    def prefix_dots(txt):
        n = 0
        for line in txt.splitlines():
            if (
                "dot(" in line or "ynn_fusion" in line.split("=")[0] or " dot_general" in line
            ) and "VLA.prefix" in line:
                n += 1
        return n

    print(f"{name:18s} prefix dots before {prefix_dots(pre):4d} after {prefix_dots(post):4d}")
