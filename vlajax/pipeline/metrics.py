"""Pipeline metrics, computed from timestamps the lanes record.

Lanes record *what happened when* into one thread-safe `Timeline` (idle intervals per lane,
samples produced / consumed with their staleness, queue depths, inference batch sizes, env
steps) in bounded memory: running totals since the start plus the most recent `retain`
records of each kind. `summarize(timeline, t0, t1)` turns a window of it into the numbers
verl and RL-VLA3 report:

- `trainer/idle_ratio`, `rollouter/idle_ratio`: idle time / window length, averaged over the
  role's lanes (a role is the lane name before the first '/': 'rollouter/slot0' -> 'rollouter').
  The trainer is idle while it waits for samples; the rollouter while pacing holds it back or
  it waits for weights (a slot waiting for its action is not idle: `<role>/wait_inference_ratio`).
  `<role>/wait_<reason>_ratio` breaks every wait down by its reason.
- `queue/depth_mean`, `queue/depth_max`: buffer depth (samples) as sampled at puts and gets.
- `staleness/mean`, `staleness/max`, `staleness/hist_<k>`: lag in *published versions* per
  consumed sample (trainer version - oldest version in the sample); `staleness/stale_samples`.
  `staleness/updates_mean`, `staleness/updates_max`: the same lag in *optimizer updates*
  (updates done by the trainer - updates behind the sample's oldest version); with
  `trigger_parameter_sync_step=K` a sample can be K-1 updates old at version lag 0.
- `partial/version_span_max`, `partial/version_span_mean`: newest - oldest version inside one
  consumed trajectory (0 without partial rollouts).
- `samples/produced_per_s`, `samples/consumed_per_s`, `samples/acceptance_rate` (consumed samples the
  trainer kept, i.e. not rejected by a filter, / samples consumed), `env/steps_per_s`.
- `inference/batch_mean`, `inference/batch_max`, `inference/batch_hist_<n>`; where the slots report
  themselves in flight (`DynamicBatcher.activate`), `inference/active_mean` (slots in flight when a
  batch fired) and `inference/batch_over_active` (requests per forward over it; 1 = lockstep slots
  are one batch).

`WindowReporter` logs a summary every N updates to TensorBoard and a JSON-lines file.
Times are `time.monotonic()` seconds unless a clock is injected (tests use a fake one).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable

__all__ = ["Timeline", "summarize", "role_of", "NOT_IDLE", "WindowReporter"]

NOT_IDLE = frozenset({"inference"})  # wait reasons that are part of a lane's hot loop, not idleness


def role_of(lane: str) -> str:
    """'rollouter/slot3' -> 'rollouter'."""
    return lane.split("/", 1)[0]


class _Agg:
    """Additive aggregates of a set of records (the whole run, or the records inside a window)."""

    __slots__ = ("idle", "consumed", "consumed_items", "stale_hist", "stale_max", "span_sum", "span_max",
                 "rejected", "produced", "env_steps", "depth_sum", "depth_n", "depth_max", "batch_hist",
                 "upd_sum", "upd_max", "active_sum", "active_n")

    def __init__(self):
        self.idle: dict[tuple[str, str], float] = collections.defaultdict(float)  # (lane, reason) -> s
        self.consumed = self.consumed_items = self.span_sum = self.rejected = self.produced = 0
        self.env_steps = self.depth_sum = self.depth_n = 0
        self.stale_max = self.span_max = self.depth_max = self.upd_max = -1
        self.upd_sum = 0  # sample-weighted staleness in optimizer updates
        self.active_sum = self.active_n = 0  # slots in flight at each batch that recorded them
        self.stale_hist: collections.Counter = collections.Counter()  # staleness -> samples
        self.batch_hist: collections.Counter = collections.Counter()  # batch size -> batches

    def add_consumed(self, samples: int, staleness: int, span: int, updates: int) -> None:
        self.upd_sum += updates * samples
        self.upd_max = max(self.upd_max, updates)
        self.consumed += samples
        self.consumed_items += 1
        self.stale_hist[staleness] += samples
        self.stale_max = max(self.stale_max, staleness)
        self.span_sum += span
        self.span_max = max(self.span_max, span)

    def add_depth(self, depth: int) -> None:
        self.depth_sum += depth
        self.depth_n += 1
        self.depth_max = max(self.depth_max, depth)

    def copy(self) -> _Agg:
        out = _Agg()
        for k in self.__slots__:
            v = getattr(self, k)
            setattr(out, k, v.copy() if hasattr(v, "copy") else v)
        return out


class Timeline:
    """Thread-safe event record shared by every lane of one run, in bounded memory.

    Every record updates running totals since the start (O(1), exact for the whole run) and
    is kept in a window of the most recent `retain` records of its kind (per lane for idle
    intervals), from which `summarize` computes any shorter window exactly. Record with
    explicit `t` in time order per kind (the lanes' own records always are).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, retain: int = 10_000):
        if retain < 1:
            raise ValueError(f"retain={retain} must be >= 1")
        self.clock = clock
        self.retain = retain
        self._lock = threading.Lock()
        self.lanes: list[str] = []
        row = lambda: collections.deque(maxlen=retain)
        self.idle: dict[str, collections.deque] = {}  # lane -> recent (reason, t0, t1)
        self._open: dict[str, tuple[str, float]] = {}  # lane -> (reason, t0) of an idle period in progress
        self.produced: collections.deque = row()  # recent (t, samples)
        self.consumed: collections.deque = row()  # recent (t, samples, staleness, version span, staleness in updates)
        self.rejected: collections.deque = row()  # recent (t, consumed samples the trainer filtered out)
        self.depth: collections.deque = row()  # recent (t, samples waiting in the buffer)
        self.batches: collections.deque = row()  # recent (t, inference batch size, active slots or -1)
        self.env_steps: collections.deque = row()  # recent (t, low-level env transitions)
        self._dropped: dict[str, float] = {}  # kind (or lane) -> time of the newest record dropped
        self.totals = _Agg()  # since the start
        self.start = clock()

    def now(self) -> float:
        return self.clock()

    def _append(self, kind: str, rows: collections.deque, row: tuple, t_of=lambda r: r[0]) -> None:
        if len(rows) == rows.maxlen:
            self._dropped[kind] = t_of(rows[0])
        rows.append(row)

    def register(self, lane: str) -> None:
        with self._lock:
            if lane not in self.lanes:
                self.lanes.append(lane)
                self.idle[lane] = collections.deque(maxlen=self.retain)

    def begin_idle(self, lane: str, reason: str, t: float | None = None) -> None:
        with self._lock:
            self._open[lane] = (reason, self.clock() if t is None else t)

    def _add_idle(self, lane: str, reason: str, t0: float, t1: float) -> None:
        if lane not in self.idle:
            self.lanes.append(lane)
            self.idle[lane] = collections.deque(maxlen=self.retain)
        self._append(f"idle:{lane}", self.idle[lane], (reason, t0, t1), lambda r: r[2])
        self.totals.idle[(lane, reason)] += t1 - t0

    def end_idle(self, lane: str, t: float | None = None) -> None:
        with self._lock:
            reason, t0 = self._open.pop(lane)
            self._add_idle(lane, reason, t0, self.clock() if t is None else t)

    def add_idle(self, lane: str, reason: str, t0: float, t1: float) -> None:
        with self._lock:
            self._add_idle(lane, reason, t0, t1)

    def record_produced(self, samples: int, t: float | None = None) -> None:
        with self._lock:
            self._append("produced", self.produced, (self.clock() if t is None else t, samples))
            self.totals.produced += samples

    def record_consumed(self, samples: int, staleness: int, span: int = 0, t: float | None = None,
                        staleness_updates: int | None = None) -> None:
        """staleness: in published versions; staleness_updates: in optimizer updates (None = the same)."""
        upd = staleness if staleness_updates is None else staleness_updates
        with self._lock:
            self._append("consumed", self.consumed, (self.clock() if t is None else t, samples, staleness, span, upd))
            self.totals.add_consumed(samples, staleness, span, upd)

    def record_rejected(self, samples: int, t: float | None = None) -> None:
        """Consumed samples the trainer dropped (e.g. zero-advantage groups)."""
        with self._lock:
            self._append("rejected", self.rejected, (self.clock() if t is None else t, samples))
            self.totals.rejected += samples

    def record_depth(self, depth: int, t: float | None = None) -> None:
        with self._lock:
            self._append("depth", self.depth, (self.clock() if t is None else t, depth))
            self.totals.add_depth(depth)

    def record_batch(self, size: int, t: float | None = None, active: int | None = None) -> None:
        """One fired inference batch of `size` requests; `active`: the slots with a segment in flight
        when it fired (an adaptive batcher's; their mean is `inference/active_mean`)."""
        with self._lock:
            self._append("batches", self.batches, (self.clock() if t is None else t, size,
                                                   -1 if active is None else active))
            self.totals.batch_hist[size] += 1
            if active is not None:
                self.totals.active_sum += active
                self.totals.active_n += 1

    def record_env_steps(self, steps: int, t: float | None = None) -> None:
        with self._lock:
            self._append("env_steps", self.env_steps, (self.clock() if t is None else t, steps))
            self.totals.env_steps += steps

    def total_env_steps(self) -> int:
        """Low-level env transitions recorded since the start (O(1))."""
        with self._lock:
            return self.totals.env_steps

    def sizes(self) -> dict[str, int]:
        """Entries held by each structure (for soak tests: every one is bounded)."""
        with self._lock:
            out = {k: len(getattr(self, k)) for k in ("produced", "consumed", "rejected", "depth", "batches",
                                                         "env_steps")}
            out["idle"] = sum(len(d) for d in self.idle.values())
            out["open_idle"] = len(self._open)
            out["dropped_marks"] = len(self._dropped)
            out["totals_idle_keys"] = len(self.totals.idle)
            out["totals_stale_hist"] = len(self.totals.stale_hist)
            out["totals_batch_hist"] = len(self.totals.batch_hist)
            return out

    def window(self, t0: float | None = None, t1: float | None = None) -> tuple[_Agg, bool, float, float]:
        """(aggregates of the records in [t0, t1] (idle time clipped to it), complete, t0, t1).

        t0 None = the start, t1 None = now. Complete = no record inside the window was dropped
        from the retained window. The run's totals answer windows that cover the whole run;
        recent records answer the others, scanned newest first until the window's start: the
        cost is the window's records, not the run's.
        """
        with self._lock:
            now = self.clock()
            t0 = self.start if t0 is None else t0
            t1 = now if t1 is None else t1
            if t0 <= self.start and t1 >= now:
                agg = self.totals.copy()
                for lane, (reason, a) in self._open.items():
                    agg.idle[(lane, reason)] += max(0.0, min(now, t1) - max(a, t0))
                return agg, True, t0, t1
            agg = _Agg()
            complete = all(t < t0 for t in self._dropped.values())
            for lane, rows in self.idle.items():
                for reason, a, b in reversed(rows):
                    if b < t0:
                        break
                    agg.idle[(lane, reason)] += _overlap(a, b, t0, t1)
            for lane, (reason, a) in self._open.items():
                agg.idle[(lane, reason)] += _overlap(a, now, t0, t1)
            for _t, n, s, sp, upd in _recent(self.consumed, t0, t1):
                agg.add_consumed(n, s, sp, upd)
            agg.rejected = sum(r[1] for r in _recent(self.rejected, t0, t1))
            agg.produced = sum(r[1] for r in _recent(self.produced, t0, t1))
            agg.env_steps = sum(r[1] for r in _recent(self.env_steps, t0, t1))
            for _, d in _recent(self.depth, t0, t1):
                agg.add_depth(d)
            for _, b, active in _recent(self.batches, t0, t1):
                agg.batch_hist[b] += 1
                if active >= 0:
                    agg.active_sum += active
                    agg.active_n += 1
            return agg, complete, t0, t1

    def snapshot(self) -> dict:
        """A copy of the retained records (open idle periods closed at `now`); bounded by `retain`."""
        with self._lock:
            now = self.clock()
            idle = [(lane, r, a, b) for lane, rows in self.idle.items() for r, a, b in rows]
            idle += [(lane, r, t0, now) for lane, (r, t0) in self._open.items()]
            rows = {k: list(getattr(self, k)) for k in
                    ("lanes", "produced", "consumed", "rejected", "depth", "batches", "env_steps")}
            return {**rows, "idle": idle, "now": now, "start": self.start}


def _recent(rows: collections.deque, t0: float, t1: float) -> list[tuple]:
    """Rows with t0 <= t <= t1, scanning from the newest back to t0 (rows are in time order)."""
    out = []
    for r in reversed(rows):
        if r[0] < t0:
            break
        if r[0] <= t1:
            out.append(r)
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def summarize(timeline: Timeline, t0: float | None = None, t1: float | None = None) -> dict[str, float]:
    """Metrics over the window [t0, t1] (default: from the timeline's start to now).

    `window_complete` is 0.0 when the window reaches back past the retained records (the
    figures then cover only its retained part); windows covering the whole run are exact.
    """
    agg, complete, t0, t1 = timeline.window(t0, t1)
    dur = max(t1 - t0, 1e-9)
    out: dict[str, float] = {"window_s": t1 - t0, "window_complete": float(complete)}

    # Idle ratios per role: mean over the role's lanes of (idle time in window / window). Waits
    # for a result of the same role's hot loop (a slot waiting for its action) are not idle
    # (they are reported as `<role>/wait_inference_ratio`), every other wait is.
    by_reason = agg.idle
    roles: dict[str, list[str]] = collections.defaultdict(list)
    for lane in list(timeline.lanes):
        roles[role_of(lane)].append(lane)
    reasons = sorted({r for _, r in by_reason})
    for role, lanes in roles.items():
        idle = [sum(v for (ln, r), v in by_reason.items() if ln == lane and r not in NOT_IDLE) for lane in lanes]
        out[f"{role}/idle_ratio"] = sum(idle) / len(lanes) / dur
        for reason in reasons:
            total = sum(by_reason.get((lane, reason), 0.0) for lane in lanes)
            if total:
                out[f"{role}/wait_{reason}_ratio"] = total / len(lanes) / dur

    if agg.depth_n:
        out["queue/depth_mean"] = agg.depth_sum / agg.depth_n
        out["queue/depth_max"] = float(agg.depth_max)

    n_consumed = agg.consumed
    if agg.consumed_items:
        out["staleness/mean"] = sum(s * w for s, w in agg.stale_hist.items()) / max(n_consumed, 1)
        out["staleness/max"] = float(agg.stale_max)
        out["staleness/updates_mean"] = agg.upd_sum / max(n_consumed, 1)
        out["staleness/updates_max"] = float(agg.upd_max)
        out["staleness/stale_samples"] = float(sum(w for s, w in agg.stale_hist.items() if s > 0))
        for k, v in sorted(agg.stale_hist.items()):
            out[f"staleness/hist_{k}"] = float(v)
        out["partial/version_span_max"] = float(agg.span_max)
        out["partial/version_span_mean"] = agg.span_sum / agg.consumed_items
        out["samples/acceptance_rate"] = (n_consumed - agg.rejected) / max(n_consumed, 1)
    out["samples/consumed_per_s"] = n_consumed / dur
    out["samples/produced_per_s"] = agg.produced / dur
    out["env/steps_per_s"] = agg.env_steps / dur

    if agg.batch_hist:
        n = sum(agg.batch_hist.values())
        out["inference/batch_mean"] = sum(b * c for b, c in agg.batch_hist.items()) / n
        out["inference/batch_max"] = float(max(agg.batch_hist))
        for k, v in sorted(agg.batch_hist.items()):
            out[f"inference/batch_hist_{k}"] = float(v)
    if agg.active_n:  # an adaptive batcher: requests per forward against the slots in flight
        out["inference/active_mean"] = agg.active_sum / agg.active_n
        if agg.active_n == sum(agg.batch_hist.values()):
            out["inference/batch_over_active"] = out["inference/batch_mean"] / max(out["inference/active_mean"], 1e-9)
    return out


class WindowReporter:
    """Every `every` updates: summarize the window since the last report, log it, append JSON.

    logger: anything with `scalars(step, dict)` (e.g. `vlajax.training.logging.MetricsLogger`: the
    names are verl's, `trainer/idle_ratio`, ...); json_path: one JSON object per report
    (`{"update": n, **metrics}`); extra: more scalars per report (e.g. runner counters).
    """

    def __init__(self, timeline: Timeline, logger=None, every: int = 10, json_path: str | None = None,
                 extra: Callable[[], dict[str, float]] | None = None):
        if every < 1:
            raise ValueError(f"every={every} must be >= 1")
        self.timeline, self.logger, self.every = timeline, logger, every
        self.json_path, self.extra = json_path, extra
        self._t0 = timeline.now()

    def __call__(self, update: int) -> dict[str, float] | None:
        if update % self.every:
            return None
        now = self.timeline.now()
        out = summarize(self.timeline, self._t0, now)
        self._t0 = now
        if self.extra is not None:
            out.update(self.extra())
        if self.logger is not None:
            self.logger.scalars(update, out)
        if self.json_path:
            with open(self.json_path, "a") as f:
                f.write(json.dumps({"update": update, **out}) + "\n")
        return out
