"""Diagnostic: greedy vs sampled closed-loop success per goal task, for an SFT or RL checkpoint.

    .venv/bin/python results/runs/quickstart-drgrpo/diag_sampled_eval.py SEED SFT_CHECKPOINTS [RL_CHECKPOINTS ...]

SFT_CHECKPOINTS (`<sft run>/checkpoints`) is loaded through `--rl.init-from` (its newest step) and
evaluated; each RL_CHECKPOINTS (`<rl run>/checkpoints`, started from it) is evaluated with its newest
step's params (`run_files.load_policy`) in the same setup. The env is the RL phase's
(rl-grpo-tokens: 32 envs, chunks of 8 with 4 executed, 200-step episodes, progress reward); per task, 32 episodes from
fixed keys (`fold_in(key(1000 + SEED), task)`), the same for every checkpoint: once with the greedy policy
(argmax tokens, what the quickstart's evaluation does) and once sampled at T = 1 (what RL trains).
"""

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import get_config
from vlajax.policies import run_files
from vlajax.rl import rollout as ro
from vlajax.rl import setup as rl_setup
from vlajax.training import sharding


def _evaluator(setup, greedy: bool):
    """jit(params, key, task_id [B]) -> ro.evaluate's dict, with the greedy or the sampled actor."""
    actor = setup.actor
    if not greedy:
        actor = dataclasses.replace(actor, sample=functools.partial(_sampled, actor.sample))
    return jax.jit(functools.partial(_run, actor, setup.env, setup.episode_decisions))


def _sampled(sample, params, obs, task_id, rng, deterministic=False):
    del deterministic  # evaluate asks for the deterministic policy; draw at T = 1 instead
    return sample(params, obs, task_id, rng, deterministic=False)


def _run(actor, env, decisions, params, key, task_id):
    return ro.evaluate(actor, env, params, key, task_id, decisions)


def main(seed: int, sft: str, rl_runs: list[str]) -> None:
    cfg = get_config("rl-grpo-tokens")
    cfg = cfg.replace(seed=seed, rl=dataclasses.replace(cfg.rl, init_from=sft))
    mesh = sharding.make_mesh(cfg.mesh)
    setup = rl_setup.build(cfg, mesh)
    for start in [sft, *rl_runs]:
        if start == sft:
            params = setup.init_params(jax.random.key(seed))
        else:
            params = jax.tree.map(jnp.asarray, run_files.load_policy(start, cfg)[2])
        rows = []
        for mode in ("greedy", "sampled"):
            run = _evaluator(setup, greedy=mode == "greedy")
            succ = []
            for task in (8, 9, 10, 11):
                tid = jnp.full((cfg.env.num_envs,), task, jnp.int32)
                with sharding.use_mesh(mesh, cfg.mesh.logical_rules):
                    out = run(params, jax.random.fold_in(jax.random.key(1000 + seed), task), tid)
                succ.append(float(np.mean(np.asarray(out["success"]))))
            rows.append((mode, succ))
        print(start)
        for mode, succ in rows:
            print(f"  {mode:8s} put_in_square {succ[0]:.3f} push_to_square {succ[1]:.3f} stack {succ[2]:.3f} "
                  f"press_button {succ[3]:.3f} mean {np.mean(succ):.3f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
