"""The RL core through the async pipeline: `python -m vlajax.train rl --pipeline.enabled --preset NAME`.

`run_async(cfg) -> int` is that command's entry (`vlajax.rl.command.run` dispatches here when
`cfg.pipeline.enabled`). The async runner is `train_pipeline(cfg, source, ...)`: a config and a few
callables (`build` the policy, `source` the rollout, `record` per update) on the run skeleton
(`vlajax.training.run.Run`: start-up, state on its shards, checkpoints, resume, stop regions); it reads
top to bottom:

    run.start(); places(run)                      processes, compile cache, placement and meshes
    setup = build(cfg, mesh); src = source(...)   the policy; the rollout source's checks and env state
    make_learner(run, setup)                      train state on its shards, jitted donated update
    open_policy_checkpoints; run.restore          config.json + policy.json; resume counters and state
    src.start(counters, learner); Trainer         the rollout lanes; the trainer lane's step
    on_update                                     metrics (TB, JSON lines, terminal), save, evaluate
    AsyncRunner(...); run.run_updates             until rl.num_iterations updates or a stop

`train_async` runs it with the tabletop source; `vlajax.libero.rl_train` with LIBERO's workers.
Two tabletop rollout paths:

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
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vlajax.config.schema import EnvConfig, TrainConfig
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import RunAborted
from vlajax.pipeline.metrics import Timeline, WindowReporter
from vlajax.pipeline.placement import Placement, make_placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.pipeline.slots import SlotRollout
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_progress import AsyncProgress
from vlajax.rl.async_workload import RLWorkload, Trainer, check_streaming
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.hosts import Hosts
from vlajax.training.run import Run

log = logging.getLogger(__name__)

__all__ = ["Places", "Source", "run_async", "train_async", "train_pipeline"]


# ------------------------------------------------------------------------------------------
# Where the parts live; what a rollout source hands the pipeline
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Places:
    """Where an async run's parts live (`places(run)`): the placement, the train state's mesh (`run.mesh`),
    the rollout's mesh, this process's configs and the multi-process helpers (None on one process)."""

    placement: Placement
    rollout_mesh: Mesh
    rollout_cfg: TrainConfig  # this process's envs and rollout seed
    build_cfg: TrainConfig  # this process's envs, the run's seed: the same init and eval everywhere
    hosts: Hosts | None

    @property
    def colocated(self) -> bool:
        return self.placement.kind == "colocated"


def places(run: Run) -> Places:
    """The placement's meshes: colocated, the train state on the run's mesh (`cfg.mesh`) and the rollout
    beside it; else the placement's train and rollout sub-meshes. Multi-process rollout stays on this host's
    devices. Sets `run.mesh` (the train mesh)."""
    cfg = run.cfg
    placement = make_placement(cfg.pipeline, cfg.mesh)
    colocated = placement.kind == "colocated"
    mesh = run.make_mesh() if colocated else run.use_mesh(placement.train_mesh)
    hosts = Hosts(cfg, mesh) if jax.process_count() > 1 else None
    roll_mesh = placement.rollout_mesh if hosts is not None or not colocated else mesh
    if hosts is None:
        return Places(placement, roll_mesh, cfg, cfg, None)
    return Places(placement, roll_mesh, dataclasses.replace(hosts.cfg, seed=hosts.seed), hosts.cfg, hosts)


class Source:
    """A rollout source of `train_pipeline`: what the rollout lanes run and what a checkpoint keeps of them.
    This base keeps no env state (`{'train': state}`) and resumes from the rounds the trainer consumed.

    `start(counters, learner)` (after any resume) sets `sample_step` (`AsyncRunner`'s), `lanes` (its `rollout`, or
    None: one rollouter lane calls `sample_step`), `samples_per_step`, `mini_batch`, `prepare` (a micro-batch
    -> learner batch, or None) and `params_sharding` (where published weights go; None: replicated on the
    rollout mesh)."""

    env_cfg: EnvConfig | None = None  # the rollout's env (policy.json records its physics); None: not this package's
    sample_step: Callable
    lanes: Callable | None = None
    samples_per_step: int
    mini_batch: int
    prepare: Callable | None = None
    params_sharding: Any = None

    def pack(self, state: Any, env_state: Any = None) -> dict:
        """The checkpoint's tree."""
        return {"train": state}

    def restore_target(self, state: Any) -> Any:
        """The restore target's `ShapeDtypeStruct`s."""
        return checkpoint.abstract_state(self.pack(state))

    def restored(self, tree: dict) -> Any:
        """The restored tree -> the train state (the source keeps its own part)."""
        return tree["train"]

    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        raise NotImplementedError

    def snapshot(self, runner: AsyncRunner) -> tuple[int, Any]:
        """(sample calls to record, env state to save or None): rounds consumed, not started."""
        return runner.resume_counters().sample_calls, None

    def consumed(self, update: int) -> dict[str, float]:
        """Rollout metrics of the samples update `update` trained on ({} when the source keeps none)."""
        return {}

    def extra(self) -> dict:
        """More JSON for each checkpoint's `extra` (e.g. the LIBERO suite)."""
        return {}

    def bind(self, runner: AsyncRunner) -> None:
        """Called once the runner exists (e.g. a source that publishes to it)."""

    def close(self) -> None:
        """Called when the run ends, however it ends."""


