"""Env slots + generators: rollout async (RL-VLA3) on top of the dynamic batcher.

The envs are split into `num_slots` slots. Each slot is a lane that runs *segments* of
`horizon` decisions: it posts its observation to the request queue as soon as it has stepped,
waits for its action, steps, and after `horizon` decisions puts one `Trajectory` (one
micro-batch of `samples_per_slot` samples) into the buffer. Generator lanes (one per batcher,
`num_generators`; slots are routed `slot % num_generators`) fire inference on `max_batch`
waiting requests or when the oldest waited `max_wait_ms`.

Weights. With `partial_rollout`, a generator takes the newest installed weights before every
inference call, so a segment in flight continues under new weights (its versions mix). Without,
a `VersionGate` adopts a new version only when no segment is in flight: slots stop starting
segments while an update is pending, the ones in flight finish under their version (verl's
"wait for active tasks"), then everyone switches. Pacing: a slot reserves its samples *for the
version it will start under*; when that version's budget is spent it releases the gate and
waits for a change (a publication or consumption), never discarding work.

Adaptive batching (`adaptive_batching`, the default): a slot is *active* in its batcher from the
start and leaves only while its admission (pacing, a weight switch) actually blocks; a batch fires
as soon as every active slot has posted (or at `max_wait_ms`, T_max, or at `max_batch`). Slots that
step in lockstep are then one forward per decision, as in the synchronous loop, however long their
steps take; `inference/batch_over_active` says how close the batches came to that.

Env callables (stand-ins in the tests; the real suite plugs in the same way):
- `reset(slot) -> (env_state, obs)`,
- `step(slot, env_state, policy_out) -> (env_state, obs, record)`, `record` a pytree kept per
  decision (reward, done, log-prob, ...),
- `infer(params, [obs, ...]) -> [policy_out, ...]`: the batched policy (one list entry per slot).
`sample_step` is the same slots stepped in lock step with one inference call per decision: the
synchronous baseline with identical numerics when there is one slot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from vlajax.config.schema import AsyncConfig
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import Lane
from vlajax.pipeline.scheduler import DynamicBatcher, Router

__all__ = ["SlotRollout", "VersionGate"]


class VersionGate:
    """The weights every generator uses when partial rollout is off; switches between segments only."""

    def __init__(self, weights, lifetime, timeout_s: float):
        self.weights, self.lifetime, self.timeout_s = weights, lifetime, timeout_s
        self._cond = threading.Condition()
        self.current: tuple[int, Any] = weights.latest()
        self.inflight = 0
        weights.on_install(lambda _: self._notify())

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _newer(self) -> bool:
        return self.weights.version > self.current[0]

    def begin(self, on_block: Callable[[], None] | None = None) -> int:
        """Start a segment; waits while an update drains (calling `on_block()` first if it must wait).
        Returns the segment's version."""
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: not self._newer() or self.inflight == 0,
                                     self.timeout_s, "segments in flight to finish before a weight switch", on_block)
            if self._newer():
                self.current = self.weights.latest()
            self.inflight += 1
            return self.current[0]

    def end(self) -> None:
        with self._cond:
            self.inflight -= 1
            self._cond.notify_all()


def _stack(records: list[Any]) -> Any:
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *records)


