"""`python -m vlajax.train rl --preset NAME [--rl.init-from CKPT]`: the synchronous RL loop.

collect -> update -> repeat, colocated: one jitted `collect` (the `lax.scan` rollout of
`vlajax.rl.rollout` with the policy, then advantages and the flat learner batch) and one
jitted `learner.update` per iteration. It follows `vlajax.sft.smoke` piece by piece: distributed
start-up, compile cache, mesh, a train state built on its shards, jitted steps with the state
donated, TensorBoard scalars, progress, async Orbax checkpoints and exact resume.

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
import os
import time
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import TrainConfig
from vlajax.policies import run_files
from vlajax.rl import learner
from vlajax.rl.rollout import rollout_physics
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
    place_env_state,
)
from vlajax.shared import compile_cache
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.logging import PLAIN_LINES, MetricsLogger, Progress
from vlajax.training.preemption import nothing_new, stop_request
from vlajax.training.train_state import TrainState

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
    with stop_request("rl") as stop, contextlib.ExitStack() as shown:
        saved = {"step": None}  # the newest checkpoint written or found (for the stop lines)
        kept = lambda: nothing_new(saved["step"], "iteration")  # noqa: E731
        with stop.abandonable("set-up (before the first iteration)", kept):  # nothing new yet: abandon at once
            # ---- Start-up: processes, compile cache, mesh ----------------------------------------
            distributed.initialize(cfg.distributed)
            stop.collective = jax.process_count() > 1  # then only step boundaries stop (all together)
            # the console from here on: what phase runs, iteration lines, a heartbeat after logging.heartbeat_s
            progress = shown.enter_context(Progress(cfg.rl.num_iterations, f"rl {cfg.name}", cfg.logging.progress,
                                                    cfg.logging.every_steps, heartbeat_s=cfg.logging.heartbeat_s,
                                                    max_lines=PLAIN_LINES))
            compile_cache.enable(cfg.compilation_cache_dir)
            mesh = sharding.make_mesh(cfg.mesh)
            rules = cfg.mesh.logical_rules
            if setup is None:
                with progress.phase(f"building {cfg.env.num_envs} envs and the policy"):
                    setup = build(cfg, mesh)
            decisions = check_decisions(cfg, setup, mesh)
            log.info("rl: %s %s, %d envs, %d decisions per iteration, mesh %s", cfg.rl.algo, setup.actor.name,
                     cfg.env.num_envs, decisions, dict(mesh.shape))

            # ---- Train state on its shards; jitted collect and update ----------------------------
            tx = learner.make_optimizer(cfg.rl)

            def init(rng):
                return TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))

            with progress.phase("building the train state, compiling its init"):
                state, state_shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(cfg.seed))
            n_params = sum(x.size for x in jax.tree.leaves(state.params))
            # rl.kl_coef > 0: the initial policy (init_from or fresh, before any resume), frozen, is the reference
            ref_params = jax.tree.map(jnp.copy, state.params) if cfg.rl.kl_coef > 0 else None
            ref_fn = jax.jit(functools.partial(learner.with_reference, setup.actor.logp_value))
            collect_fn = jax.jit(functools.partial(collect, cfg, setup), donate_argnums=(1,))
            update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                                in_shardings=(None, state_shardings, None), out_shardings=(state_shardings, None),
                                donate_argnums=(1,))
            with sharding.use_mesh(mesh, rules), progress.phase(f"resetting {cfg.env.num_envs} envs"):
                env_state = place_env_state(jax.jit(functools.partial(initial_env_state, cfg, setup.env))(), mesh)

            # ---- Checkpoints and resume ----------------------------------------------------------
            ckpt_dir, ckpt = run_files.run_checkpointer(cfg)
            if setup.bridge is not None and distributed.is_main_process():  # the checkpoints are a policy
                run_files.write_policy(ckpt_dir, cfg.replace(model=setup.bridge.model), setup.bridge, "rl",
                                       rollout_physics=rollout_physics(cfg.env))
            pack = lambda s, e: {"train": s} | ({} if e is None else {"env": env_leaves(e)})
            start, env_steps = 0, 0.0
            if cfg.checkpoint.resume and ckpt.latest_step() is not None:
                with progress.phase("restoring the newest checkpoint"):
                    restored, extra = ckpt.restore(checkpoint.abstract_state(pack(state, env_state)))
                state = restored["train"]
                env_state = None if env_state is None else env_unleaves(env_state, restored["env"])
                start, env_steps = int(extra["iteration"]), float(extra["env_steps"])
                saved["step"] = start
                log.info("rl: resumed from iteration %d", start)
        # ---- Train ---------------------------------------------------------------------------
        logger = MetricsLogger(os.path.join(cfg.output_dir, "tb"), enabled=cfg.logging.tensorboard)

        def cleanup():  # an abandoned region: the checkpoint write in flight, then the TensorBoard events
            ckpt.wait()
            logger.close()

        total = cfg.rl.num_iterations
        end = total if stop_at is None else min(stop_at, total)
        history: collections.deque[dict] = collections.deque(maxlen=10_000)
        evals = []
        times: collections.deque[list[float]] = collections.deque(maxlen=10_000)  # monotonic start, end, env steps
        t_start = time.perf_counter()
        status = "done"
        try:
            progress.resume(start)
            with sharding.use_mesh(mesh, rules):
                if start == 0 and cfg.rl.eval_every > 0:  # the starting policy: iteration 0 of the curve
                    with (stop.abandonable("the evaluation at iteration 0", kept, cleanup),
                          progress.phase("evaluating iteration 0")):
                        evals.append(log_eval(setup, logger, state.params, 0, env_steps))
                safe_at = start  # the newest iteration whose state a rerun gets back (saved, or the start)
                for it in range(start, end):
                    # nothing since that state would be lost: a signal abandons the iteration at once
                    region = (stop.abandonable(f"iteration {it + 1} (its predecessor is saved)", kept, cleanup)
                              if safe_at == it else contextlib.nullcontext())
                    with region:
                        t0, m0 = time.perf_counter(), time.monotonic()
                        k_collect, k_update = iteration_keys(cfg.seed, it)
                        # the first iteration's compiles on the console (each call returns once it is dispatched)
                        phase = progress.phase if it == start else lambda _: contextlib.nullcontext()
                        with phase(f"compiling the rollout ({cfg.env.num_envs} envs)"):
                            env_state, batch, roll = collect_fn(state.params, env_state, k_collect, jnp.int32(it))
                        batch = learner.critic_warmup(cfg.rl, it, batch)
                        if ref_params is not None:
                            batch = ref_fn(ref_params, batch, jax.random.fold_in(k_update, learner.REF_STREAM))
                        with phase("compiling the update"):
                            state, metrics = update_fn(k_update, state, batch)
                        host = {k: float(v) for k, v in jax.device_get(metrics | roll).items()}
                    learner.check_finite(host, it + 1)  # raises before this iteration is saved
                    done = it + 1
                    seconds = time.perf_counter() - t0
                    env_steps += host["env_steps"]
                    times.append([m0, time.monotonic(), host["env_steps"]])
                    host |= {"env_steps_per_s": host["env_steps"] / seconds, "iteration_s": seconds,
                             "total_env_steps": env_steps}
                    history.append({k: host[k] for k in
                                    ("success", "episode_return", "policy_loss", "env_steps_per_s")})
                    if done % cfg.logging.every_steps == 0 or done == total:
                        logger.scalars(done, host, prefix="train/")
                        progress.update(done, {"success": host["success"], "return": host["episode_return"],
                                               "sps": host["env_steps_per_s"]})
                    if done < end and stop.requested():  # SIGTERM / Ctrl-C: this iteration's checkpoint, then leave
                        log.warning("rl: interrupted (%s) after iteration %d; saving it", stop.reason, done)
                        end, status = done, "interrupted"
                    periodic = cfg.rl.eval_every > 0 and done % cfg.rl.eval_every == 0
                    evaluate = status == "done" and (periodic or (done == total and cfg.rl.eval_every >= 0))
                    # an evaluation follows: save its iteration first, so a signal during it loses nothing
                    if ckpt.save(done, pack(state, env_state), force=done in (total, end) or evaluate,
                                 extra={"iteration": done, "env_steps": env_steps, "config": cfg.name}):
                        saved["step"] = safe_at = done
                    if status == "interrupted":
                        stop.report(f"iteration {done}", f"finished it and saved checkpoint {done}")
                        break
                    if evaluate:
                        with (stop.abandonable(f"the evaluation at iteration {done}", kept, cleanup),
                              progress.phase(f"evaluating iteration {done}")):
                            evals.append(log_eval(setup, logger, state.params, done, env_steps))
        finally:
            ckpt.close()
            logger.close()
        return {"status": status, "start_iteration": start, "iterations": total, "params": int(n_params),
                "seconds": round(time.perf_counter() - t_start, 1), "env_steps": env_steps, "history": list(history),
                "evals": evals, "checkpoint_dir": ckpt_dir, "state": state, "iteration_times": list(times)}
