"""The staleness-tagged trajectory buffer (the data plane) with verl's pacing admission.

Every item is a `Trajectory`: a pytree of host or device arrays plus the policy versions that
produced it (one per decision; several when a partial rollout crossed a weight update).

Pacing (verl fully-async, ALGORITHMS.md "Asynchrony knobs"). Let
`W = trigger_parameter_sync_step * require_batches * mini_batch` be the samples the trainer
consumes between two weight publications (one sync window). Between two publications rollout
may *start* at most `(1 + staleness_threshold) * W - num_stale` samples, where `num_stale` are
the samples already produced (or in flight) beyond what the trainer had consumed when it
published. Equivalently, with `C(v)` the samples consumed when version v was published,
rollout may have reserved in total at most `C(v) + floor((1 + staleness_threshold) * W)`
samples when it starts samples under version v. Rollout *reserves* samples before producing
them (`reserve` / `reserve_for` return a `Ticket`), waiting with a timeout when the budget is
spent; nothing is ever discarded.

Order. Reserved sample number i (cumulative) belongs to sync window `i // W`. The trainer
takes items in the order they were put (so fast env slots are not held behind slow ones),
but only items of the current window: an item reserved for a later window waits until the
current window is complete. Every window therefore holds exactly the samples reserved for it,
and a sample reserved under version v (i < C(v) + (1 + s) W) is consumed at a trainer version
of at most `v + ceil(staleness_threshold)`: that is the staleness bound, for partial rollouts
too (their decisions only get newer). With one producer this is plain FIFO.

Staleness of a consumed item = the trainer's published version when it takes the item minus
the oldest version in the item.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vlajax.pipeline.lanes import Lifetime
from vlajax.pipeline.metrics import Timeline

__all__ = ["GetAborted", "Ticket", "Trajectory", "TrajectoryBuffer", "window_samples"]


class GetAborted(Exception):
    """`TrajectoryBuffer.get` gave up because its `abort` flag turned True (e.g. a stop request)."""

KEEP_VERSIONS = 16  # published versions remembered below the installed one (a slot may still hold one)


@dataclasses.dataclass
class Trajectory:
    """One unit on the data plane.

    data: pytree of arrays, e.g. `[T, B, ...]` decisions x envs; versions: int array (any
    shape, e.g. `[T]` or `[T, B]`) of the policy version that produced each decision;
    num_samples: samples this item counts for in pacing (e.g. B trajectories); env_steps:
    low-level env transitions it holds (for env steps/s).
    """

    data: Any
    versions: Any
    num_samples: int = 1
    env_steps: int = 0
    produced_at: float = dataclasses.field(default_factory=time.monotonic)
    version_min: int = dataclasses.field(init=False)
    version_max: int = dataclasses.field(init=False)

    def __post_init__(self):
        v = np.asarray(self.versions)
        if v.size == 0:
            raise ValueError("Trajectory.versions is empty: every decision must carry its policy version")
        self.version_min, self.version_max = int(v.min()), int(v.max())

    @property
    def span(self) -> int:
        """Newest minus oldest policy version inside this item (0 unless a partial rollout)."""
        return self.version_max - self.version_min


@dataclasses.dataclass(eq=False)
class Ticket:
    """A reservation of `samples` samples under `version`: cumulative indices [first, first + samples)."""

    version: int
    first_index: int
    samples: int
    next_index: int = -1

    def __post_init__(self):
        if self.next_index < 0:
            self.next_index = self.first_index

    @property
    def remaining(self) -> int:
        return self.first_index + self.samples - self.next_index


def window_samples(trigger_parameter_sync_step: int, require_batches: int, mini_batch: int) -> int:
    """W: samples the trainer consumes between two weight publications."""
    return trigger_parameter_sync_step * require_batches * mini_batch


class TrajectoryBuffer:
    """Queue of `Trajectory` in host memory with pacing admission and staleness counters.

    Rollout: `ticket = reserve(n)` -> produce -> `put(item, ticket)`. Control plane:
    `set_rollout_version(v)` once version v's weights are usable by rollout. Trainer: `get()`
    (completion order within the current sync window), and `record_publish(v)` when it
    publishes version v. window: W samples per publication.
    """

    def __init__(self, window: int, staleness_threshold: float, *, timeout_s: float = 120.0,
                 lifetime: Lifetime | None = None, timeline: Timeline | None = None, version: int = 0,
                 updates: int = 0):
        if window < 1 or staleness_threshold < 0:
            raise ValueError(f"window={window} must be >= 1 and staleness_threshold={staleness_threshold} >= 0")
        self.window = window
        self.staleness_threshold = staleness_threshold
        self.budget = math.floor((1 + staleness_threshold) * window + 1e-9)
        self.max_staleness = math.ceil(staleness_threshold - 1e-9)
        self.timeout_s = timeout_s
        self.lifetime = lifetime or Lifetime()
        self.timeline = timeline or Timeline()
        self._cond = threading.Condition()
        self._items: list[tuple[int, Trajectory]] = []  # (sync window it belongs to, item), put order
        self._outstanding: list[Ticket] = []  # reservations not yet fully put
        # Cumulative counters (samples).
        self.reserved = 0
        self.produced = 0
        self.consumed = 0
        self.stale_consumed = 0  # samples consumed with staleness > 0
        self.max_seen_staleness = 0
        self.deferred = 0  # gets that passed over queued items reserved for a later window
        # version -> samples consumed when it was published (a resumed run starts at `version`);
        # versions older than the installed one by more than KEEP_VERSIONS are forgotten.
        self._consumed_at: dict[int, int] = {version: 0}
        self._updates_at: dict[int, int] = {version: updates}  # version -> optimizer updates behind it
        self._oldest = version
        self.rollout_version = version
        self.trainer_version = version

    # -- rollout side -------------------------------------------------------------------

    def allowance(self) -> int:
        """Samples rollout may still reserve under the installed version."""
        with self._cond:
            return self._allowance(self.rollout_version)

    def _allowance(self, version: int) -> int:
        return self._consumed_at[version] + self.budget - self.reserved

    def _issue(self, n: int, version: int) -> Ticket:
        ticket = Ticket(version, self.reserved, n)
        self.reserved += n
        self._outstanding.append(ticket)
        return ticket

    def reserve(self, n: int, timeout: float | None = None, what: str = "the trainer to publish new weights") -> Ticket:
        """Block until `n` more samples are admissible under the installed version; returns their ticket."""
        if n > self.budget:
            raise ValueError(f"reserving {n} samples at once exceeds the pacing budget {self.budget}")
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: self._allowance(self.rollout_version) >= n,
                                     self.timeout_s if timeout is None else timeout, f"pacing admission ({what})")
            return self._issue(n, self.rollout_version)

    def reserve_for(self, n: int, version: int, timeout: float | None = None,
                    on_block: Callable[[], None] | None = None) -> Ticket | None:
        """Reserve `n` samples to be produced under `version` (an env slot starting a segment).

        Blocks until `version`'s budget admits them (a ticket) or a newer version has been
        installed on the rollout side (None: start again under the new weights). `on_block()`
        is called (buffer lock held) if the reservation has to wait.
        """
        if n > self.budget:
            raise ValueError(f"reserving {n} samples at once exceeds the pacing budget {self.budget}")
        with self._cond:
            if version < self._oldest:  # forgotten: long superseded, start again under the new weights
                return None
            if version not in self._consumed_at:
                raise KeyError(f"version {version} was never published")
            fits = lambda: self._allowance(version) >= n
            self.lifetime.wait_until(self._cond, lambda: fits() or self.rollout_version > version,
                                     self.timeout_s if timeout is None else timeout,
                                     f"pacing admission under version {version}", on_block)
            return self._issue(n, version) if fits() else None

    def put(self, item: Trajectory, ticket: Ticket | None = None) -> None:
        """Append a produced item against its reservation (default: the oldest with room)."""
        n = item.num_samples
        with self._cond:
            if ticket is None:
                ticket = next((t for t in self._outstanding if t.remaining >= n), None)
            if ticket is None or ticket.remaining < n or ticket not in self._outstanding:
                raise RuntimeError(f"put of {n} samples without a reservation "
                                   f"(reserved {self.reserved}, produced {self.produced})")
            if item.version_min < ticket.version:
                raise ValueError(f"item produced under version {item.version_min}, older than its reservation "
                                 f"under version {ticket.version}")
            start = ticket.next_index
            ticket.next_index += n
            if not ticket.remaining:
                self._outstanding.remove(ticket)
            self._items.append(((start + n - 1) // self.window, item))
            self.produced += n
            self.timeline.record_produced(n)
            self.timeline.record_depth(self._depth())
            self._cond.notify_all()

    def set_rollout_version(self, version: int) -> None:
        """The control plane installed `version` on the rollout side (opens its budget)."""
        with self._cond:
            if version not in self._consumed_at:
                raise KeyError(f"version {version} was never published (record_publish first)")
            if version > self.rollout_version:
                self.rollout_version = version
                while self._oldest < version - KEEP_VERSIONS:  # O(1) amortized: each version once
                    self._consumed_at.pop(self._oldest, None)
                    self._updates_at.pop(self._oldest, None)
                    self._oldest += 1
                self._cond.notify_all()

    # -- trainer side -------------------------------------------------------------------

    def record_publish(self, version: int, updates: int | None = None) -> None:
        """The trainer publishes `version` after consuming `self.consumed` samples and doing
        `updates` optimizer updates (None: one update per version)."""
        with self._cond:
            if version <= self.trainer_version:
                raise ValueError(f"published version {version} is not newer than {self.trainer_version}")
            self._consumed_at[version] = self.consumed
            last = self._updates_at.get(self.trainer_version, self.trainer_version)
            self._updates_at[version] = last + (version - self.trainer_version) if updates is None else updates
            self.trainer_version = version
            self._cond.notify_all()

    def _next_index(self) -> int | None:
        window = self.consumed // self.window
        return next((i for i, (deadline, _) in enumerate(self._items) if deadline <= window), None)

    def get(self, timeout: float | None = None, updates: int | None = None,
            abort: Callable[[], bool] | None = None) -> Trajectory:
        """Pop the first item of the current sync window (blocking, with a timeout); count its staleness.

        Items arrive in completion order; one whose reservation belongs to a later window waits
        until the current window is complete (a straggler of this window is waited for).
        `updates`: optimizer updates the trainer has done (staleness in updates is counted from
        it; None = the updates behind the trainer's published version). `abort`: re-checked at
        every poll of the wait (however long the wait goes on); True ends it with `GetAborted`.
        """
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: self._next_index() is not None or (abort and abort()),
                                     self.timeout_s if timeout is None else timeout,
                                     "rollout to produce this window's samples")
            idx = self._next_index()
            if idx is None:
                raise GetAborted("the wait for a sample was aborted")
            if idx:
                self.deferred += 1
            _, item = self._items[idx]
            del self._items[idx]
            self.consumed += item.num_samples
            stale = self.trainer_version - item.version_min
            self.max_seen_staleness = max(self.max_seen_staleness, stale)
            if stale > 0:
                self.stale_consumed += item.num_samples
            now_u = self._updates_at.get(self.trainer_version, 0) if updates is None else updates
            stale_u = now_u - self._updates_at.get(item.version_min, now_u - stale)
            self.timeline.record_consumed(item.num_samples, stale, item.span, staleness_updates=stale_u)
            self.timeline.record_depth(self._depth())
            self._cond.notify_all()
            return item

    def updates_at(self, version: int) -> int | None:
        """Optimizer updates behind `version` (None once forgotten)."""
        with self._cond:
            return self._updates_at.get(version)

    # -- state ----------------------------------------------------------------------------

    def _depth(self) -> int:
        return sum(it.num_samples for _, it in self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def counters(self) -> dict[str, int]:
        """JSON-able counters (for checkpoints and logs)."""
        with self._cond:
            return {"reserved": self.reserved, "produced": self.produced, "consumed": self.consumed,
                    "stale_consumed": self.stale_consumed, "max_staleness": self.max_seen_staleness,
                    "depth": self._depth(), "deferred": self.deferred, "rollout_version": self.rollout_version,
                    "trainer_version": self.trainer_version}
