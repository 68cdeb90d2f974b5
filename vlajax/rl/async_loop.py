"""The RL core through the async pipeline: `python -m vlajax.train rl --pipeline.enabled --preset NAME`.

`run_async(cfg) -> int` is that command's entry (`vlajax.rl.command.run` dispatches here when
`cfg.pipeline.enabled`).
Two rollout paths:

- `pipeline.num_slots == 1`: the rollouter lane calls the synchronous loop's own jitted
  `collect` (`vlajax.rl.setup.collect`) (the `lax.scan` rollout over all envs, advantages, flat learner batch) with the
  newest installed weights; call c uses `iteration_keys(seed, c)[0]` and tags its decisions with
  the version. The trainer runs the loop's own jitted `learner.update` (same shardings, same
  donation, update u keyed `iteration_keys(seed, u)[1]`). With staleness 0, trigger 1, one slot
  and no streaming this is the synchronous loop, bit for bit (tests/pipeline/test_rl_async.py).
- `pipeline.num_slots > 1`: `vlajax.rl.async_workload` (env slots + dynamic batching,
  per-decision inference, advantages per segment in the trainer).

Mesh: the train state lives on the loop's mesh (`cfg.mesh`); every lane enters that mesh
context, so the jitted steps compile exactly as in the loop. Published weights are replicated
on the placement's rollout sub-mesh (`pipeline.placement`).

Multi-process (DESIGN.md "Multi-host shape": rollout host-local, training global): each
process runs its own rollout lanes on its own devices (`placement.rollout_mesh`, also when
colocated) with `env.num_envs / process_count` envs, its own env keys (the seed offset by the
process index) and a host-local replica of the weights; `env.num_envs` stays the global count,
as in the synchronous loop. Each micro-batch becomes this process's rows of one global batch
over the train mesh (`jax.make_array_from_process_local_data`, dim 0 over `dp`), and the
trainer lanes of all processes run the same jitted update in the same order: every process
takes `require_batches` micro-batches per update and waits at a coordination-service barrier
(`distributed.barrier`) before each, so none enters the step's collectives long before its
peers. Publication gathers the params replicated on the train mesh (a collective in the
trainer lanes, in lockstep) and each process's control plane copies its own replica onto its
rollout mesh (no cross-host transfer). Orbax checkpoints are written by all processes; the
collect path's env state is saved as a global `[process_count, ...]` array (row p = process
p's envs). Env steps in metrics, evaluations and the summary are summed over processes.

Checkpoints (Orbax, `checkpoint.every_steps` updates, at the end, and on SIGTERM / Ctrl-C):
the train state, the collect path's env state, and `extra` = runner counters (updates,
version, sample calls), env steps and the RNG seed; every key is derived from these counters,
so a resumed run continues the same key streams. The collect path keeps the env state each
unconsumed call started from (by reference: its collect does not donate the env state) and saves
the one of the first unconsumed call, so a resumed run replays the calls whose samples were
produced but not consumed (exact resume).
Metrics: TensorBoard (`<output_dir>/tb`, `train/*` per update, pipeline window metrics every
`logging.every_steps`) and JSON lines (`<output_dir>/async_metrics.jsonl`); on the terminal
(`logging.progress`) updates, env steps/s, staleness and success at least every 30 s
(`vlajax.rl.async_progress`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import os
import sys
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import RunAborted
from vlajax.pipeline.metrics import Timeline, WindowReporter
from vlajax.pipeline.placement import Placement, make_placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.pipeline.slots import SlotRollout
from vlajax.policies import run_files
from vlajax.rl import learner
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_progress import AsyncProgress
from vlajax.rl.async_workload import RLWorkload, Trainer, check_streaming
from vlajax.rl.rollout import rollout_physics
from vlajax.shared import compile_cache
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.logging import MetricsLogger
from vlajax.training.preemption import UpdateBoundaries, nothing_new, stop_request
from vlajax.training.train_state import TrainState

log = logging.getLogger(__name__)

_SEED_STRIDE = 1_000_003  # process p's rollout seed is seed + p * stride (process 0 keeps the run's seed)


class _Hosts:
    """Multi-process helpers: per-process rollout config, global batches, global env-state checkpoints."""

    def __init__(self, cfg: TrainConfig, train_mesh):
        self.count, self.index = jax.process_count(), jax.process_index()
        if cfg.env.num_envs % self.count:
            raise ConfigError(f"env.num_envs={cfg.env.num_envs} does not split over {self.count} processes")
        env = dataclasses.replace(cfg.env, num_envs=cfg.env.num_envs // self.count)
        self.seed = (cfg.seed + self.index * _SEED_STRIDE) % (2**31 - 1)
        self.cfg = dataclasses.replace(cfg, env=env)  # the run's seed: the same init and eval everywhere
        self.batch = NamedSharding(train_mesh, PartitionSpec(sharding.DP))
        self.repl = NamedSharding(train_mesh, PartitionSpec())
        firsts = [min((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                  for p in range(self.count)]
        self.rows = NamedSharding(Mesh(np.asarray(firsts), ("process",)), PartitionSpec("process"))
        self.timeout = cfg.pipeline.queue_timeout_s

    def to_global(self, data: Any) -> Any:
        """This process's flat learner batch -> its rows of the global batch (via host memory)."""
        local = jax.device_get(data)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(
            self.batch if np.ndim(x) else self.repl, np.asarray(x)), local)

    def barrier(self, name: str) -> None:
        distributed.barrier(name, self.timeout)

    def stack(self, leaves: list) -> list:
        """Host-local env-state leaves -> global `[process_count, ...]` arrays (Orbax writes each row)."""
        return [jax.make_array_from_process_local_data(self.rows, np.asarray(jax.device_get(x))[None])
                for x in leaves]

    def abstract_stack(self, leaves: list) -> list:
        return [jax.ShapeDtypeStruct((self.count, *x.shape), x.dtype, sharding=self.rows) for x in leaves]

    def unstack(self, leaves: list) -> list:
        """Inverse of `stack`: this process's row of each restored leaf."""
        return [np.asarray(x.addressable_data(0))[0] for x in leaves]

    def sum(self, values: list[int]) -> list[int]:
        """Each integer summed over the processes (a collective: call in lockstep)."""
        hi_lo = np.asarray([[v >> 20, v & (2**20 - 1)] for v in values], np.int32)
        out = np.asarray(distributed.allgather(hi_lo[None])).reshape(self.count, len(values), 2).astype(np.int64)
        return [int(v) for v in (out[..., 0] * 2**20 + out[..., 1]).sum(0)]

