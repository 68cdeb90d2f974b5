# Issue 44.5 tenth, evidence: a chain of 8 decisions dispatched without blocking -- how far Python runs ahead.
# Usage: JAX_PLATFORMS=cpu .venv/bin/python docs/bench/plan_44/dispatch_probe/chain.py
exec(open(__file__.replace("chain.py", "dispatch.py")).read().split("block = jax.block_until_ready")[0])
block = jax.block_until_ready
for s in range(4):
    envs_of[s] = reset(s)
outs = block(infer(state.params, [envs_of[s][1] for s in range(4)]))
for s in range(4):
    block(step(s, envs_of[s][0], outs[s]))
for seg in range(3):
    T0 = time.perf_counter(); marks = []
    for dec in range(8):
        outs = infer(state.params, [envs_of[s][1] for s in range(4)])
        for s in range(4):
            r = step(s, envs_of[s][0], outs[s]); envs_of[s] = r[:2]
        marks.append(round((time.perf_counter()-T0)*1e3, 1))
    block([envs_of[s] for s in range(4)])
    print("seg", seg, "dispatch marks per decision (ms)", marks, "all computed", round((time.perf_counter()-T0)*1e3, 1))
