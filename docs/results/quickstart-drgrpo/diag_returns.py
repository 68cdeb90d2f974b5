"""Diagnostic: one GRPO collect from a quickstart SFT start; per-group returns/success by task."""
import dataclasses, sys, json
import numpy as np, jax, jax.numpy as jnp
from vlajax.config import get_config
from vlajax import sharding
from vlajax.rl import setup as S, rollout as ro
seed, start = int(sys.argv[1]), sys.argv[2]
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 2
cfg = get_config("rl-grpo-tokens")
cfg = cfg.replace(seed=seed, rl=dataclasses.replace(cfg.rl, init_from=start))
mesh = sharding.make_mesh(cfg.mesh)
setup = S.build(cfg, mesh)
params = setup.init_params(jax.random.key(seed))
col = jax.jit(lambda p, k: S.collect(cfg, setup, p, None, k, jnp.int32(0)))
names = None
for it in range(iters):
    kc, _ = S.iteration_keys(cfg.seed, it)
    with sharding.use_mesh(mesh, cfg.mesh.logical_rules):
        _, batch, roll = col(params, kc)
    T = setup.episode_decisions; B = cfg.env.num_envs; g = cfg.rl.group_size
    adv = np.asarray(batch["advantages"]).reshape(B, T)[:, 0]
    ret = np.asarray(batch["returns"]).reshape(B, T)[:, 0]
    task = np.asarray(batch["task_id"]).reshape(B, T)[:, 0]
    mask = np.asarray(batch["mask"]).reshape(B, T).any(1)
    print(f"iter {it} success {float(roll['success']):.3f}")
    for gi in range(B // g):
        sl = slice(gi * g, (gi + 1) * g)
        print(f"  task {task[sl][0]} returns {np.round(ret[sl],3)} std {ret[sl].std(ddof=1):.4f} adv {np.round(adv[sl],2)} kept {mask[sl].all()}")