__all__ = ["run_async", "train_async"]


class _Collect:
    """The num_slots == 1 rollouter: the loop's jitted `collect` over all envs, one call per sample_step."""

    def __init__(self, cfg: TrainConfig, setup: rl_setup.Setup, mesh, env_state: Any, calls: int):
        self.cfg, self.mesh = cfg, mesh
        # the env state is not donated (the loop's collect donates it): each call's starting state is kept by
        # reference until consumed, for exact resume -- the same memory as copies beside a donated input (one
        # env state per unconsumed call either way), without copying every leaf before every call and again at
        # every update
        self.fn = jax.jit(functools.partial(rl_setup.collect, cfg, setup))
        self.env_state, self.calls = env_state, calls
        self.lock = threading.Lock()
        self.by_call: dict[int, dict[str, float]] = {}  # call -> its rollout metrics (until consumed)
        self.before: dict[int, Any] = {}  # call -> the env state it started from (not yet consumed; immutable)

    def __call__(self, version: int, params: Any, call: int) -> list[Trajectory]:
        k_collect, _ = rl_setup.iteration_keys(self.cfg.seed, call)
        # the lock guards the bookkeeping only, not the call (minutes for a VLA): the trainer's
        # `consumed_metrics` / `snapshot` must not wait for a rollout in flight
        with self.lock:
            env_state = self.env_state
            if env_state is not None:  # kept until consumed: a checkpoint resumes from here
                self.before[call] = env_state
        with sharding.use_mesh(self.mesh, self.cfg.mesh.logical_rules):
            env_state, batch, roll = self.fn(params, env_state, k_collect, jnp.int32(version))
        with self.lock:
            self.env_state, self.calls = env_state, call + 1
        roll = {k: float(v) for k, v in jax.device_get(roll).items()}
        with self.lock:
            self.by_call[call] = roll
        n = int(batch["mask"].shape[0])
        return [Trajectory(batch, np.asarray(jax.device_get(batch["version"])), n, int(roll["env_steps"]))]

    def consumed_metrics(self, calls: range) -> dict[str, float]:
        """Rollout metrics of the calls an update trained on (their mean), not of the newest call:
        with staleness > 0 rollout runs ahead of the trainer."""
        with self.lock:
            rows = [self.by_call.pop(c) for c in calls if c in self.by_call]
        return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}

    def snapshot(self, consumed: int) -> tuple[int, Any]:
        """(consumed, the env state call `consumed` starts from): a resume replays every unconsumed call."""
        with self.lock:
            for c in [c for c in self.before if c < consumed]:
                del self.before[c]
            # call `consumed` started (its start state; also while it is in flight) or not yet (the current
            # state); episodic (GRPO) collect calls reset their envs: no env state to keep. Never donated, so
            # Orbax's async save may read it while later calls run.
            return consumed, self.before.get(consumed, self.env_state)


