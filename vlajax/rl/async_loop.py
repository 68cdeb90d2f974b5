"""The RL core through the async pipeline on the tabletop: `python -m vlajax.train rl --pipeline.enabled --preset NAME`.

`run_async(cfg) -> int` is that command's entry (`vlajax.rl.command.run` dispatches here when
`cfg.pipeline.enabled`); `train_async(cfg)` is `vlajax.rl.pipeline_run.train_pipeline` (the async run
on the run skeleton) with the tabletop source. Two tabletop rollout paths:

- `pipeline.num_slots == 1`: the rollouter lane calls the synchronous loop's own jitted
  `collect` (`vlajax.rl.setup.collect`) (the `lax.scan` rollout over all envs, advantages, flat learner batch) with the
  newest installed weights; call c uses `iteration_keys(seed, c)[0]` and tags its decisions with
  the version. The trainer runs the loop's own jitted `learner.update` (same shardings, same
  donation, update u keyed `iteration_keys(seed, u)[1]`). With staleness 0, trigger 1, one slot
  and no streaming this is the synchronous loop, bit for bit (tests/pipeline/test_rl_async.py).
- `pipeline.num_slots > 1`: `vlajax.rl.async_workload` (env slots + dynamic batching,
  per-decision inference, advantages per segment in the trainer).

Colocated on one process the collect path publishes weights with the loop's own param shardings (so
collect compiles as in the loop); otherwise replicated on the placement's rollout sub-mesh. Multi-process,
each process steps `env.num_envs / process_count` envs with its own env keys (the seed offset by the
process index); `env.num_envs` stays the global count, as in the synchronous loop.

Checkpoints (besides `train_pipeline`'s): the collect path's env state, as a global `[process_count, ...]`
array on several processes (row p = process p's envs). The collect path keeps the env state each
unconsumed call started from (by reference: its collect does not donate the env state) and saves the one
of the first unconsumed call, so a resumed run replays the calls whose samples were produced but not
consumed (exact resume). Env slots are not checkpointed: a resumed run's slots reset into new key streams.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vlajax.config.schema import TrainConfig
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import RunAborted
from vlajax.pipeline.placement import Placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.pipeline.slots import SlotRollout
from vlajax.rl import setup as rl_setup
from vlajax.rl.async_workload import RLWorkload
from vlajax.rl.pipeline_run import Places, Source, train_pipeline
from vlajax.training import checkpoint, sharding
from vlajax.training.run import Run

log = logging.getLogger(__name__)

__all__ = ["run_async", "tabletop_source", "train_async"]


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
        # the env state is not donated: each call's starting state is kept by reference until consumed, for exact
        # resume -- the same memory as copies beside a donated input (one env state per unconsumed call either
        # way), without copying every leaf before every call and again at every update. The loop's collect does
        # not donate it either, and its key is made under the mesh as here (`__call__`): the same program, so
        # the compile cache serves the one compiled second (tests/pipeline/test_rl_async.py)
        self.fn = jax.jit(functools.partial(rl_setup.collect, cfg, setup))
        self.env_state, self.calls = env_state, calls
        self.lock = threading.Lock()
        self.by_call: dict[int, dict[str, float]] = {}  # call -> its rollout metrics (until consumed)
        self.before: dict[int, Any] = {}  # call -> the env state it started from (not yet consumed; immutable)

    def __call__(self, version: int, params: Any, call: int) -> list[Trajectory]:
        # the lock guards the bookkeeping only, not the call (minutes for a VLA): the trainer's
        # `consumed_metrics` / `snapshot` must not wait for a rollout in flight
        with self.lock:
            env_state = self.env_state
            if env_state is not None:  # kept until consumed: a checkpoint resumes from here
                self.before[call] = env_state
        with sharding.use_mesh(self.mesh, self.cfg.mesh.logical_rules):  # the key on the mesh, as in the loop
            k_collect, _ = rl_setup.iteration_keys(self.cfg.seed, call)
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