# ------------------------------------------------------------------------------------------
# The async runner: a config and a few callables
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Finished:
    """What `train_pipeline` hands back: the runner after its run and the run's records."""

    status: str
    runner: AsyncRunner
    source: Source
    setup: rl_setup.Setup
    checkpoint_dir: str
    evals: list[dict]
    update_times: list[float]  # time.monotonic() as each of the newest 10,000 updates ended
    env_steps: float  # produced, all processes (resumed runs: since step 0)
    consumed_env_steps: int  # trained on in this run, all processes
    seconds: float

    def steady(self) -> dict:
        """The runner's summary from the end of this run's first update (which compiles) to its last."""
        t = self.update_times
        return self.runner.summary(t[0], t[-1]) if len(t) > 1 else {}


def train_pipeline(cfg: TrainConfig, source: Callable[[Run, Places, rl_setup.Setup], Source], *,
                   build: Callable[[TrainConfig, Any], rl_setup.Setup] | None = None,
                   setup: rl_setup.Setup | None = None, stop_at: int | None = None, timeout: float | None = None,
                   record: Callable[[int, dict, dict], None] | None = None,
                   evaluate: bool = True, progress: str | None = None, name: str = "the async run",
                   dropped: str = "dropped the rollout in flight", on_cleanup: Callable[[], None] | None = None,
                   skip_when_done: bool = False, last_update_line: bool = False) -> Finished:
    """Async RL to `rl.num_iterations` optimizer updates through `vlajax.pipeline.AsyncRunner`, resuming
    from the newest checkpoint. `stop_at`: stop after that many updates (with a checkpoint), as if interrupted.

    The callables: `build(cfg, mesh)` the policy (None: `rl_setup.build`, looked up when the run starts;
    unused when `setup` is given);
    `source(run, places, setup)` the rollout (`Source`); `record(update, record, metrics)` after
    each update's own logging (e.g. a JSON line of the source's). `evaluate`: closed-loop evaluations at
    `rl.eval_every` (update 0 first) and at the end; `progress`: the terminal's label (`AsyncProgress`), None
    for none; `name` / `dropped`: the stop line's words (`last_update_line`: also a line for a signal during the
    last update, `Run.run_updates`); `on_cleanup()`: after an abandoned region's write; `skip_when_done`: a
    resumed run already at its end does not start the lanes."""
    p = cfg.pipeline
    total = cfg.rl.num_iterations
    end = total if stop_at is None else min(stop_at, total)
    with Run(cfg, "rl", unit="update", total=total, on_cleanup=on_cleanup) as run:
        with run.setting_up():  # nothing new yet: a signal abandons at once
            # ---- Start-up: processes, compile cache, placement; the policy, its train state -----
            run.start(mesh=False)
            where = places(run)
            hosts = where.hosts
            setup = setup or (build or rl_setup.build)(where.build_cfg, run.mesh)
            src = source(run, where, setup)  # its checks (e.g. the decisions per process), its env state
            if p.streaming:
                check_streaming(cfg, p.require_batches)
            learn = rl_setup.make_learner(run, setup)

            # ---- Checkpoints and resume; the rollout from the resumed counters ------------------
            ckpt_dir = rl_setup.open_policy_checkpoints(run, setup, "async-rl", src.env_cfg)
            restored, extra = run.restore(None, abstract=src.restore_target(learn.state))
            state, counters, env_steps = learn.state, RunnerCounters(), 0.0
            if extra is not None:
                state = src.restored(restored)
                counters = RunnerCounters(**extra["counters"])
                run.resumed_at(counters.updates)
                env_steps = float(extra.get("env_steps", 0.0))
                log.info("rl async: resumed at update %d (version %d)", counters.updates, counters.version)
            src.start(counters, learn)
            trainer = Trainer(cfg, setup.actor, None, p.streaming, p.use_rollout_log_probs,
                              prepare=src.prepare if hosts is None else _global(hosts, src.prepare),
                              update_fn=learn.update_fn, ref_params=learn.ref_params)
            trainer.updates = counters.updates

        def train_step(s, micro_batches):
            with sharding.use_mesh(run.mesh, run.rules):
                return trainer(s, micro_batches)

        # ---- Logging, saving -----------------------------------------------------------------------
        logger = run.open_logger()
        os.makedirs(cfg.output_dir, exist_ok=True)
        main = distributed.is_main_process()
        json_path = os.path.join(cfg.output_dir, "async_metrics.jsonl")
        timeline = Timeline()
        reporter = WindowReporter(timeline, logger, every=cfg.logging.every_steps,
                                  json_path=json_path if main else None)
        evals: list[dict] = []
        steps_box = [env_steps]
        consumed = [0]  # env steps of the samples trained on in this run (all processes)
        update_times: collections.deque[float] = collections.deque(maxlen=10_000)  # monotonic end of each update
        shown = AsyncProgress(total, progress or "", cfg.logging.progress if progress else "none",
                              cfg.logging.every_steps, counters.updates, env_steps=timeline.total_env_steps)
        eval_every = cfg.rl.eval_every if evaluate else -1

        def save(runner: AsyncRunner, force: bool) -> None:
            c = runner.counters
            calls, env_copy = src.snapshot(runner)
            extra = {"counters": {"updates": c.updates, "version": c.version, "sample_calls": calls},
                     "env_steps": steps_box[0], "seed": cfg.seed, "config": cfg.name, "iteration": c.updates,
                     **src.extra()}
            if run.ckpt.save(c.updates, src.pack(runner.state, env_copy), force=force, extra=extra):
                run.saved(c.updates)

        boundaries = run.update_boundaries(counters.updates, save, name, dropped)  # a rollout call may take minutes

        def on_update(runner: AsyncRunner, rec: dict) -> None:
            update_times.append(time.monotonic())
            u = rec["update"]
            m = dict(rec["metrics"]) | src.consumed(u)
            produced = timeline.total_env_steps()  # by this process so far (O(1))
            used = int(rec["env_steps"])
            if hosts is not None:  # every process's trainer is here after the same update: sum over them
                produced, used = hosts.sum([produced, used])
            steps_box[0] = env_steps + float(produced)  # produced so far
            consumed[0] += used
            m |= {"staleness_max": float(max(rec["staleness"])), "version": float(rec["version"]),
                  "staleness_updates_max": float(max((s for s in rec["staleness_updates"] if s is not None),
                                                     default=0))}
            logger.scalars(u, m, prefix="train/")
            reporter(u)
            shown.update(u, m["staleness_max"], m.get("success"))
            if main:
                with open(json_path, "a") as f:
                    f.write(json.dumps({"update": u, "train": m}) + "\n")
            if record is not None:
                record(u, rec, m)
            evaluating = (eval_every > 0 and u % eval_every == 0) or (u == total and eval_every >= 0)
            save(runner, force=u in (total, end) or evaluating)  # an evaluation follows: a stop in it loses nothing
            if evaluating:
                with runner.trainer_lane.heartbeat(), run.evaluating(u):  # in the trainer lane: busy, not stalled
                    evals.append(rl_setup.log_eval(setup, logger, runner.state.params, u, steps_box[0],
                                                   step_name="update"))
                shown.evaluated(evals[-1]["mean_success"])
            if u >= end:
                runner.lifetime.stop()

        runner = AsyncRunner(p, sample_step=src.sample_step, train_step=train_step, get_params=lambda s: s.params,
                             state=state, num_updates=total, samples_per_step=src.samples_per_step,
                             mini_batch=src.mini_batch, rollout_shardings=src.params_sharding, counters=counters,
                             on_update=on_update, rollout=src.lanes, timeline=timeline,
                             publish_sharding=None if hosts is None else hosts.repl,
                             sync_peers=None if hosts is None else hosts.barrier, update_scope=boundaries.scope)
        src.bind(runner)
        t0 = time.perf_counter()
        try:
            with shown:  # the terminal hears from the run at least every 30 s
                if counters.updates == 0 and eval_every > 0:  # the starting policy: update 0 (as in sync)
                    with run.evaluating(0):
                        evals.append(rl_setup.log_eval(setup, logger, state.params, 0, env_steps, step_name="update"))
                    shown.evaluated(evals[-1]["mean_success"])
                done = skip_when_done and counters.updates >= end  # a resumed run that has nothing left to do
                status = "done" if done else run.run_updates(runner, boundaries, timeout, last_update_line)
        finally:
            src.close()
            if runner.group.alive:  # a lane outlived its stop: closing under it could corrupt a checkpoint
                log.error("rl async: lanes %s still running; checkpointer and logger left open", runner.group.alive)
                run.keep_open = True
    return Finished(status, runner, src, setup, ckpt_dir, evals, list(update_times), steps_box[0], consumed[0],
                    round(time.perf_counter() - t0, 1))