def train_async(cfg: TrainConfig, setup: rl_setup.Setup | None = None, *, stop_at: int | None = None,
                timeout: float | None = None) -> dict[str, Any]:
    """Run to `rl.num_iterations` optimizer updates (resuming from the newest checkpoint). -> summary.

    `stop_at`: stop after that many updates (with a checkpoint), as if interrupted. The summary's
    `summary` covers the whole run (compiles included), `summary_steady` the window from the end
    of this run's first update to its last (`update_times`: `time.monotonic()` as each of the newest
    10,000 updates ended; bounded, like every per-update record of a run).
    """
    p = cfg.pipeline
    with stop_request("rl") as stop:
        saved = {"step": None}  # the newest checkpoint written or found (for the stop lines)
        kept = lambda: nothing_new(saved["step"], "update")  # noqa: E731
        with stop.abandonable("set-up (before the first update)", kept):  # nothing new yet: abandon at once
            distributed.initialize(cfg.distributed)
            stop.collective = jax.process_count() > 1  # then only update boundaries stop
            compile_cache.enable(cfg.compilation_cache_dir)
            placement = make_placement(p, cfg.mesh)
            colocated = placement.kind == "colocated"
            mesh = sharding.make_mesh(cfg.mesh) if colocated else placement.train_mesh  # the train state's mesh
            hosts = _Hosts(cfg, mesh) if jax.process_count() > 1 else None
            # the collect path's env state and scan; multi-process rollout stays on this host's devices
            roll_mesh = placement.rollout_mesh if hosts is not None or not colocated else mesh
            roll_cfg = cfg if hosts is None else dataclasses.replace(hosts.cfg, seed=hosts.seed)  # this host's envs
            rules = cfg.mesh.logical_rules
            setup = setup or rl_setup.build(cfg if hosts is None else hosts.cfg, mesh)
            decisions = rl_setup.check_decisions(roll_cfg, setup, mesh)  # per process
            log.info("rl async: process %d/%d, %d envs here; placement %s (rollout on this host's devices)",
                     jax.process_index(), jax.process_count(), roll_cfg.env.num_envs,
                     Placement(placement.kind, roll_mesh, mesh).describe())
            if p.streaming:
                check_streaming(cfg, p.require_batches)
            tx = learner.make_optimizer(cfg.rl)

            def init(rng):
                return TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))

            state, state_shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(cfg.seed))
            # rl.kl_coef > 0: the initial policy (init_from or fresh, before any resume), frozen, is the reference
            ref_params = jax.tree.map(jnp.copy, state.params) if cfg.rl.kl_coef > 0 else None
            update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                                in_shardings=(None, state_shardings, None), out_shardings=(state_shardings, None),
                                donate_argnums=(1,))
            slots = p.num_slots > 1
            with sharding.use_mesh(roll_mesh, rules):
                env_state = None if slots else rl_setup.place_env_state(
                    jax.jit(functools.partial(rl_setup.initial_env_state, roll_cfg, setup.env))(), roll_mesh)

            # ---- Checkpoint and resume -------------------------------------------------------------
            ckpt_dir, ckpt = run_files.run_checkpointer(cfg)
            if setup.bridge is not None and distributed.is_main_process():  # the checkpoints are a policy
                run_files.write_policy(ckpt_dir, cfg.replace(model=setup.bridge.model), setup.bridge,
                                       "async-rl", rollout_physics=rollout_physics(roll_cfg.env))
            env_rows = rl_setup.env_leaves if hosts is None else (lambda e: hosts.stack(rl_setup.env_leaves(e)))
            # multi-host: a row per process
            pack = lambda s, e: {"train": s} | ({} if e is None else {"env": env_rows(e)})  # noqa: E731
            counters, env_steps = RunnerCounters(), 0.0
            if cfg.checkpoint.resume and ckpt.latest_step() is not None:
                if hosts is None:
                    target = checkpoint.abstract_state(pack(state, env_state))
                else:
                    target = {"train": checkpoint.abstract_state(state)} | (
                        {} if env_state is None else {"env": hosts.abstract_stack(rl_setup.env_leaves(env_state))})
                restored, extra = ckpt.restore(target)
                state = restored["train"]
                if env_state is not None and hosts is None:
                    env_state = rl_setup.env_unleaves(env_state, restored["env"])
                elif env_state is not None:
                    env_state = rl_setup.place_env_state(
                        rl_setup.env_unleaves(env_state, hosts.unstack(restored["env"])), roll_mesh)
                counters = RunnerCounters(**extra["counters"])
                saved["step"] = counters.updates
                env_steps = float(extra["env_steps"])
                log.info("rl async: resumed at update %d (version %d)", counters.updates, counters.version)

            # ---- Rollout: placement, the collect path or env slots ---------------------------------
            # colocated: the loop's own param shardings (so collect compiles as in the loop); else replicated.
            # Multi-process: replicated on this host's rollout mesh, gathered replicated on the train mesh first.
            rollout_sharding = (state_shardings.params if colocated and hosts is None
                                else NamedSharding(placement.rollout_mesh, PartitionSpec()))
            trainer = Trainer(cfg, setup.actor, None, p.streaming, p.use_rollout_log_probs,
                              prepare=None if hosts is None else hosts.to_global, update_fn=update_fn,
                              ref_params=ref_params)
            trainer.updates = counters.updates
            if slots:
                work = RLWorkload(roll_cfg, setup)
                reset, step, infer = work.env(p.num_slots, None, start=counters.updates)  # resumed: new key streams
                per = roll_cfg.env.num_envs // p.num_slots
                slot_rollout = SlotRollout(p, reset=reset, step=step, infer=infer, horizon=cfg.rl.rollout_length,
                                           samples_per_slot=per * cfg.rl.rollout_length,
                                           env_steps_per_decision=per * setup.action_horizon)
                trainer.prepare = work._prepare if hosts is None else (lambda d: hosts.to_global(work._prepare(d)))
                sample_step, rollout_lanes = slot_rollout.sample_step, slot_rollout.lanes
                mini = per * cfg.rl.rollout_length
                collect = None
            else:
                collect = _Collect(roll_cfg, setup, roll_mesh, env_state, counters.sample_calls)
                sample_step, rollout_lanes, mini = collect, None, decisions

        def train_step(s, micro_batches):
            with sharding.use_mesh(mesh, rules):
                return trainer(s, micro_batches)

        # ---- Logging, saving -------------------------------------------------------------------
        logger = MetricsLogger(os.path.join(cfg.output_dir, "tb"), enabled=cfg.logging.tensorboard)
        os.makedirs(cfg.output_dir, exist_ok=True)
        main = distributed.is_main_process()
        json_path = os.path.join(cfg.output_dir, "async_metrics.jsonl")
        timeline = Timeline()
        reporter = WindowReporter(timeline, logger, every=cfg.logging.every_steps,
                                  json_path=json_path if main else None)
        total = cfg.rl.num_iterations
        end = total if stop_at is None else min(stop_at, total)
        evals: list[dict] = []
        steps_box = [env_steps]
        consumed = [0]  # env steps of the samples trained on in this run (all processes)
        update_times: collections.deque[float] = collections.deque(maxlen=10_000)  # monotonic end of each update
        first_update_end: list[float] = []  # the first one (it compiles): where the steady window starts
        progress = AsyncProgress(total, f"rl async {cfg.name}", cfg.logging.progress, cfg.logging.every_steps,
                                 counters.updates, env_steps=timeline.total_env_steps)

        def save(runner: AsyncRunner, force: bool) -> None:
            c = runner.counters
            if collect is not None:  # one collect call per micro-batch: the calls consumed so far
                calls, env_copy = collect.snapshot(c.updates * p.require_batches)
            else:
                calls, env_copy = runner.resume_counters().sample_calls, None  # rounds consumed, not started
            extra = {"counters": {"updates": c.updates, "version": c.version, "sample_calls": calls},
                     "env_steps": steps_box[0], "seed": cfg.seed, "config": cfg.name, "iteration": c.updates}
            if ckpt.save(c.updates, pack(runner.state, env_copy), force=force, extra=extra):
                saved["step"] = c.updates

        def cleanup():  # an abandoned region: the checkpoint write in flight, then the TensorBoard events
            ckpt.wait()
            logger.close()

        start_updates = counters.updates

        boundaries = UpdateBoundaries(stop, ckpt, start_updates, saved, save, cleanup, "the async run",
                                      "dropped the rollout in flight")  # a rollout call may take minutes

        def on_update(runner: AsyncRunner, record: dict) -> None:
            update_times.append(time.monotonic())
            if not first_update_end:
                first_update_end.append(update_times[-1])
            u = record["update"]
            m = dict(record["metrics"])
            if collect is not None:  # update u trained on collect calls (u - 1) * rb .. u * rb - 1
                m |= collect.consumed_metrics(range((u - 1) * p.require_batches, u * p.require_batches))
            produced = timeline.total_env_steps()  # by this process so far (O(1))
            used = int(record["env_steps"])
            if hosts is not None:  # every process's trainer is here after the same update: sum over them
                produced, used = hosts.sum([produced, used])
            steps_box[0] = env_steps + float(produced)  # produced so far
            consumed[0] += used
            m |= {"staleness_max": float(max(record["staleness"])), "version": float(record["version"]),
                  "staleness_updates_max": float(max((s for s in record["staleness_updates"] if s is not None),
                                                     default=0))}
            logger.scalars(u, m, prefix="train/")
            reporter(u)
            progress.update(u, m["staleness_max"], m.get("success"))
            if main:
                with open(json_path, "a") as f:
                    f.write(json.dumps({"update": u, "train": m}) + "\n")
            evaluate = (cfg.rl.eval_every > 0 and u % cfg.rl.eval_every == 0) or (u == total and cfg.rl.eval_every >= 0)
            save(runner, force=u in (total, end) or evaluate)  # an evaluation follows: a stop in it loses nothing
            if evaluate:
                # evaluating in the trainer lane: busy, not stalled; a stop abandons it at once
                with (runner.trainer_lane.heartbeat(),
                      stop.abandonable(f"the evaluation at update {u}", kept, cleanup)):
                    evals.append(rl_setup.log_eval(setup, logger, runner.state.params, u, steps_box[0],
                                                   step_name="update"))
                progress.evaluated(evals[-1]["mean_success"])
            if u >= end:
                runner.lifetime.stop()

        runner = AsyncRunner(p, sample_step=sample_step, train_step=train_step, get_params=lambda s: s.params,
                             state=state, num_updates=total, samples_per_step=mini, mini_batch=mini,
                             rollout_shardings=rollout_sharding, counters=counters, on_update=on_update,
                             rollout=rollout_lanes, timeline=timeline,
                             publish_sharding=None if hosts is None else hosts.repl,
                             sync_peers=None if hosts is None else hosts.barrier, update_scope=boundaries.scope)
        t0 = time.perf_counter()
        try:
            with progress:  # the terminal hears from the run at least every 30 s
                if counters.updates == 0 and cfg.rl.eval_every > 0:  # the starting policy: update 0 (as in sync)
                    with stop.abandonable("the evaluation at update 0", kept, cleanup):
                        evals.append(rl_setup.log_eval(setup, logger, state.params, 0, env_steps, step_name="update"))
                    progress.evaluated(evals[-1]["mean_success"])
                status = runner.run(timeout=timeout, on_interrupt=boundaries.interrupt, stop=stop.local)
            ckpt.wait()
            if status == "interrupted":
                stop.report(f"the async run at update {runner.counters.updates}",
                            f"stopped at the boundary after update {runner.counters.updates}")
        finally:
            if runner.group.alive:  # a lane outlived its stop: closing under it could corrupt a checkpoint
                log.error("rl async: lanes %s still running; checkpointer and logger left open", runner.group.alive)
            else:
                ckpt.close()
                logger.close()
        version, rollout_params = runner.weights.latest()
        checksum = float(jax.jit(_abs_sum)(rollout_params))  # reduced on device: no weight copy to the host
        log.info("rl async: process %d: %s after %d updates; rollout weights version %d (checksum %.9g); "
                 "env steps trained on: %d by this process, %d by all", jax.process_index(), status,
                 runner.counters.updates, version, checksum,
                 sum(r["env_steps"] for r in runner.history), consumed[0])
        # the steady state: from the end of this run's first update (which compiles) to its last
        steady = runner.summary(first_update_end[0], update_times[-1]) if len(update_times) > 1 else {}
        return {"status": status, "updates": runner.counters.updates, "version": runner.counters.version,
                "seconds": round(time.perf_counter() - t0, 1), "history": runner.history, "evals": evals,
                "summary": runner.summary(), "checkpoint_dir": ckpt_dir, "state": runner.state,
                "update_times": list(update_times), "summary_steady": steady,
                "env_steps": steps_box[0], "consumed_env_steps": consumed[0], "processes": jax.process_count()}


def _abs_sum(tree: Any) -> jax.Array:
    """sum |x| over every leaf, in float32 (a fingerprint of the weights for the closing log line)."""
    return sum(jnp.sum(jnp.abs(x.astype(jnp.float32))) for x in jax.tree.leaves(tree))


def _short(summary: dict) -> dict:
    """The one-line JSON the `rl` command prints for an async run."""
    keep = ("status", "updates", "version", "seconds", "evals", "env_steps", "consumed_env_steps", "processes")
    short = {k: v for k, v in summary.items() if k in keep}
    return short | {"summary": {k: v for k, v in summary["summary"].items() if "/" in k}}


def run_async(cfg: TrainConfig) -> int:
    """The `rl` command with `--pipeline.enabled`; 0 on success, 1 on a non-finite update.
    A second SIGTERM / Ctrl-C exits at once (code 130) without waiting for threads or writes:
    the newest complete checkpoint is the one to resume from."""
    try:
        return rl_setup.run_and_report(cfg, train_async, _short)
    except RunAborted as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        os._exit(130)

