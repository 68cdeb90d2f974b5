"""`python -m vlajax.train rl --preset NAME [--rl.init-from CKPT]`: the synchronous RL loop.

collect -> update -> repeat, colocated: one jitted `collect` (the `lax.scan` rollout of
`vlajax.rl.rollout` with the policy, then advantages and the flat learner batch) and one
jitted `learner.update` per iteration. The run skeleton (`vlajax.training.run.Run`) owns the
start-up (distributed, compile cache, mesh), the train state on its shards, TensorBoard scalars,
progress, async Orbax checkpoints, exact resume and the stop regions.

Policies (`vlajax.rl.setup.build`):
- `env.obs_mode='state'`: the MLP Gaussian chunk policy (`vlajax.rl.mlp_policy`), hidden
  widths `(model.width,) * model.depth` for actor and critic, chunk `model.action_horizon`.
- `env.obs_mode='pixels'`: the VLA through `vlajax.policies.bridge.Bridge`; each decision executes the
  first `rl.chunk_steps` actions of the predicted chunk (0 = all; evaluation does the same). With `rl.init_from` (an SFT
  checkpoint directory, `<output_dir>/checkpoints` of `vlajax.train sft`) the architecture,
  cameras and normalization come from that run, the weights from its newest step (the EMA when
  kept); `model.flow_sampler`, `model.noise_level` and `model.value_head` come from this config
  (a value head absent from the SFT weights starts fresh).

Algorithms: PPO runs continuing envs (auto-reset, `rl.rollout_length` decisions per env per
iteration, GAE); GRPO resets all envs each iteration, `rl.group_size` per initial state, and
plays one whole episode (`ceil(env.episode_length / H)` decisions). Iteration i uses
`fold_in(key(seed), i)`; the checkpoint holds the train state and (PPO) the env state, so a
resumed run continues identically. A non-finite loss or gradient stops the run before any save: the
newest checkpoint is the last good one.

SIGTERM / Ctrl-C (`vlajax.training.preemption`), wherever they land (docs/reliability.md has the table):
set-up, the first compile, a restore, an evaluation (its iteration's checkpoint is written before
it starts) and an iteration whose predecessor is saved are abandoned at once (exit 0 after the
checkpoint write in flight); an iteration with unsaved predecessors (`checkpoint.every_steps` > 1)
is finished and saved, then the loop leaves. A second signal exits at once (130).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import TrainConfig
from vlajax.rl import learner
from vlajax.rl.setup import (
    Setup,
    build,
    check_decisions,
    collect,
    env_leaves,
    env_unleaves,
    initial_env_state,
    iteration_keys,
    log_eval,
    make_learner,
    open_policy_checkpoints,
    place_env_state,
)
from vlajax.training import sharding
from vlajax.training.run import Run

log = logging.getLogger(__name__)

__all__ = ["train"]


def train(cfg: TrainConfig, setup: Setup | None = None, *, stop_at: int | None = None) -> dict[str, Any]:
    """Run to `rl.num_iterations` (resuming from the newest checkpoint). -> summary dict.

    `stop_at`: leave after that iteration (with a checkpoint), as if interrupted. The summary's
    `iteration_times` holds `[start, end, env_steps]` per iteration of this run (`time.monotonic`;
    `vlajax.bench.async_loops` times the steady state from them); it and `history` keep the newest
    10,000 iterations (bounded memory on runs of any length). Raises
    `learner.NonFiniteError` (after closing the checkpointer) on a non-finite update.
    """
    total = cfg.rl.num_iterations
    with Run(cfg, "rl", unit="iteration", total=total) as run:
        with run.setting_up():  # nothing new yet: a signal abandons at once
            # ---- Start-up: processes, console, compile cache, mesh; the policy and its envs -------
            mesh = run.start(progress=f"rl {cfg.name}")
            if setup is None:
                with run.phase(f"building {cfg.env.num_envs} envs and the policy"):
                    setup = build(cfg, mesh)
            decisions = check_decisions(cfg, setup, mesh)
            log.info("rl: %s %s, %d envs, %d decisions per iteration, mesh %s", cfg.rl.algo, setup.actor.name,
                     cfg.env.num_envs, decisions, dict(mesh.shape))

            # ---- Train state on its shards; jitted collect and update ----------------------------
            learn = make_learner(run, setup)
            state = learn.state
            n_params = sum(x.size for x in jax.tree.leaves(state.params))
            ref_fn = jax.jit(functools.partial(learner.with_reference, setup.actor.logp_value))
            # the env state not donated: the same program as the async loop's collect (`async_loop._Collect`, which
            # keeps each call's start state for exact resume), so the compile cache serves one from the other
            collect_fn = jax.jit(functools.partial(collect, cfg, setup))
            with sharding.use_mesh(mesh, run.rules), run.phase(f"resetting {cfg.env.num_envs} envs"):
                env_state = place_env_state(jax.jit(functools.partial(initial_env_state, cfg, setup.env))(), mesh)

            # ---- Checkpoints (a policy: config.json, policy.json) and resume ---------------------
            ckpt_dir = open_policy_checkpoints(run, setup, "rl", cfg.env)
            pack = lambda s, e: {"train": s} | ({} if e is None else {"env": env_leaves(e)})  # noqa: E731
            restored, extra = run.restore(pack(state, env_state))
            start, env_steps = 0, 0.0
            if extra is not None:
                state = restored["train"]
                env_state = None if env_state is None else env_unleaves(env_state, restored["env"])
                start, env_steps = run.resumed_at(int(extra["iteration"])), float(extra["env_steps"])
                log.info("rl: resumed from iteration %d", start)

        # ---- Train ---------------------------------------------------------------------------
        logger = run.open_logger()
        history: collections.deque[dict] = collections.deque(maxlen=10_000)
        evals = []
        times: collections.deque[list[float]] = collections.deque(maxlen=10_000)  # monotonic start, end, env steps
        t_start = time.perf_counter()
        run.progress.resume(start)
        steps = run.steps(start, total if stop_at is None else min(stop_at, total))
        with sharding.use_mesh(mesh, run.rules):
            if start == 0 and cfg.rl.eval_every > 0:  # the starting policy: iteration 0 of the curve
                with run.evaluating(0):
                    evals.append(log_eval(setup, logger, state.params, 0, env_steps))
            for it in steps:
                with steps.region(it):  # nothing since the saved state would be lost: a signal abandons it
                    t0, m0 = time.perf_counter(), time.monotonic()
                    k_collect, k_update = iteration_keys(cfg.seed, it)
                    # the first iteration's compiles on the console (each call returns once it is dispatched)
                    phase = run.phase if it == start else lambda _: contextlib.nullcontext()
                    with phase(f"compiling the rollout ({cfg.env.num_envs} envs)"):
                        env_state, batch, roll = collect_fn(state.params, env_state, k_collect, jnp.int32(it))
                    batch = learner.critic_warmup(cfg.rl, it, batch)
                    if learn.ref_params is not None:
                        batch = ref_fn(learn.ref_params, batch, jax.random.fold_in(k_update, learner.REF_STREAM))
                    with phase("compiling the update"):
                        state, metrics = learn.update_fn(k_update, state, batch)
                    host = {k: float(v) for k, v in jax.device_get(metrics | roll).items()}
                learner.check_finite(host, it + 1)  # raises before this iteration is saved
                done = it + 1
                seconds = time.perf_counter() - t0
                env_steps += host["env_steps"]
                times.append([m0, time.monotonic(), host["env_steps"]])
                host |= {"env_steps_per_s": host["env_steps"] / seconds, "iteration_s": seconds,
                         "total_env_steps": env_steps}
                history.append({k: host[k] for k in ("success", "episode_return", "policy_loss", "env_steps_per_s")})
                if done % cfg.logging.every_steps == 0 or done == total:
                    logger.scalars(done, host, prefix="train/")
                    run.progress.update(done, {"success": host["success"], "return": host["episode_return"],
                                               "sps": host["env_steps_per_s"]})
                periodic = cfg.rl.eval_every > 0 and done % cfg.rl.eval_every == 0
                evaluate = periodic or (done == total and cfg.rl.eval_every >= 0)
                extra = {"iteration": done, "env_steps": env_steps, "config": cfg.name}
                if steps.boundary(done, pack(state, env_state), extra, evaluate):
                    with run.evaluating(done):
                        evals.append(log_eval(setup, logger, state.params, done, env_steps))
    return {"status": steps.status, "start_iteration": start, "iterations": total, "params": int(n_params),
            "seconds": round(time.perf_counter() - t_start, 1), "env_steps": env_steps, "history": list(history),
            "evals": evals, "checkpoint_dir": ckpt_dir, "state": state, "iteration_times": list(times)}
