"""The async RL run: `train_pipeline(cfg, source, ...)`, a config and a few callables on the run skeleton
(`vlajax.training.run.Run`: start-up, state on its shards, checkpoints, resume, stop regions). Its
rollout comes from a `Source`: the tabletop envs (`vlajax.rl.async_loop`) or LIBERO's workers
(`vlajax.libero.rl_train`). It reads top to bottom:

    run.start(); places(run)                      processes, compile cache, placement and meshes
    setup = build(cfg, mesh); src = source(...)   the policy; the rollout source's checks and env state
    make_learner(run, setup)                      train state on its shards, jitted donated update
    open_policy_checkpoints; run.restore          config.json + policy.json; resume counters and state
    src.start(counters, learner); Trainer         the rollout lanes; the trainer lane's step
    on_update                                     metrics (TB, JSON lines, terminal), save, evaluate
    AsyncRunner(...); run.run_updates             until rl.num_iterations updates or a stop
    src.evaluate_final(runner)                    the source's own evaluation of the final weights
    src.close()                                   however the run ends

Mesh: the train state lives on the run's mesh (`cfg.mesh`); every lane enters that mesh context, so
the jitted steps compile exactly as in the synchronous loop. Published weights go where the source
says (`Source.params_sharding`; default replicated on the placement's rollout sub-mesh).

Multi-process (DESIGN.md "Multi-host shape": rollout host-local, training global): each process runs
its own rollout lanes on its own devices (`Places.rollout_mesh`, also when colocated) with its share
of the envs (`Places.rollout_cfg`) and a host-local replica of the weights. Each micro-batch becomes
this process's rows of one global batch over the train mesh (`jax.make_array_from_process_local_data`,
dim 0 over `dp`), and the trainer lanes of all processes run the same jitted update in the same order:
every process takes `require_batches` micro-batches per update and waits at a coordination-service
barrier (`distributed.barrier`) before each, so none enters the step's collectives long before its
peers. Publication gathers the params replicated on the train mesh (a collective in the trainer
lanes, in lockstep) and each process's control plane copies its own replica onto its rollout mesh.
Orbax checkpoints are written by all processes. Env steps in metrics, evaluations and the summary
are summed over processes.

Checkpoints (Orbax, `checkpoint.every_steps` updates, at the end, and on SIGTERM / Ctrl-C): the
source's tree (`Source.pack`: the train state and any env state) and `extra` = runner counters
(updates, version, the sample calls consumed: `Source.snapshot`), env steps, the RNG seed and the
source's `extra()`; every key is derived from these counters, so a resumed run continues the same
key streams. Metrics: TensorBoard (`<output_dir>/tb`, `train/*` per update, pipeline window metrics
every `logging.every_steps`) and JSON lines (`<output_dir>/async_metrics.jsonl`); on the terminal
(`progress`) updates, env steps/s, staleness and success at least every 30 s
(`vlajax.rl.async_progress`).

Evaluation: `evaluate` runs the policy's own closed-loop evaluation (`setup.evaluate`) in the trainer
lane at `rl.eval_every` (update 0 first; 0: only at the end; -1: never). A source whose evaluation
needs its own rollout resources (LIBERO's workers) passes `evaluate=False`, evaluates in its rollout
lane as it likes, and `Source.evaluate_final(runner)` is called once the last update is done and the
lanes have stopped, before `close` (with `rl.eval_every >= 0`): the final weights' evaluation.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from vlajax.config.schema import EnvConfig, TrainConfig
from vlajax.pipeline.metrics import Timeline, WindowReporter
from vlajax.pipeline.placement import Placement, make_placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_progress import AsyncProgress
from vlajax.rl.async_workload import Trainer, check_streaming
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.hosts import Hosts
from vlajax.training.run import Run

log = logging.getLogger(__name__)

__all__ = ["Finished", "Places", "Source", "places", "train_pipeline"]

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


class Source(abc.ABC):
    """A rollout source of `train_pipeline`: what the rollout lanes run and what a checkpoint keeps of them.
    The defaults keep no env state (`{'train': state}`) and resume from the rounds the trainer consumed.

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

    @abc.abstractmethod
    def start(self, counters: RunnerCounters, learn: rl_setup.Learner) -> None:
        """Make the rollout from the (resumed) counters: set the attributes above."""

    def pack(self, state: Any, env_state: Any = None) -> dict:
        """The checkpoint's tree."""
        return {"train": state}

    def restore_target(self, state: Any) -> Any:
        """The restore target's `ShapeDtypeStruct`s."""
        return checkpoint.abstract_state(self.pack(state))

    def restored(self, tree: dict) -> Any:
        """The restored tree -> the train state (the source keeps its own part)."""
        return tree["train"]

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
        """Called once the runner exists (e.g. a source that publishes to it); these defaults: nothing."""
        return None

    def evaluate_final(self, runner: AsyncRunner) -> dict | None:
        """Called once after the run's last update (`rl.num_iterations`, `rl.eval_every >= 0`), when the rollout
        lanes have stopped and before `close`: the source's own evaluation of the final weights
        (`runner.weights.latest()`) -> its record, or None (these defaults: none; `train_pipeline`'s `evaluate`
        evaluates in the trainer lane)."""
        return None

    def close(self) -> None:
        """Called when the run ends, however it ends (a failed set-up too); these defaults: nothing to close."""
        return None


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
    checkpoints: list[int]  # the updates this run saved

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
    resumed run already at its end does not start the lanes. Once this run's updates reach `rl.num_iterations`
    (with `rl.eval_every >= 0`), `source.evaluate_final(runner)` evaluates the final weights, before the source
    closes; its record (when not None) joins `Finished.evals`."""
    p = cfg.pipeline
    total = cfg.rl.num_iterations
    end = total if stop_at is None else min(stop_at, total)
    with Run(cfg, "rl", unit="update", total=total, on_cleanup=on_cleanup) as run, \
            contextlib.ExitStack() as owned:
        with run.setting_up():  # nothing new yet: a signal abandons at once
            # ---- Start-up: processes, compile cache, placement; the policy, its train state -----
            run.start(mesh=False)
            where = places(run)
            hosts = where.hosts
            setup = setup or (build or rl_setup.build)(where.build_cfg, run.mesh)
            src = source(run, where, setup)  # its checks (e.g. the decisions per process), its env state
            owned.callback(src.close)  # however the run ends, a failed set-up too (e.g. worker processes)
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
            start = counters.updates

        step_s = [0.0]  # the newest update's train step (without its micro-batch waits unless streaming)

        def train_step(s, micro_batches):
            with sharding.use_mesh(run.mesh, run.rules):
                t = time.perf_counter()
                out = trainer(s, micro_batches)
                step_s[0] = time.perf_counter() - t
                return out

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
                  "update_s": step_s[0],
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
                u = runner.counters.updates
                if status == "done" and total == u > start and cfg.rl.eval_every >= 0 and not runner.group.alive:
                    with run.evaluating(u):  # its update's checkpoint is written (forced, waited for)
                        final = src.evaluate_final(runner)
                    if final is not None:
                        evals.append(final)
        finally:
            if runner.group.alive:  # a lane outlived its stop: closing under it could corrupt a checkpoint
                log.error("rl async: lanes %s still running; checkpointer and logger left open", runner.group.alive)
                run.keep_open = True
    return Finished(status, runner, src, setup, ckpt_dir, evals, list(update_times), steps_box[0], consumed[0],
                    round(time.perf_counter() - t0, 1), list(run.checkpoints))


def _global(hosts: Hosts, prepare: Callable | None) -> Callable:
    """A micro-batch -> this process's rows of the global batch (after `prepare`, when there is one)."""
    return hosts.to_global if prepare is None else (lambda d: hosts.to_global(prepare(d)))


