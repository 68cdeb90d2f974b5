"""Rollout async (RL-VLA3): env slots post requests, a dynamic batching scheduler fires inference.

Env slots call `submit(slot, payload)` as soon as they have stepped and then wait on the
returned `Request`. A generator lane calls `next_batch()`, which returns the oldest waiting
requests (arrival order) as soon as either

- `max_batch` requests are waiting (trigger "full"), or
- with `adaptive`, every *active* slot has a request waiting (trigger "all"): slots register as
  active (`activate(slot)`) while they have an episode segment in flight and leave
  (`deactivate(slot)`) only while they are blocked outside the rollout (pacing, a weight
  switch), so slots that step in lockstep are one batch however long their steps take, or
- the oldest request has waited `max_wait_s` (trigger "wait"; with `adaptive` this is T_max,
  the bound on how long a slow active slot can hold the others back),

runs inference on their payloads and hands every slot its result. Each fired batch's size is
recorded in the timeline (`inference/batch_*` metrics) and the trigger counts are kept.
`Router` spreads slots over several batchers (fine-grained env sharding: one batcher per
generator; `route(slot) -> generator index`, default `slot % n`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vlajax.pipeline.lanes import Lane, Lifetime, PipelineStopped, PipelineTimeout
from vlajax.pipeline.metrics import Timeline

__all__ = ["Request", "DynamicBatcher", "Router"]

_POLL_S = 0.05
RECENT = 10_000  # per-batch records kept (older ones live on in `batch_hist`)


class Request:
    """One slot's observation waiting for its action. `wait()` returns the inference result."""

    __slots__ = ("slot", "payload", "submitted", "fired", "_done", "_result", "_error")

    def __init__(self, slot: int, payload: Any):
        self.slot, self.payload = slot, payload
        self.submitted = time.monotonic()
        self.fired: float | None = None
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    def set_result(self, result: Any) -> None:
        self._result = result
        self._done.set()

    def set_error(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def wait(self, timeout: float, lifetime: Lifetime | None = None) -> Any:
        """The result; raises `PipelineTimeout` after `timeout` s, `PipelineStopped` on stop."""
        deadline = time.monotonic() + timeout
        while not self._done.wait(min(_POLL_S, max(deadline - time.monotonic(), 0.0))):
            if lifetime is not None and lifetime.stopped:
                raise PipelineStopped(f"stopped while slot {self.slot} waited for inference")
            if time.monotonic() >= deadline:
                if lifetime is not None and lifetime.busy_elsewhere(timeout):  # a generator works: slow, not stuck
                    deadline = time.monotonic() + timeout
                    continue
                raise PipelineTimeout(f"slot {self.slot} waited {timeout:.3g} s for inference")
        if self._error is not None:
            raise self._error
        return self._result


class DynamicBatcher:
    """Request queue + the (max_batch, max_wait_s) firing rule of one generator."""

    def __init__(self, max_batch: int, max_wait_s: float, *, lifetime: Lifetime | None = None,
                 timeline: Timeline | None = None, adaptive: bool = False):
        if max_batch < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch={max_batch} must be >= 1 and max_wait_s={max_wait_s} >= 0")
        self.max_batch, self.max_wait_s, self.adaptive = max_batch, max_wait_s, adaptive
        self._active: set[int] = set()  # the slots whose next request is expected (the "all" trigger if adaptive)
        self._tracked = False  # some slot has called activate(): batches record the active count
        self.active_at_fire: collections.deque[int] = collections.deque(maxlen=RECENT)  # active slots per batch
        self.lifetime = lifetime or Lifetime()
        self.timeline = timeline or Timeline()
        self._cond = threading.Condition()
        self._queue: collections.deque[Request] = collections.deque()
        self.triggers = collections.Counter()  # 'full' / 'all' / 'wait' -> batches fired
        self.batch_sizes: collections.deque[int] = collections.deque(maxlen=RECENT)  # the newest fired sizes
        self.batch_hist = collections.Counter()  # batch size -> batches fired, since the start (<= max_batch keys)

    def submit(self, slot: int, payload: Any) -> Request:
        req = Request(slot, payload)
        with self._cond:
            self._queue.append(req)
            self._cond.notify_all()
        return req

    def activate(self, slot: int) -> None:
        """`slot` has an episode segment in flight: a batch waits for its request (adaptive)."""
        with self._cond:
            self._active.add(slot)
            self._tracked = True

    def deactivate(self, slot: int) -> None:
        """`slot` is blocked outside the rollout (pacing, weights): batches stop waiting for it."""
        with self._cond:
            self._active.discard(slot)
            self._cond.notify_all()  # the slots already waiting may be all that is left

    @property
    def active(self) -> int:
        with self._cond:
            return len(self._active)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def _ready(self, now: float) -> str | None:
        if len(self._queue) >= self.max_batch:
            return "full"
        if self.adaptive and self._queue and self._active <= {r.slot for r in self._queue}:
            return "all"
        if self._queue and now - self._queue[0].submitted >= self.max_wait_s:
            return "wait"
        return None

    def next_batch(self, timeout: float) -> list[Request]:
        """The next batch to run (oldest first, at most max_batch); [] if none fired in `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                trigger = self._ready(now)
                if trigger is not None:
                    break
                if self.lifetime.stopped:
                    raise PipelineStopped("stopped while the scheduler waited for requests")
                left = deadline - now
                if left <= 0:
                    return []
                if self._queue:  # sleep exactly until the oldest request's deadline
                    left = min(left, self._queue[0].submitted + self.max_wait_s - now)
                self._cond.wait(max(min(left, _POLL_S), 0.0))
            batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
            active = len(self._active) if self._tracked else None
        fired = time.monotonic()
        for r in batch:
            r.fired = fired
        self.triggers[trigger] += 1
        if active is not None:
            self.active_at_fire.append(active)
        self.batch_sizes.append(len(batch))
        self.batch_hist[len(batch)] += 1
        self.timeline.record_batch(len(batch), active=active)
        return batch

    def serve(self, infer: Callable[[list[Any]], Sequence[Any]], lane: Lane | None = None,
              poll_s: float = _POLL_S) -> int:
        """One generator iteration: wait for a batch, run `infer(payloads) -> results`, answer.

        Returns the batch size (0 if nothing fired within `poll_s`). An inference error is
        given to every waiting slot of the batch and re-raised here.
        """
        if lane is not None:
            with lane.waiting("requests"):
                batch = self.next_batch(poll_s)
        else:
            batch = self.next_batch(poll_s)
        if not batch:
            return 0
        try:
            results = infer([r.payload for r in batch])
            if len(results) != len(batch):
                raise ValueError(f"infer returned {len(results)} results for a batch of {len(batch)}")
        except BaseException as e:
            for r in batch:
                r.set_error(e)
            raise
        for r, res in zip(batch, results):
            r.set_result(res)
        return len(batch)


class Router:
    """Fine-grained env sharding: route each slot's requests to one of several batchers."""

    def __init__(self, batchers: Sequence[DynamicBatcher], route: Callable[[int], int] | None = None):
        self.batchers = list(batchers)
        self.route = route or (lambda slot: slot % len(self.batchers))

    def submit(self, slot: int, payload: Any) -> Request:
        return self.batchers[self.route(slot)].submit(slot, payload)