class SlotRollout:
    """Slots and generators as lanes of an `AsyncRunner` (pass `rollout=slot_rollout.lanes`)."""

    def __init__(self, cfg: AsyncConfig, *, reset: Callable, step: Callable, infer: Callable, horizon: int,
                 samples_per_slot: int, env_steps_per_decision: int | None = None):
        self.cfg = cfg
        self.reset, self.step, self.infer = reset, step, infer
        self.horizon, self.samples_per_slot = horizon, samples_per_slot
        self.env_steps_per_decision = samples_per_slot if env_steps_per_decision is None else env_steps_per_decision
        self.max_batch = cfg.max_batch or -(-cfg.num_slots // cfg.num_generators)
        self._env: dict[int, tuple[Any, Any]] = {}  # slot -> (env_state, obs), carried across segments
        self.segments = 0

    def _env_of(self, slot: int) -> tuple[Any, Any]:
        if slot not in self._env:
            self._env[slot] = self.reset(slot)
        return self._env[slot]

    # -- asynchronous: lanes -----------------------------------------------------------------

    def lanes(self, runner) -> list[tuple[str, Callable[[Lane], bool | None]]]:
        cfg = self.cfg
        batchers = [DynamicBatcher(self.max_batch, cfg.max_wait_ms / 1e3, lifetime=runner.lifetime,
                                   timeline=runner.timeline, adaptive=cfg.adaptive_batching)
                    for _ in range(cfg.num_generators)]
        self.batchers = batchers
        router = Router(batchers)
        for s in range(cfg.num_slots):  # every slot is expected from the start (it resets, then posts)
            batchers[router.route(s)].activate(s)
        gate = None if cfg.partial_rollout else VersionGate(runner.weights, runner.lifetime, cfg.queue_timeout_s)
        buffer, weights, timeout = runner.buffer, runner.weights, cfg.queue_timeout_s

        def generator(g: int):
            def run(payloads):  # the weights are read once the batch has fired
                version, params = gate.current if gate is not None else weights.latest()
                return [(version, out) for out in self.infer(params, payloads)]

            def body(lane: Lane) -> bool:
                batchers[g].serve(run, lane)
                return True
            return body

        def slot(s: int):
            batcher = batchers[router.route(s)]
            away = lambda: batcher.deactivate(s)  # admission blocks: batches stop waiting for this slot

            def body(lane: Lane) -> bool:
                while True:  # admission for the version this segment starts under
                    if gate is not None:
                        with lane.waiting("weights"):  # a pending switch drains segments in flight
                            version = gate.begin(away)
                    else:
                        version = weights.version
                    with lane.waiting("pacing"):
                        ticket = buffer.reserve_for(self.samples_per_slot, version, timeout, away)
                    if ticket is not None:
                        break
                    if gate is not None:  # newer weights arrived: start again under them
                        gate.end()
                batcher.activate(s)
                try:
                    env_state, obs = self._env_of(s)
                    records, versions = [], []
                    for _ in range(self.horizon):
                        req = router.submit(s, obs)
                        with lane.waiting("inference"):
                            v, out = req.wait(timeout, runner.lifetime)
                        env_state, obs, rec = self.step(s, env_state, out)
                        records.append(rec)
                        versions.append(v)
                        runner.timeline.record_env_steps(self.env_steps_per_decision)
                    self._env[s] = (env_state, obs)
                finally:
                    if gate is not None:
                        gate.end()
                item = Trajectory(_stack(records), np.asarray(versions), self.samples_per_slot,
                                  self.horizon * self.env_steps_per_decision)
                buffer.put(item, ticket)
                self.segments += 1
                return True
            return body

        out = [(f"rollouter/slot{s}", slot(s)) for s in range(cfg.num_slots)]
        out += [(f"generator{g}", generator(g)) for g in range(cfg.num_generators)]
        return out

    # -- synchronous: the same slots in lock step ------------------------------------------

    def sample_step(self, version: int, params: Any, call: int) -> list[Trajectory]:
        """One segment of every slot, one inference call over all slots per decision."""
        slots = range(self.cfg.num_slots)
        envs = {s: self._env_of(s) for s in slots}
        records: dict[int, list] = {s: [] for s in slots}
        for _ in range(self.horizon):
            outs = self.infer(params, [envs[s][1] for s in slots])
            for s, out in zip(slots, outs):
                env_state, obs, rec = self.step(s, envs[s][0], out)
                envs[s] = (env_state, obs)
                records[s].append(rec)
        self._env.update(envs)
        self.segments += len(slots)
        return [Trajectory(_stack(records[s]), np.full((self.horizon,), version), self.samples_per_slot,
                           self.horizon * self.env_steps_per_decision) for s in slots]
