"""Diagnostic: the first GRPO collects from a quickstart SFT start, one line per group.

    .venv/bin/python results/runs/quickstart-drgrpo/diag_returns.py SEED SFT_CHECKPOINTS [ITERATIONS]

Builds `rl-grpo-tokens` with `--seed SEED --rl.init-from SFT_CHECKPOINTS` (the quickstart's RL
phase), runs the sync loop's jitted `collect` for iterations 0.. with the SFT params and prints
each group's task id, episode returns [group_size], their std and the GRPO advantages.
"""

import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import get_config
from vlajax.rl import setup as rl_setup
from vlajax.training import sharding


def main(seed: int, start: str, iterations: int) -> None:
    cfg = get_config("rl-grpo-tokens")
    cfg = cfg.replace(seed=seed, rl=dataclasses.replace(cfg.rl, init_from=start))
    mesh = sharding.make_mesh(cfg.mesh)
    setup = rl_setup.build(cfg, mesh)
    params = setup.init_params(jax.random.key(seed))
    collect = jax.jit(lambda p, k: rl_setup.collect(cfg, setup, p, None, k, jnp.int32(0)))
    t, b, g = setup.episode_decisions, cfg.env.num_envs, cfg.rl.group_size
    for it in range(iterations):
        key, _ = rl_setup.iteration_keys(cfg.seed, it)
        with sharding.use_mesh(mesh, cfg.mesh.logical_rules):
            _, batch, roll = collect(params, key)
        adv, ret, task = (np.asarray(batch[k]).reshape(b, t)[:, 0] for k in ("advantages", "returns", "task_id"))
        kept = np.asarray(batch["mask"]).reshape(b, t).any(1)
        print(f"iter {it} success {float(roll['success']):.3f}")
        for i in range(b // g):
            s = slice(i * g, (i + 1) * g)
            print(f"  task {task[s][0]} returns {np.round(ret[s], 3)} std {ret[s].std(ddof=1):.4f} "
                  f"adv {np.round(adv[s], 2)} kept {kept[s].all()}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2)
