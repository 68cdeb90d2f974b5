"""The staleness-tagged trajectory buffer (the data plane) with verl's pacing admission.

Every item is a `Trajectory`: a pytree of host or device arrays plus the policy versions that
produced it (one per decision; several when a partial rollout crossed a weight update).

Pacing (verl fully-async, ALGORITHMS.md "Asynchrony knobs"). Let
`W = trigger_parameter_sync_step * require_batches * mini_batch` be the samples the trainer
consumes between two weight publications. Between two publications rollout may *start* at most
`(1 + staleness_threshold) * W - num_stale` samples, where `num_stale` are the samples already
produced (or in flight) beyond what the trainer had consumed when it published. Equivalently,
with `C(v)` the samples consumed when version v was published and `v` the newest version
installed on the rollout side, rollout may have reserved in total at most
`C(v) + floor((1 + staleness_threshold) * W)` samples. Rollout *reserves* samples before it
produces them (`reserve`), waiting (with a timeout) when the budget is spent; nothing is ever
discarded. With FIFO consumption this bounds the staleness of every consumed sample to
`ceil(staleness_threshold)` versions (samples produced under one version; a partial rollout
can add its version span on top).

Staleness of a consumed item = the trainer's published version when it takes the item minus
the oldest version in the item.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time
from typing import Any

import numpy as np

from vlajax.pipeline.lanes import Lifetime
from vlajax.pipeline.metrics import Timeline

__all__ = ["Trajectory", "TrajectoryBuffer", "window_samples"]


@dataclasses.dataclass
class Trajectory:
    """One unit on the data plane.

    data: pytree of arrays, e.g. `[T, B, ...]` decisions x envs; versions: int array (any
    shape, e.g. `[T]` or `[T, B]`) of the policy version that produced each decision;
    num_samples: samples this item counts for in pacing (e.g. B trajectories).
    """

    data: Any
    versions: Any
    num_samples: int = 1
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


def window_samples(trigger_parameter_sync_step: int, require_batches: int, mini_batch: int) -> int:
    """W: samples the trainer consumes between two weight publications."""
    return trigger_parameter_sync_step * require_batches * mini_batch


class TrajectoryBuffer:
    """FIFO of `Trajectory` in host memory with pacing admission and staleness counters.

    Rollout: `reserve(n)` -> produce -> `put(item)`. Control plane: `set_rollout_version(v)`
    once version v's weights are usable by rollout. Trainer: `get()` (FIFO), and
    `record_publish(v)` when it publishes version v.
    """

    def __init__(self, window: int, staleness_threshold: float, *, timeout_s: float = 120.0,
                 lifetime: Lifetime | None = None, timeline: Timeline | None = None, version: int = 0):
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
        self._items: collections.deque[Trajectory] = collections.deque()
        # Cumulative counters (samples).
        self.reserved = 0
        self.produced = 0
        self.consumed = 0
        self.stale_consumed = 0  # samples consumed with staleness > 0
        self.max_seen_staleness = 0
        # version -> samples consumed when it was published (a resumed run starts at `version`).
        self._consumed_at: dict[int, int] = {version: 0}
        self.rollout_version = version
        self.trainer_version = version

    # -- rollout side -------------------------------------------------------------------

    def allowance(self) -> int:
        """Samples rollout may still reserve under the installed version."""
        with self._cond:
            return self._allowance()

    def _allowance(self) -> int:
        return self._consumed_at[self.rollout_version] + self.budget - self.reserved

    def reserve(self, n: int, timeout: float | None = None, what: str = "the trainer to publish new weights") -> None:
        """Block until `n` more samples are admissible, then count them as in flight."""
        if n > self.budget:
            raise ValueError(f"reserving {n} samples at once exceeds the pacing budget {self.budget}")
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: self._allowance() >= n,
                                     self.timeout_s if timeout is None else timeout, f"pacing admission ({what})")
            self.reserved += n

    def reserve_for(self, n: int, version: int, timeout: float | None = None) -> bool:
        """Reserve `n` samples to be produced under `version` (an env slot starting a segment).

        Blocks until `version`'s budget admits them (True) or a newer version has been
        installed on the rollout side (False: start again under the new weights).
        """
        if n > self.budget:
            raise ValueError(f"reserving {n} samples at once exceeds the pacing budget {self.budget}")
        with self._cond:
            if version not in self._consumed_at:
                raise KeyError(f"version {version} was never published")
            fits = lambda: self._consumed_at[version] + self.budget - self.reserved >= n
            self.lifetime.wait_until(self._cond, lambda: fits() or self.rollout_version > version,
                                     self.timeout_s if timeout is None else timeout,
                                     f"pacing admission under version {version}")
            if fits():
                self.reserved += n
                return True
            return False

    def put(self, item: Trajectory) -> None:
        """Append a produced item. Its samples must have been reserved."""
        with self._cond:
            if self.produced + item.num_samples > self.reserved:
                raise RuntimeError(f"put of {item.num_samples} samples without a reservation "
                                   f"(reserved {self.reserved}, produced {self.produced})")
            self._items.append(item)
            self.produced += item.num_samples
            self.timeline.record_produced(item.num_samples)
            self.timeline.record_depth(self._depth())
            self._cond.notify_all()

    def set_rollout_version(self, version: int) -> None:
        """The control plane installed `version` on the rollout side (opens its budget)."""
        with self._cond:
            if version not in self._consumed_at:
                raise KeyError(f"version {version} was never published (record_publish first)")
            if version > self.rollout_version:
                self.rollout_version = version
                self._cond.notify_all()

    # -- trainer side -------------------------------------------------------------------

    def record_publish(self, version: int) -> None:
        """The trainer publishes `version` after consuming `self.consumed` samples."""
        with self._cond:
            if version <= self.trainer_version:
                raise ValueError(f"published version {version} is not newer than {self.trainer_version}")
            self._consumed_at[version] = self.consumed
            self.trainer_version = version
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Trajectory:
        """Pop the oldest item (blocking, with a timeout) and count its staleness."""
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: bool(self._items),
                                     self.timeout_s if timeout is None else timeout, "rollout to produce samples")
            item = self._items.popleft()
            self.consumed += item.num_samples
            stale = self.trainer_version - item.version_min
            self.max_seen_staleness = max(self.max_seen_staleness, stale)
            if stale > 0:
                self.stale_consumed += item.num_samples
            self.timeline.record_consumed(item.num_samples, stale, item.span)
            self.timeline.record_depth(self._depth())
            self._cond.notify_all()
            return item

    # -- state ----------------------------------------------------------------------------

    def _depth(self) -> int:
        return sum(it.num_samples for it in self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def counters(self) -> dict[str, int]:
        """JSON-able counters (for checkpoints and logs)."""
        with self._cond:
            return {"reserved": self.reserved, "produced": self.produced, "consumed": self.consumed,
                    "stale_consumed": self.stale_consumed, "max_staleness": self.max_seen_staleness,
                    "depth": self._depth(), "rollout_version": self.rollout_version,
                    "trainer_version": self.trainer_version}