def _global(hosts: Hosts, prepare: Callable | None) -> Callable:
    """A micro-batch -> this process's rows of the global batch (after `prepare`, when there is one)."""
    return hosts.to_global if prepare is None else (lambda d: hosts.to_global(prepare(d)))


# ------------------------------------------------------------------------------------------
# The tabletop sources: the synchronous loop's collect (one slot) or env slots
# ------------------------------------------------------------------------------------------


class _TabletopSource(Source):
    """The tabletop envs of this process (`env.num_envs / process_count`); decisions checked per process."""

    def __init__(self, run: Run, where: Places, setup: rl_setup.Setup):
        self.where, self.setup, self.cfg = where, setup, where.rollout_cfg
        self.env_cfg = self.cfg.env
        self.decisions = rl_setup.check_decisions(self.cfg, setup, run.mesh)  # per process
        log.info("rl async: process %d/%d, %d envs here; placement %s (rollout on this host's devices)",
                 jax.process_index(), jax.process_count(), self.cfg.env.num_envs,
                 Placement(where.placement.kind, where.rollout_mesh, run.mesh).describe())

    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        # colocated: the loop's own param shardings (so collect compiles as in the loop); else replicated.
        # Multi-process: replicated on this host's rollout mesh, gathered replicated on the train mesh first.
        w = self.where
        self.params_sharding = (learn.shardings.params if w.colocated and w.hosts is None
                                else NamedSharding(w.placement.rollout_mesh, PartitionSpec()))


