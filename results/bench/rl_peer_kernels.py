"""Kernels per env step in the two collection programs of the brax peer comparison (issue 44.6).

    JAX_PLATFORMS=cpu python results/bench/rl_peer_kernels.py

Compiles (for `rl-mlp-state` at the bench's sizes) vlajax's jitted collect and brax's rollout, as
`research.bench.rl_peer_profile` builds them, and counts in the compiled HLO the top-level
instructions one decision step executes (each fusion, copy, dot, custom call... counted once;
parameters, constants, tuples, get-tuple-element and bitcasts not counted): the step's own
kernels, the physics substep loop (`n_substeps` x its body; the solver's while loop, whose trip
count is dynamic, once per substep), and any other loop with a dynamic trip count (vlajax's
per-env reset, `rollout.reset_done`: its body per finished env). Prints one line per system.
"""
import re
import sys

import jax.numpy as jnp

FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "opt-barrier"}


def parse(text):
    comps, cur, entry = {}, None, None
    for line in text.splitlines():
        s = line.strip()
        if s.endswith("{") and " = " not in s.split("(")[0]:
            m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)", s)
            cur = m.group(2)
            comps[cur] = []
            if m.group(1):
                entry = cur
            continue
        if s == "}":
            cur = None
            continue
        if cur is None or " = " not in s:
            continue
        rhs = s.split(" = ", 1)[1]
        # skip the shape
        if rhs.startswith("("):
            depth = 0
            for i, ch in enumerate(rhs):  # noqa: B007 (i is read after the loop)
                depth += ch == "("
                depth -= ch == ")"
                if depth == 0:
                    break
            rest = rhs[i + 1:].lstrip()
        else:
            rest = rhs.split(" ", 1)[1] if " " in rhs else rhs
        op = re.match(r"([\w\-]+)", rest).group(1)
        attrs = {}
        for k in ("calls", "body", "condition", "to_apply", "true_computation", "false_computation"):
            mm = re.search(rf"\b{k}=%?([\w.\-]+)", rest)
            if mm:
                attrs[k] = mm.group(1)
        mm = re.search(r"branch_computations=\{([^}]*)\}", rest)
        if mm:
            attrs["branches"] = [x.strip().lstrip("%") for x in mm.group(1).split(",")]
        mm = re.search(r'"known_trip_count":\{"n":"(\d+)"', rest)
        attrs["trip"] = int(mm.group(1)) if mm else None
        comps[cur].append((op, attrs))
    return comps, entry


def executed(comps, name, dyn, memo=None):
    """Instructions executed by one run of computation `name` (loops with unknown trip count: once,
    their per-iteration count appended to `dyn`)."""
    total = 0
    for op, a in comps[name]:
        if op in FREE:
            continue
        if op == "while":
            per = executed(comps, a["body"], dyn) + executed(comps, a["condition"], dyn)
            if a["trip"] is None:
                dyn.append((a["body"], per))
                total += per + 1
            else:
                total += per * a["trip"] + 1
        elif op == "conditional":
            br = a.get("branches") or [a.get("true_computation"), a.get("false_computation")]
            total += 1 + max(executed(comps, b, dyn) for b in br if b)
        elif op in ("call",) and "to_apply" in a:
            total += executed(comps, a["to_apply"], dyn)
        elif op == "call" and "calls" in a:
            total += executed(comps, a["calls"], dyn)
        else:
            total += 1  # fusion, custom-call, dot, ... : one kernel
    return total


def loops(comps, name, out, depth=0):
    for op, a in comps[name]:
        if op == "while":
            d = []
            per = executed(comps, a["body"], d) + executed(comps, a["condition"], d)
            out.append({"depth": depth, "trip": a["trip"], "per_iteration": per, "body": a["body"]})
            loops(comps, a["body"], out, depth + 1)
        elif op == "conditional":
            for b in a.get("branches") or []:
                loops(comps, b, out, depth + 1)
        elif op == "call":
            c = a.get("to_apply") or a.get("calls")
            if c:
                loops(comps, c, out, depth)
    return out


def summary(text):
    comps, entry = parse(text)
    dyn = []
    tot = executed(comps, entry, dyn)
    ops = {}
    for c in comps.values():
        for op, _ in c:
            ops[op] = ops.get(op, 0) + 1
    return {"executed_per_call": tot, "loops": loops(comps, entry, []), "dynamic_loops": dyn,
            "fusions_in_module": ops.get("fusion", 0), "instructions_in_module": sum(ops.values())}


def step_kernels(text: str, trip: int) -> dict:
    """Counts for the body of the loop with `trip` iterations (the decision step)."""
    comps, entry = parse(text)
    body = [x for x in loops(comps, entry, []) if x["trip"] == trip and x["per_iteration"] > 100][0]["body"]
    own = physics = dynamic = 0
    for op, a in comps[body]:
        if op in FREE:
            continue
        if op == "while":
            per = executed(comps, a["body"], []) + executed(comps, a["condition"], [])
            if a["trip"]:
                physics += per * a["trip"] + 1
            else:
                dynamic += per
        elif op == "call":
            own += executed(comps, a.get("to_apply") or a.get("calls"), [])
        else:
            own += 1
    return {"own_kernels": own, "physics_substeps": physics, "per_dynamic_loop_iteration": dynamic}


def main() -> int:
    from research.bench import rl_peer_profile as rp
    from research.bench.rl_peer import _config
    from vlajax.rl.setup import iteration_keys
    from vlajax.shared import compile_cache
    from vlajax.training import sharding

    cfg, envs, unroll = _config(2, False)
    compile_cache.enable(cfg.compilation_cache_dir)
    v = rp.VlajaxIteration(cfg)
    with sharding.use_mesh(v.mesh, cfg.mesh.logical_rules):
        kc, _ = iteration_keys(cfg.seed, 0)
        text_v = v.collect_fn.lower(v.state.params, v.env_state, kc, jnp.int32(0)).compile().as_text()
    b = rp.BraxRollout(cfg, envs, unroll)
    text_b = b.fn.lower(b.state, b.key).compile().as_text()
    print("vlajax collect, per decision step:", step_kernels(text_v, cfg.rl.rollout_length))
    print("brax rollout, per env step:", step_kernels(text_b, unroll))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ".")
    sys.exit(main())
