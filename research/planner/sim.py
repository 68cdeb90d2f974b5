"""A discrete-event model (SimPy) of the pipeline `vlajax.pipeline` runs, fed with component costs.

    pipe = Pipeline(envs=16, horizon=8, steps_per_decision=2, mode="+partial_rollout", slots=4)
    out = simulate(pipe, costs, seed=0)      # {'env_steps_per_s', 'trainer_idle_ratio', ...}

What is modelled, piece for piece (the code it follows in brackets):

- **Devices** are processor-sharing servers (`_Shared`): k jobs on one device each progress at
  1/k of their solo speed (a GPU time-slicing the simulator, the generator and the trainer of a
  colocated placement; XLA programs interleaving on a CPU host). `placement`: `colocated` (every device rolls
  out its share of the envs and trains), `disaggregated r:t` (r/(r+t) of the devices roll out,
  the rest train), `hybrid r:t` (rollout on r/(r+t) of the devices, training on all of them).
  With `costs.shared_compute` (a CPU host: the "devices" are the same cores) all devices are
  one server. Training runs `costs.train_seconds(samples, T)` of work on each of its devices.
- **Env slots** [`pipeline.slots.SlotRollout`]: each rollout device's envs split into `slots`
  slots (1 in `sync` / `train_async`). A slot runs segments of `horizon` decisions: post its
  request, wait for the action, step. A step takes `max(simulator draw, in-process compute)`
  (the bench's latency model sleeps what is left after the real step [`pipeline.latency`]);
  the compute holds the slot's device when `costs.env_on_device`.
- **Generators** [`pipeline.scheduler.DynamicBatcher`]: one per rollout device (x `generators`);
  fire at `max_batch` requests (all slots of the generator), with `Pipeline.adaptive` (the lane's
  default) as soon as every *active* slot has posted -- a slot is active except while its admission
  blocks (pacing, a weight switch), as `slots.SlotRollout` (de)activates it -- or when the oldest
  waited `max_wait_s` (T_max with `adaptive`); an inference call holds the device for
  `costs.infer_seconds(rows)` (rows padded to the full batch with `costs.infer_padded`, as our
  slots' `infer` does).
- **Call variability** (`Pipeline.jitter`, off by default): a slot step's and an inference call's
  seconds x a factor drawn from the profile's timed calls of it (`costs.jitter`, mean 1), so slots
  that start together end apart and a short `max_wait_s` fires part of them.
- **Asynchronous dispatch** (`Pipeline.async_dispatch`, off by default) [`rl.async_workload` step]:
  a slot posts its next request once its step is dispatched (`costs.dispatch_s`; Python under
  the GIL, one slot at a time), the rest computing after it; a batch's inference waits for it.
- **Pacing** [`pipeline.buffer.TrajectoryBuffer`]: W = K x require_batches x samples per item;
  a segment may start under version v when reserved + its samples <= C(v) + floor((1+s) W);
  the trainer takes items of the current sync window only (window = reservation index // W).
- **Version gate** [`slots.VersionGate`] without partial rollout: a newly installed version is
  adopted only when no segment is in flight (slots stop starting segments meanwhile); with
  partial rollout each inference call uses the newest installed version.
- **Trainer** [`pipeline.runner.AsyncRunner`]: `require_batches` items per update; streaming
  prepares each item as it arrives, otherwise all at once; every K updates it publishes, and
  the new version is installed `costs.publish_seconds` later (the control-plane lane, off the
  trainer). An update's gradient synchronization (`costs.comm_seconds`, with `costs.comm`: ring
  all-reduces over the train GPUs' links, `plan.comm`) is a wall-clock wait after its compute that
  holds no device compute; without `costs.comm` it is `allreduce_s x log2 T` inside the compute
  and a publication costs the constant `sync_s`.
- **sync** [`pipeline.runner.run_sync`]: every rollout device collects its segment (one
  inference call over all its envs per decision), then the update, then the publication.
- **The production loops on a CPU host** (when `costs.collect_s` is given, what
  `python -m research.planner profile` measures): sync [`rl.loop.train`] is the fused collect
  [`rl.setup.collect`] -- per decision its compute, then its `costs.host_calls_per_decision`
  host simulator calls -- then the update (no preparation, no publication); train_async
  [`rl.async_loop._Collect`] is one rollouter lane that reserves a call's samples under the
  installed version and runs the same collect, the trainer updating on the prepared batch. A host
  simulator call of n envs (C MuJoCo in a host callback) holds the host for its real seconds and,
  under a farm law (`costs.sim`), lasts max(real, slowest of n per-env draws) [`c_physics`]; a
  slot's step is its other compute, then its host calls. Streaming with `costs.stream_item_s`:
  that work per arriving item, then `stream_finish_s`. The shared host has `costs.cores` cores
  shared max-min fairly; a job keeps busy, alone, `costs.cores_of(component)` cores. Concurrent
  slot steps (a step's compute and its host calls: group 'step') together advance at most at
  `costs.concurrency`'s measured rate in solo-speed units (`plan profile` runs them from one thread
  per slot, as the lanes do: Python's GIL serializes much of them), the cores they leave going
  to the other lanes.

Measured like the bench (`research.planner.sim_metrics`): from the end of the first (warm-up) update
(with `Pipeline.warmup` = K: of update K + 1) to the end of update `updates + 1`: env steps/s,
trainer idle, rollouter idle, staleness, inference batch.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from research.planner.costs import Costs
from research.planner.pipeline import MODES, PLACEMENTS, Pipeline
from research.planner.sharing import Shared as _Shared
from research.planner.sim_metrics import run_metrics

__all__ = ["MODES", "PLACEMENTS", "Pipeline", "simulate", "simulate_mean"]

class _Signal:
    """A broadcast condition: processes `yield sig.event` and re-check; `fire()` wakes them all."""

    def __init__(self, env: simpy.Environment):
        self.env, self.event = env, env.event()

    def fire(self) -> None:
        old, self.event = self.event, self.env.event()
        old.succeed()


class _Run:
    def __init__(self, p: Pipeline, costs: Costs, seed: int):
        self.p, self.c = p, costs
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(seed)
        self.jitter_rng = np.random.default_rng([seed, 1])  # its own stream: the farm's draws stay as they were
        caps = dict(costs.concurrency)
        opts = dict(fifo=p.fifo_steps, group_cores=p.group_cores)
        shared = _Shared(self.env, costs.cores, caps, **opts) if costs.shared_compute else None
        self.dev = [shared or _Shared(self.env, caps=caps, **opts) for _ in range(p.devices)]
        self.R = p.rollout_devices
        self.per_slot = p.envs // (self.R * p.num_slots)
        self.rb = self.R * p.num_slots  # require_batches: one item per slot segment
        self.W = p.trigger * self.rb * self.per_slot  # sync window (samples)
        self.budget = math.floor((1 + p.staleness) * self.W)
        self.total_updates = p.updates + 1
        # state
        self.version = 0  # newest published
        self.installed = 0  # newest installed on the rollout side
        self.consumed = self.reserved = 0
        self.consumed_at = {0: 0}
        self.updates = 0
        self.items: list[dict] = []  # produced, not yet consumed
        self.changed = _Signal(self.env)
        self.gate_current, self.inflight = 0, 0
        # records
        self.env_steps: list[tuple[float, int]] = []
        self.update_ends: list[float] = []
        self.idle: dict[str, list[tuple[float, float]]] = {}
        self.consumed_log: list[tuple[float, int]] = []  # (time, staleness)
        self.batches: list[int] = []
        self.done = self.env.event()
        # sync / train_async roll out through the fused collect when its cost is given (the production loops)
        self.collect_path = bool(costs.collect_s) and not p.slot_modes
        if p.async_dispatch and p.slot_modes and costs.dispatch_seconds("step") <= 0:
            raise ValueError("async_dispatch needs the slot step's dispatch seconds (costs.dispatch_s 'step')")
        self.gil = simpy.Resource(self.env, capacity=1)  # Python's GIL: one thread dispatches at a time

    # -- helpers ----------------------------------------------------------------------------

    def _idle(self, lane: str, t0: float) -> None:
        if self.env.now > t0:
            self.idle.setdefault(lane, []).append((t0, self.env.now))

    def _hold(self, devices, seconds: float, component: str = "", group: str | None = None):
        """`seconds` of solo work on each distinct device of `devices` (data parallel); waits for all.
        `component`: whose parallelism (`costs.cores_of`) the work has on a shared host; `group`: the
        jobs whose concurrency `costs.concurrency` caps together (see `_Shared`)."""
        cores = self.c.cores_of(component) if component else 1.0
        yield self.env.all_of([d.run(seconds, cores, group) for d in dict.fromkeys(devices)])

    def _factor(self, component: str) -> float:
        """A call's seconds multiplier: 1, or with `Pipeline.jitter` one of the component's measured factors."""
        factors = self.c.jitter_factors(component) if self.p.jitter else ()
        return float(factors[self.jitter_rng.integers(len(factors))]) if factors else 1.0

    def _host_calls(self, device: int, n: int, group: str | None = None, factor: float = 1.0):
        """The host simulator calls of one decision of n envs: each holds the host for its real
        seconds (x `factor`: a slot step's draw), and under a farm (`costs.sim`) lasts max(real, the
        slowest of n per-env draws). `group`: 'step' for a slot's step (its calls share the slot steps'
        concurrency cap)."""
        for _ in range(round(self.c.host_calls_per_decision)):
            t0 = self.env.now
            real = self.c.host_sim_seconds(n) * factor
            if real > 0:
                yield from self._hold([self.dev[device]], real, "host_sim", group)
            left = self.c.sim.batch_seconds(self.rng, n, 1) - (self.env.now - t0)
            if left > 0:
                yield self.env.timeout(left)

    def _collect(self, device: int, n: int):
        """One fused collect call over n envs (`rl.setup.collect`): per decision its share of the
        call's compute, then its host simulator calls (none with MJX)."""
        per_decision = self.c.collect_seconds(n) / self.p.horizon
        for _ in range(self.p.horizon):
            yield from self._hold([self.dev[device]], per_decision, "collect")
            yield from self._host_calls(device, n)
            self.env_steps.append((self.env.now, n * self.p.steps_per_decision))

    def _dispatch(self, device: int):
        """`Pipeline.async_dispatch`: a slot step's dispatch -- Python, so under the GIL (one thread at a
        time) and on one core of the host: `costs.dispatch_seconds('step')` x a drawn factor (`Pipeline.jitter`)."""
        with self.gil.request() as turn:
            yield turn
            yield from self._hold([self.dev[device]], self.c.dispatch_seconds("step") * self._factor("step_dispatch"),
                                  "dispatch")

    def _step_env(self, device: int, n: int, dispatched: float = 0.0):
        """One chunk call of n envs: max(simulator draw, in-process compute incl. waiting for the device);
        with host simulator calls: the call's other compute, then each host call (see `_host_calls`).
        With `Pipeline.jitter` the compute (host calls included) is x one drawn factor of the step's.
        `dispatched`: seconds of the compute already done in its dispatch (`_dispatch`), not held again: taken
        off the other compute first, then off the host calls (C MuJoCo's run inline within the dispatch)."""
        factor = self._factor("step")
        if self.c.host_calls_per_decision > 0:
            host = round(self.c.host_calls_per_decision) * self.c.host_sim_seconds(n)
            rest = self.c.env_compute_seconds(n) - host - dispatched
            host_share = 1.0 if rest >= 0 or host <= 0 else max(host + rest, 0.0) / host
            if rest > 0:
                yield from self._hold([self.dev[device]], rest * factor, "step", "step")
            yield from self._host_calls(device, n, "step", factor * host_share)
            self.env_steps.append((self.env.now, n * self.p.steps_per_decision))
            return
        t0 = self.env.now
        draw = self.c.sim.batch_seconds(self.rng, n, self.p.steps_per_decision)
        compute = max(self.c.env_compute_seconds(n) - dispatched, 0.0) * factor
        if compute > 0:
            if self.c.env_on_device:
                yield from self._hold([self.dev[device]], compute, "step", "step")
            else:
                yield self.env.timeout(compute)
        left = draw - (self.env.now - t0)
        if left > 0:
            yield self.env.timeout(left)
        self.env_steps.append((self.env.now, n * self.p.steps_per_decision))

    def _train(self, samples: int):
        devs = [self.dev[i] for i in self.p.train_devices]
        yield from self._hold(devs, self.c.train_seconds(samples, len(self.p.train_devices)), "train")
        yield from self._sync_gradients(samples)

    def _sync_gradients(self, samples: int):
        """The update's gradient synchronization over the train GPUs' links (0 without `costs.comm`)."""
        comm = self.c.comm_seconds(samples, self.p.train_devices)
        if comm > 0:
            yield self.env.timeout(comm)

    def _prep(self, samples: int):
        if self.c.prep_s_per_sample > 0:
            devs = [self.dev[i] for i in self.p.train_devices]
            yield from self._hold(devs, self.c.prep_s_per_sample * samples, "prep")

    def _finish_update(self):
        self.updates += 1
        self.update_ends.append(self.env.now)
        if self.updates % self.p.trigger == 0:
            self.version += 1
            self.consumed_at[self.version] = self.consumed
            self.env.process(self._publish(self.version))
        if self.updates >= self.total_updates and not self.done.triggered:
            self.done.succeed()
        self.changed.fire()

    def _publish_seconds(self) -> float:
        return self.c.publish_seconds(self.p.train_devices, tuple(range(self.R)))

    def _publish(self, version: int):
        yield self.env.timeout(self._publish_seconds())
        if version > self.installed:
            self.installed = version
            self.changed.fire()

    # -- synchronous ------------------------------------------------------------------------

    def sync(self):
        p, per_dev = self.p, self.p.envs // self.R
        decisions = p.envs * p.horizon  # per update
        while self.updates < self.total_updates:
            t0 = self.env.now
            if self.collect_path:  # rl.loop.train: the fused collect, then the update (no publication)
                procs = [self.env.process(self._collect(d, per_dev)) for d in range(self.R) for _ in range(p.trigger)]
            else:
                yield self.env.timeout(self._publish_seconds())  # weights onto the rollout devices
                procs = [self.env.process(self._sync_collect(d, per_dev)) for d in range(self.R)]
            yield self.env.all_of(procs)
            self._idle("trainer", t0)
            t1 = self.env.now
            for _ in range(p.trigger):
                if not self.collect_path:  # collect returns the learner batch prepared
                    yield from self._prep(decisions)
                yield from self._train(decisions)
                self.consumed += p.envs
                self.consumed_log.append((self.env.now, 0))
                self._finish_update()
            self.installed = self.version
            self._idle("rollouter/d0", t1)

    def _sync_collect(self, d: int, n: int):
        for _ in range(self.p.horizon * self.p.trigger):
            yield from self._hold([self.dev[d]], self.c.infer_seconds(n) * self._factor("infer"), "infer")
            self.batches.append(1)
            yield from self._step_env(d, n)

    # -- asynchronous -----------------------------------------------------------------------

    def _allowance(self, version: int) -> int:
        return self.consumed_at[version] + self.budget - self.reserved

    def collect_lane(self, d: int):
        """train_async in the async loop (`pipeline.num_slots == 1`): the runner's rollouter lane
        reserves a call's samples under the installed version (`TrajectoryBuffer.reserve`), then
        runs the fused collect with the newest weights; the item is the learner batch, prepared."""
        lane, n = f"rollouter/d{d}s0", self.per_slot
        while True:
            t0 = self.env.now
            while self._allowance(self.installed) < n:
                yield self.changed.event
            self._idle(lane, t0)
            version, start = self.installed, self.reserved
            self.reserved += n
            yield from self._collect(d, n)
            self.items.append({"window": start // self.W, "samples": n, "version_min": version})
            self.changed.fire()

    def slot(self, d: int, s: int, queue: list, wake: _Signal, active: set):
        p, lane = self.p, f"rollouter/d{d}s{s}"
        n = self.per_slot

        def away():  # admission blocks: the generator stops waiting for this slot (adaptive)
            if s in active:
                active.discard(s)
                wake.fire()

        while True:
            while True:  # admission under the version this segment starts with
                if not p.partial:
                    t0 = self.env.now
                    while self.installed > self.gate_current and self.inflight > 0:
                        away()
                        yield self.changed.event
                    self._idle(lane, t0)
                    self.gate_current = max(self.gate_current, self.installed)
                    self.inflight += 1
                    version = self.gate_current
                else:
                    version = self.installed
                t0 = self.env.now
                while self._allowance(version) < n and self.installed <= version:
                    away()
                    yield self.changed.event
                self._idle(lane, t0)
                if self._allowance(version) >= n:
                    start = self.reserved
                    self.reserved += n
                    break
                if not p.partial:
                    self.inflight -= 1
                    self.changed.fire()
            active.add(s)
            versions, computed = [], None  # computed: the last dispatched step's compute (async_dispatch)
            for _ in range(p.horizon):
                reply = self.env.event()
                queue.append((self.env.now, reply, computed, s))
                wake.fire()
                v = yield reply
                versions.append(v)
                if p.async_dispatch:  # the request after this step is posted once it is dispatched
                    yield from self._dispatch(d)
                    computed = self.env.process(self._step_env(d, n, self.c.dispatch_seconds("step")))
                else:
                    yield from self._step_env(d, n)
            if computed is not None:  # the segment's records are read on the host: every step computed
                yield computed
            if not p.partial:
                self.inflight -= 1
            self.items.append({"window": start // self.W, "samples": n, "version_min": min(versions)})
            self.changed.fire()

    def generator(self, d: int, queue: list, wake: _Signal, active: set):
        p = self.p
        max_batch = p.max_batch or -(-p.num_slots // p.generators)
        while True:
            while not queue:
                yield wake.event
            while len(queue) < max_batch and not (p.adaptive and active <= {r[3] for r in queue}):
                left = queue[0][0] + p.max_wait_s - self.env.now
                if left <= 0:
                    break
                yield self.env.any_of([wake.event, self.env.timeout(left)])
            batch, queue[:] = queue[:max_batch], queue[max_batch:]
            rows = (max_batch if self.c.infer_padded else len(batch)) * self.per_slot
            version = self.installed if p.partial else self.gate_current
            inputs = [c for _, _, c, _ in batch if c is not None]  # async_dispatch: the batch's steps computed
            if inputs:
                yield self.env.all_of(inputs)
            yield from self._hold([self.dev[d]], self.c.infer_seconds(rows) * self._factor("infer"), "infer")
            self.batches.append(len(batch))
            for _, reply, _, _ in batch:
                reply.succeed(version)

    def trainer(self):
        p = self.p
        while self.updates < self.total_updates:
            window = self.updates // p.trigger
            taken = 0
            for _ in range(self.rb):
                t0 = self.env.now
                while not any(it["window"] == window for it in self.items):
                    yield self.changed.event
                self._idle("trainer", t0)
                it = next(it for it in self.items if it["window"] == window)
                self.items.remove(it)
                self.consumed += it["samples"]
                taken += it["samples"]
                self.consumed_log.append((self.env.now, self.version - it["version_min"]))
                self.changed.fire()
                if p.streaming and self.c.stream_item_s > 0:  # preparation + gradient on arrival
                    devs = [self.dev[i] for i in p.train_devices]
                    yield from self._hold(devs, self.c.stream_item_s, "stream_item")
                elif p.streaming:
                    yield from self._prep(it["samples"] * p.horizon)
            decisions = taken * p.horizon
            if p.streaming and self.c.stream_item_s > 0:  # the summed gradient applied
                devs = [self.dev[i] for i in p.train_devices]
                yield from self._hold(devs, self.c.stream_finish_s, "train")
                yield from self._sync_gradients(decisions)
            else:
                if not p.streaming and not self.collect_path:
                    yield from self._prep(decisions)
                yield from self._train(decisions)
            self._finish_update()

    # -- run --------------------------------------------------------------------------------

    def run(self) -> dict:
        p = self.p
        if p.mode == "sync":
            self.env.process(self.sync())
        elif self.collect_path:
            for d in range(self.R):
                self.env.process(self.collect_lane(d))
            self.env.process(self.trainer())
        else:
            for d in range(self.R):
                for g in range(p.generators):
                    queue, wake = [], _Signal(self.env)
                    mine = range(g, p.num_slots, p.generators)
                    active = set(mine)  # every slot is expected from the start (adaptive)
                    for s in mine:
                        self.env.process(self.slot(d, s, queue, wake, active))
                    self.env.process(self.generator(d, queue, wake, active))
            self.env.process(self.trainer())
        self.env.run(until=self.done)
        return run_metrics(p, self.R, self.update_ends, self.env_steps, self.idle, self.consumed_log, self.batches)


def simulate(p: Pipeline, costs: Costs, seed: int = 0) -> dict:
    """One simulated run of `p` with `costs` (see the module docstring). -> metrics dict."""
    return _Run(p, costs, seed).run()


def simulate_mean(p: Pipeline, costs: Costs, seeds: int = 5) -> dict:
    """Mean of each metric over `seeds` runs (the simulator's random draws differ by seed)."""
    runs = [simulate(p, costs, s) for s in range(seeds)]
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