class _CollectSource(_TabletopSource):
    """`pipeline.num_slots == 1`: the loop's jitted collect over this process's envs, one call per
    micro-batch; the env state each unconsumed call started from is checkpointed (exact resume)."""

    def __init__(self, run: Run, where: Places, setup: rl_setup.Setup):
        super().__init__(run, where, setup)
        self.require = self.cfg.pipeline.require_batches
        self.mini_batch = self.samples_per_step = self.decisions
        with sharding.use_mesh(where.rollout_mesh, run.rules):
            self.env_state = rl_setup.place_env_state(
                jax.jit(functools.partial(rl_setup.initial_env_state, self.cfg, setup.env))(), where.rollout_mesh)

    def _rows(self, env_state: Any) -> list:  # multi-host: a row per process
        leaves = rl_setup.env_leaves(env_state)
        return leaves if self.where.hosts is None else self.where.hosts.stack(leaves)

    def pack(self, state: Any, env_state: Any = None) -> dict:
        return {"train": state} | ({} if env_state is None else {"env": self._rows(env_state)})

    def restore_target(self, state: Any) -> Any:
        hosts, env_state = self.where.hosts, self.env_state
        if hosts is None:
            return checkpoint.abstract_state(self.pack(state, env_state))
        return {"train": checkpoint.abstract_state(state)} | (
            {} if env_state is None else {"env": hosts.abstract_stack(rl_setup.env_leaves(env_state))})

    def restored(self, tree: dict) -> Any:
        hosts = self.where.hosts
        if self.env_state is not None and hosts is None:
            self.env_state = rl_setup.env_unleaves(self.env_state, tree["env"])
        elif self.env_state is not None:
            self.env_state = rl_setup.place_env_state(
                rl_setup.env_unleaves(self.env_state, hosts.unstack(tree["env"])), self.where.rollout_mesh)
        return tree["train"]

    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        super().start(counters, learn)
        self.collect = self.sample_step = _Collect(self.cfg, self.setup, self.where.rollout_mesh, self.env_state,
                                                   counters.sample_calls)

    def snapshot(self, runner: AsyncRunner) -> tuple[int, Any]:
        # one collect call per micro-batch: the calls consumed so far
        return self.collect.snapshot(runner.counters.updates * self.require)

    def consumed(self, update: int) -> dict[str, float]:
        # update u trained on collect calls (u - 1) * rb .. u * rb - 1
        return self.collect.consumed_metrics(range((update - 1) * self.require, update * self.require))


