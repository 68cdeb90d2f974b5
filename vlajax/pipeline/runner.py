"""The asynchronous RL runner (train async + streaming + partial rollout) and its synchronous twin.

The runner knows nothing about envs, models or losses; it drives three callables:

- `sample_step(version, params, call) -> list[Trajectory]`: one round of envs + inference
  with the given weights (the `call`-th round; derive RNG from it). Every returned item is
  one micro-batch of `mini_batch` samples, tagged with the versions that produced it. A
  sampler doing partial rollout may read newer weights itself (`ParamServer.latest`) between
  inference calls; its trajectories then carry several versions.
- `train_step(state, micro_batches) -> (state, metrics)`: one optimizer update from
  `require_batches` micro-batches pulled from the iterator. With `streaming` the iterator
  hands over each micro-batch as soon as it arrives (the step starts forward/backward on the
  first and accumulates); without, it blocks until all are there. `metrics` may hold
  `rejected` (samples dropped by a filter; counts against the acceptance rate).
- `get_params(state) -> params`: the weights to publish.

`rollout_shardings` places published weights on the rollout sub-mesh; multi-host,
`publish_sharding` (replicated on the train mesh) gathers them first so each host's control
plane can move its own replica onto its host-local rollout mesh, and `sync_peers(name)` (e.g.
`vlajax.training.distributed.barrier`) is called after each micro-batch arrives, before `train_step`
sees it: the trainer lanes of all processes then enter the global step together (a process
whose rollout is slower would otherwise leave its peers waiting inside a collective; the
trainer is recorded idle, `wait_peers`, meanwhile).

Lanes (one `LaneGroup`, shared lifetime, watchdog): `rollouter` (reserve samples under pacing
-> newest weights -> `sample_step` -> buffer), `trainer` (pull micro-batches -> `train_step`;
every `trigger_parameter_sync_step` updates publish a new version), `weights` (the control
plane: reshard onto the rollout sub-mesh and swap in), plus any `extra_lanes`. `rollout=`
replaces the single rollouter lane by lanes of its own (`SlotRollout.lanes`: env slots and
generators with dynamic batching; then `samples_per_step` is the samples of one slot segment).
`run_sync` is the same pieces as one loop: collect W samples -> `trigger` updates -> publish.
With staleness_threshold=0, trigger=1, one slot and no streaming the two produce identical
parameters (tests/pipeline/test_runner.py).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from vlajax.config.schema import AsyncConfig, ConfigError
from vlajax.pipeline.buffer import GetAborted, Trajectory, TrajectoryBuffer, window_samples
from vlajax.pipeline.lanes import Lane, LaneGroup, Lifetime
from vlajax.pipeline.metrics import Timeline, summarize
from vlajax.pipeline.weights import ParamServer

__all__ = ["AsyncRunner", "RunnerCounters", "run_sync"]

HISTORY = 1000  # per-update records an AsyncRunner keeps (on_update sees every one)
DRAIN_MARGIN_S = 10.0  # added to twice the longest measured update when waiting for an update boundary


class _AtBoundary(Exception):
    """A stop was requested before the update took its first micro-batch: nothing changed yet."""
SampleStep = Callable[[int, Any, int], Sequence[Trajectory]]
TrainStep = Callable[[Any, Iterator[Trajectory]], tuple[Any, dict]]


@dataclasses.dataclass
class RunnerCounters:
    """What a resumed run needs besides the train state (JSON-able)."""

    updates: int = 0  # optimizer updates done
    version: int = 0  # newest published policy version
    sample_calls: int = 0  # sample_step rounds started

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _check_sizes(cfg: AsyncConfig, samples_per_step: int, mini_batch: int) -> int:
    w = window_samples(cfg.trigger_parameter_sync_step, cfg.require_batches, mini_batch)
    if samples_per_step % mini_batch or w % samples_per_step:
        raise ConfigError(f"a sample_step of {samples_per_step} samples must be whole micro-batches of {mini_batch} "
                          f"and divide the sync window W={w} (trigger*require_batches*mini_batch)")
    return w


class AsyncRunner:
    """Rollout, training and weight distribution as lanes; see the module docstring."""

    def __init__(self, cfg: AsyncConfig, *, sample_step: SampleStep, train_step: TrainStep,
                 get_params: Callable[[Any], Any], state: Any, num_updates: int, samples_per_step: int,
                 mini_batch: int, rollout_shardings: Any = None, publish_sharding: Any = None,
                 counters: RunnerCounters | None = None,
                 on_update: Callable[[AsyncRunner, dict], None] | None = None,
                 extra_lanes: Sequence[tuple[str, Callable[[Lane], bool | None]]] = (),
                 rollout: Callable[[AsyncRunner], Sequence[tuple[str, Callable[[Lane], bool | None]]]] | None = None,
                 timeline: Timeline | None = None, sync_peers: Callable[[str], None] | None = None,
                 update_scope: Callable[[AsyncRunner], contextlib.AbstractContextManager] | None = None):
        self.cfg = cfg
        # entered around each update's micro-batch waits and `train_step` (not `on_update`): e.g. a region a
        # stop may abandon when nothing since the last checkpoint would be lost (`vlajax.rl.async_loop`)
        self.update_scope = update_scope
        self.window = _check_sizes(cfg, samples_per_step, mini_batch)
        self.sample_step, self.train_step, self.get_params = sample_step, train_step, get_params
        self.state, self.num_updates = state, num_updates
        self.samples_per_step, self.mini_batch = samples_per_step, mini_batch
        self.counters = dataclasses.replace(counters) if counters else RunnerCounters()
        self._start_calls = self.counters.sample_calls
        self.on_update = on_update
        self.sync_peers = sync_peers
        self._peer_syncs = 0
        self.timeline = timeline or Timeline()
        self.lifetime = Lifetime()
        self.buffer = TrajectoryBuffer(self.window, cfg.staleness_threshold, timeout_s=cfg.queue_timeout_s,
                                       lifetime=self.lifetime, timeline=self.timeline,
                                       version=self.counters.version, updates=self.counters.updates)
        self.weights = ParamServer(get_params(state), rollout_shardings, lifetime=self.lifetime,
                                   version=self.counters.version, gather_to=publish_sharding)
        self.weights.on_install(self.buffer.set_rollout_version)
        self.group = LaneGroup(self.lifetime, self.timeline, cfg.watchdog_s)
        if rollout is None:
            self.group.add("rollouter", self._rollout_body)
        else:  # e.g. SlotRollout.lanes: env slots + generators instead of one sample_step lane
            for name, body in rollout(self):
                self.group.add(name, body)
        self.trainer_lane = self.group.add("trainer", self._trainer_body)
        self.group.add("weights", self.weights.lane_body)
        for name, body in extra_lanes:
            self.group.add(name, body)
        # per update (the newest HISTORY): metrics + version + staleness of its micro-batches
        self.history: collections.deque[dict] = collections.deque(maxlen=HISTORY)
        # The trainer owns `state` and `counters`: it holds this lock from taking an update's first
        # micro-batch to the end of its `on_update`, so `consistent()` never sees a donated state
        # or counters of another update.
        self._state_lock = threading.RLock()
        self._stop_at_boundary = threading.Event()
        self._on_interrupt: Callable[[AsyncRunner], None] | None = None
        self.interrupted_at: int | None = None  # the update boundary an interrupt stopped at
        self.first_update_s: float | None = None  # first update (compiles included), with its on_update
        self.max_update_s = 0.0  # longest later update, with its on_update (evaluation, saving)

    # -- lanes ------------------------------------------------------------------------------

    def _rollout_body(self, lane: Lane) -> bool:
        with lane.waiting("pacing"):
            ticket = self.buffer.reserve(self.samples_per_step)
        version, params = self.weights.latest()
        call = self.counters.sample_calls
        self.counters.sample_calls += 1
        items = list(self.sample_step(version, params, call))
        n = sum(it.num_samples for it in items)
        if n != self.samples_per_step or any(it.num_samples != self.mini_batch for it in items):
            raise ValueError(f"sample_step returned {[it.num_samples for it in items]} samples; expected items of "
                             f"{self.mini_batch} summing to {self.samples_per_step}")
        for it in items:
            self.buffer.put(it, ticket)
        if steps := sum(it.env_steps for it in items):
            self.timeline.record_env_steps(steps)
        return True

    def _first_get(self) -> Trajectory:
        """The update's first micro-batch; raises `_AtBoundary` if a stop is requested meanwhile
        (re-checked at every poll of the wait, which goes on while rollout is busy)."""
        if self._stop_at_boundary.is_set():
            raise _AtBoundary
        try:
            return self.buffer.get(updates=self.counters.updates, abort=self._stop_at_boundary.is_set)
        except GetAborted:
            raise _AtBoundary from None

    def _micro_batches(self, lane: Lane, taken: list[Trajectory]) -> Iterator[Trajectory]:
        for i in range(self.cfg.require_batches):
            with lane.waiting("samples"):
                item = self._first_get() if i == 0 else self.buffer.get(updates=self.counters.updates)
            if self.sync_peers is not None:  # every process takes the same number of micro-batches
                with lane.waiting("peers"):
                    self.sync_peers(f"vlajax-trainer-{self.counters.updates}-{self._peer_syncs}")
                self._peer_syncs += 1
            taken.append(item)
            yield item

    def _stop_here(self) -> bool:
        """At an update boundary after an interrupt: save (in this lane, state not donated), stop."""
        self.interrupted_at = self.counters.updates
        if self._on_interrupt is not None:
            with self._state_lock:
                self._on_interrupt(self)
        self.lifetime.stop()
        return False

    def _trainer_body(self, lane: Lane) -> bool:
        if self.counters.updates >= self.num_updates:
            self.lifetime.stop()
            return False
        if self._stop_at_boundary.is_set():
            return self._stop_here()
        t0 = time.monotonic()
        try:
            with self._state_lock:
                self._update(lane)
        except _AtBoundary:
            return self._stop_here()
        dt = time.monotonic() - t0
        if self.first_update_s is None:
            self.first_update_s = dt
        else:
            self.max_update_s = max(self.max_update_s, dt)
        return True

    def _update(self, lane: Lane) -> None:
        taken: list[Trajectory] = []
        with self.update_scope(self) if self.update_scope is not None else contextlib.nullcontext():
            batches = self._micro_batches(lane, taken)
            if not self.cfg.streaming:
                batches = iter(list(batches))
            self.state, metrics = self.train_step(self.state, batches)
        # (short-circuit: `next` runs only when all were taken, so it never pulls an extra sample)
        if len(taken) != self.cfg.require_batches or next(batches, None) is not None:
            raise RuntimeError(f"train_step must consume exactly require_batches={self.cfg.require_batches} "
                               f"micro-batches, it took {len(taken)}")
        rejected = int(metrics.get("rejected", 0)) if isinstance(metrics, dict) else 0
        if rejected:
            self.timeline.record_rejected(rejected)
        version = self.buffer.trainer_version
        done = self.counters.updates
        stale_u = [done - u if (u := self.buffer.updates_at(t.version_min)) is not None else None for t in taken]
        self.counters.updates += 1
        record = {"update": self.counters.updates, "version": version,
                  "staleness": [version - t.version_min for t in taken], "staleness_updates": stale_u,
                  "span": [t.span for t in taken],
                  "env_steps": sum(t.env_steps for t in taken), "metrics": metrics}
        if self.counters.updates % self.cfg.trigger_parameter_sync_step == 0:
            self.counters.version += 1
            self.buffer.record_publish(self.counters.version, self.counters.updates)
            self.weights.publish(self.counters.version, self.get_params(self.state))
        self.history.append(record)
        if self.on_update is not None:
            self.on_update(self, record)

    # -- driving ----------------------------------------------------------------------------

    def drain_bound(self) -> float:
        """Seconds to wait for the trainer to reach its next update boundary: twice the longest
        measured update (the first, which compiles, only until a later one is measured; the
        watchdog's budget before any), plus `DRAIN_MARGIN_S`."""
        base = self.max_update_s or self.first_update_s or self.cfg.watchdog_s
        return DRAIN_MARGIN_S + 2.0 * base

    def request_stop(self) -> float:
        """Ask the trainer to stop at its next update boundary (it then calls `on_interrupt`).
        Returns the seconds to wait for it (`drain_bound`)."""
        self._stop_at_boundary.set()
        return self.drain_bound()

    def resume_counters(self) -> RunnerCounters:
        """The counters to checkpoint: `sample_calls` counts the rounds the trainer has consumed
        (one rollouter lane puts in order), not the rounds started, so samples produced but not
        yet trained on are produced again after a resume instead of being skipped. Call it from
        the trainer lane (`on_update` / `on_interrupt`) or inside `consistent`."""
        consumed = self.buffer.counters()["consumed"]
        return dataclasses.replace(self.counters, sample_calls=self._start_calls + consumed // self.samples_per_step)

    def consistent(self, fn: Callable[[AsyncRunner], Any]) -> Any:
        """`fn(self)` while no update is in progress: counters, state and buffer counters of one update."""
        with self._state_lock:
            return fn(self)

    def run(self, timeout: float | None = None, on_interrupt: Callable[[AsyncRunner], None] | None = None,
            stop: Callable[[], bool] | None = None) -> str:
        """Run until `num_updates` updates; 'done' or 'interrupted'.

        On SIGTERM / Ctrl-C the trainer finishes its update in progress, calls
        `on_interrupt(self)` in its own lane at that boundary (save a checkpoint there: state,
        counters and buffer are of that one update), and the run stops; the wait is bounded by
        `drain_bound()`. A second signal raises `RunAborted` at once (nothing saved). `stop`: a
        flag kept by the caller's signal handling (`LaneGroup.run`), polled instead of a handler;
        that caller (`vlajax.training.preemption`) exits at once on a second signal itself, so the update in
        flight is then waited for however long it takes (a bound measured on earlier updates fails
        a run whose next update is slower; a stuck trainer is the watchdog's, `LaneStalled`).
        """
        self._on_interrupt = on_interrupt
        drain = self.request_stop if stop is None else (lambda: (self.request_stop(), math.inf)[1])
        status = self.group.run(timeout=timeout, drain=drain, join_timeout=self.drain_bound, stop=stop)
        self.weights.install_pending()  # the last publication reaches the rollout side, lanes or not
        return status

    def summary(self, t0: float | None = None, t1: float | None = None) -> dict[str, float]:
        """Metrics over a window of the timeline plus the cumulative counters."""
        out = summarize(self.timeline, t0, t1)
        out.update({f"counters/{k}": float(v) for k, v in self.buffer.counters().items()})
        out["weights/superseded"] = float(self.weights.superseded)
        if self.weights.installed:
            out["weights/transfer_s_mean"] = self.weights.transfer_sum_s / self.weights.installed
            out["weights/transfer_s_max"] = self.weights.transfer_max_s
        return out


def run_sync(cfg: AsyncConfig, *, sample_step: SampleStep, train_step: TrainStep, get_params: Callable[[Any], Any],
             state: Any, num_updates: int, samples_per_step: int, mini_batch: int,
             counters: RunnerCounters | None = None, timeline: Timeline | None = None,
             on_update: Callable[[dict], None] | None = None) -> tuple[Any, list[dict]]:
    """The synchronous loop: collect W samples with version v -> `trigger` updates -> publish v+1.

    With a `timeline`, the trainer is recorded idle while rollout collects and the rollouter
    idle while the trainer updates (so sync runs report the same idle ratios as async ones).
    """
    window = _check_sizes(cfg, samples_per_step, mini_batch)
    c = dataclasses.replace(counters) if counters else RunnerCounters()
    tl = timeline or Timeline()
    tl.register("rollouter")
    tl.register("trainer")
    params = get_params(state)
    published_at = c.updates  # optimizer updates behind c.version
    history: collections.deque[dict] = collections.deque(maxlen=HISTORY)
    while c.updates < num_updates:
        items: list[Trajectory] = []
        tl.begin_idle("trainer", "samples")
        for _ in range(math.ceil(window / samples_per_step)):
            items.extend(sample_step(c.version, params, c.sample_calls))
            c.sample_calls += 1
        tl.end_idle("trainer")
        for it in items:
            tl.record_produced(it.num_samples)
        if steps := sum(it.env_steps for it in items):
            tl.record_env_steps(steps)
        queue = iter(items)
        tl.begin_idle("rollouter", "training")
        for _ in range(cfg.trigger_parameter_sync_step):
            if c.updates >= num_updates:
                break
            taken = [next(queue) for _ in range(cfg.require_batches)]
            for t in taken:
                tl.record_consumed(t.num_samples, c.version - t.version_min, t.span,
                                   staleness_updates=c.updates - published_at)
            state, metrics = train_step(state, iter(taken))
            record = {"update": c.updates + 1, "version": c.version,
                      "staleness": [c.version - t.version_min for t in taken],
                      "staleness_updates": [c.updates - published_at] * len(taken), "metrics": metrics}
            c.updates += 1
            history.append(record)
            if on_update is not None:
                on_update(record)
        c.version += 1
        published_at = c.updates
        params = get_params(state)
        tl.end_idle("rollouter")
    return state, list(history)