class _SlotSource(_TabletopSource):
    """`pipeline.num_slots > 1`: `vlajax.rl.async_workload` env slots with dynamic batching (slot env state is
    not checkpointed: a resumed run's slots reset into new key streams)."""

    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        super().start(counters, learn)
        cfg, p = self.cfg, self.cfg.pipeline
        work = RLWorkload(cfg, self.setup)
        reset, step, infer = work.env(p.num_slots, None, start=counters.updates)  # resumed: new key streams
        per = cfg.env.num_envs // p.num_slots
        slots = SlotRollout(p, reset=reset, step=step, infer=infer, horizon=cfg.rl.rollout_length,
                            samples_per_slot=per * cfg.rl.rollout_length,
                            env_steps_per_decision=per * self.setup.action_horizon)
        self.prepare = work._prepare
        self.sample_step, self.lanes = slots.sample_step, slots.lanes
        self.mini_batch = self.samples_per_step = per * cfg.rl.rollout_length


def tabletop_source(run: Run, where: Places, setup: rl_setup.Setup) -> Source:
    """The tabletop rollout: the collect path for one slot, env slots for more."""
    return (_SlotSource if run.cfg.pipeline.num_slots > 1 else _CollectSource)(run, where, setup)


def train_async(cfg: TrainConfig, setup: rl_setup.Setup | None = None, *, stop_at: int | None = None,
                timeout: float | None = None) -> dict[str, Any]:
    """Run to `rl.num_iterations` optimizer updates (resuming from the newest checkpoint). -> summary.

    `stop_at`: stop after that many updates (with a checkpoint), as if interrupted. The summary's
    `summary` covers the whole run (compiles included), `summary_steady` the window from the end
    of this run's first update to its last (`update_times`: `time.monotonic()` as each of the newest
    10,000 updates ended; bounded, like every per-update record of a run).
    """
    out = train_pipeline(cfg, tabletop_source, setup=setup, stop_at=stop_at, timeout=timeout,
                         progress=f"rl async {cfg.name}")
    runner = out.runner
    version, rollout_params = runner.weights.latest()
    checksum = float(jax.jit(_abs_sum)(rollout_params))  # reduced on device: no weight copy to the host
    log.info("rl async: process %d: %s after %d updates; rollout weights version %d (checksum %.9g); "
             "env steps trained on: %d by this process, %d by all", jax.process_index(), out.status,
             runner.counters.updates, version, checksum, sum(r["env_steps"] for r in runner.history),
             out.consumed_env_steps)
    return {"status": out.status, "updates": runner.counters.updates, "version": runner.counters.version,
            "seconds": out.seconds, "history": runner.history, "evals": out.evals,
            "summary": runner.summary(), "checkpoint_dir": out.checkpoint_dir, "state": runner.state,
            "update_times": out.update_times, "summary_steady": out.steady(),
            "env_steps": out.env_steps, "consumed_env_steps": out.consumed_env_steps,
            "processes": jax.process_count()}


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

