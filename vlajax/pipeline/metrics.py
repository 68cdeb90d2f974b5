"""Pipeline metrics, computed from timestamps the lanes record.

Lanes record *what happened when* into one thread-safe `Timeline` (idle intervals per lane,
samples produced / consumed with their staleness, queue depths, inference batch sizes, env
steps). `summarize(timeline, t0, t1)` turns a window of it into the numbers verl and RL-VLA3
report:

- `trainer/idle_ratio`, `rollouter/idle_ratio`: idle time / window length, averaged over the
  role's lanes (a role is the lane name before the first '/': 'rollouter/slot0' -> 'rollouter').
  The trainer is idle while it waits for samples; the rollouter while pacing holds it back or
  it waits for weights (a slot waiting for its action is not idle: `<role>/wait_inference_ratio`).
  `<role>/wait_<reason>_ratio` breaks every wait down by its reason.
- `queue/depth_mean`, `queue/depth_max`: buffer depth (samples) as sampled at puts and gets.
- `staleness/mean`, `staleness/max`, `staleness/hist_<k>`: policy-version lag per consumed
  sample (trainer version - oldest version in the sample); `staleness/stale_samples`.
- `partial/version_span_max`, `partial/version_span_mean`: newest - oldest version inside one
  consumed trajectory (0 without partial rollouts).
- `samples/produced_per_s`, `samples/consumed_per_s`, `samples/acceptance_rate` (consumed samples the
  trainer kept, i.e. not rejected by a filter, / samples consumed), `env/steps_per_s`.
- `inference/batch_mean`, `inference/batch_max`, `inference/batch_hist_<n>`.

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


class Timeline:
    """Append-only, thread-safe event record shared by every lane of one run."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self.lanes: list[str] = []
        self.idle: list[tuple[str, str, float, float]] = []  # (lane, reason, t0, t1)
        self._open: dict[str, tuple[str, float]] = {}  # lane -> (reason, t0) of an idle period in progress
        self.produced: list[tuple[float, int]] = []  # (t, samples)
        self.consumed: list[tuple[float, int, int, int]] = []  # (t, samples, staleness, version span)
        self.rejected: list[tuple[float, int]] = []  # (t, consumed samples the trainer filtered out)
        self.depth: list[tuple[float, int]] = []  # (t, samples waiting in the buffer)
        self.batches: list[tuple[float, int]] = []  # (t, inference batch size)
        self.env_steps: list[tuple[float, int]] = []  # (t, low-level env transitions)
        self.start = clock()

    def now(self) -> float:
        return self.clock()

    def register(self, lane: str) -> None:
        with self._lock:
            if lane not in self.lanes:
                self.lanes.append(lane)

    def begin_idle(self, lane: str, reason: str, t: float | None = None) -> None:
        with self._lock:
            self._open[lane] = (reason, self.clock() if t is None else t)

    def end_idle(self, lane: str, t: float | None = None) -> None:
        with self._lock:
            reason, t0 = self._open.pop(lane)
            self.idle.append((lane, reason, t0, self.clock() if t is None else t))

    def add_idle(self, lane: str, reason: str, t0: float, t1: float) -> None:
        with self._lock:
            self.idle.append((lane, reason, t0, t1))

    def record_produced(self, samples: int, t: float | None = None) -> None:
        with self._lock:
            self.produced.append((self.clock() if t is None else t, samples))

    def record_consumed(self, samples: int, staleness: int, span: int = 0, t: float | None = None) -> None:
        with self._lock:
            self.consumed.append((self.clock() if t is None else t, samples, staleness, span))

    def record_rejected(self, samples: int, t: float | None = None) -> None:
        """Consumed samples the trainer dropped (e.g. zero-advantage groups)."""
        with self._lock:
            self.rejected.append((self.clock() if t is None else t, samples))

    def record_depth(self, depth: int, t: float | None = None) -> None:
        with self._lock:
            self.depth.append((self.clock() if t is None else t, depth))

    def record_batch(self, size: int, t: float | None = None) -> None:
        with self._lock:
            self.batches.append((self.clock() if t is None else t, size))

    def record_env_steps(self, steps: int, t: float | None = None) -> None:
        with self._lock:
            self.env_steps.append((self.clock() if t is None else t, steps))

    def snapshot(self) -> dict:
        """A consistent copy of every record (open idle periods are closed at `now`)."""
        with self._lock:
            now = self.clock()
            idle = list(self.idle) + [(lane, r, t0, now) for lane, (r, t0) in self._open.items()]
            rows = {k: list(getattr(self, k)) for k in
                    ("lanes", "produced", "consumed", "rejected", "depth", "batches", "env_steps")}
            return {**rows, "idle": idle, "now": now, "start": self.start}


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def summarize(timeline: Timeline, t0: float | None = None, t1: float | None = None) -> dict[str, float]:
    """Metrics over the window [t0, t1] (default: from the timeline's start to now)."""
    snap = timeline.snapshot()
    t0 = snap["start"] if t0 is None else t0
    t1 = snap["now"] if t1 is None else t1
    dur = max(t1 - t0, 1e-9)
    inside = lambda rows: [r for r in rows if t0 <= r[0] <= t1]
    out: dict[str, float] = {"window_s": t1 - t0}

    # Idle ratios per role: mean over the role's lanes of (idle time in window / window). Waits
    # for a result of the same role's hot loop (a slot waiting for its action) are not idle
    # (they are reported as `<role>/wait_inference_ratio`), every other wait is.
    by_reason: dict[tuple[str, str], float] = collections.defaultdict(float)
    for lane, reason, a, b in snap["idle"]:
        by_reason[(lane, reason)] += _overlap(a, b, t0, t1)
    roles: dict[str, list[str]] = collections.defaultdict(list)
    for lane in snap["lanes"]:
        roles[role_of(lane)].append(lane)
    reasons = sorted({r for _, r in by_reason})
    for role, lanes in roles.items():
        idle = [sum(v for (ln, r), v in by_reason.items() if ln == lane and r not in NOT_IDLE) for lane in lanes]
        out[f"{role}/idle_ratio"] = sum(idle) / len(lanes) / dur
        for reason in reasons:
            total = sum(by_reason.get((lane, reason), 0.0) for lane in lanes)
            if total:
                out[f"{role}/wait_{reason}_ratio"] = total / len(lanes) / dur

    depth = [d for _, d in inside(snap["depth"])]
    if depth:
        out["queue/depth_mean"] = sum(depth) / len(depth)
        out["queue/depth_max"] = float(max(depth))

    consumed = inside(snap["consumed"])
    n_consumed = sum(r[1] for r in consumed)
    if consumed:
        weights = [r[1] for r in consumed]
        stale = [r[2] for r in consumed]
        spans = [r[3] for r in consumed]
        out["staleness/mean"] = sum(s * w for s, w in zip(stale, weights)) / max(n_consumed, 1)
        out["staleness/max"] = float(max(stale))
        out["staleness/stale_samples"] = float(sum(w for s, w in zip(stale, weights) if s > 0))
        hist = collections.Counter()
        for s, w in zip(stale, weights):
            hist[s] += w
        for k, v in sorted(hist.items()):
            out[f"staleness/hist_{k}"] = float(v)
        out["partial/version_span_max"] = float(max(spans))
        out["partial/version_span_mean"] = sum(spans) / len(spans)
        rejected = sum(n for _, n in inside(snap["rejected"]))
        out["samples/acceptance_rate"] = (n_consumed - rejected) / max(n_consumed, 1)
    out["samples/consumed_per_s"] = n_consumed / dur
    out["samples/produced_per_s"] = sum(n for _, n in inside(snap["produced"])) / dur
    out["env/steps_per_s"] = sum(n for _, n in inside(snap["env_steps"])) / dur

    sizes = [b for _, b in inside(snap["batches"])]
    if sizes:
        out["inference/batch_mean"] = sum(sizes) / len(sizes)
        out["inference/batch_max"] = float(max(sizes))
        for k, v in sorted(collections.Counter(sizes).items()):
            out[f"inference/batch_hist_{k}"] = float(v)
    return out


class WindowReporter:
    """Every `every` updates: summarize the window since the last report, log it, append JSON.

    logger: anything with `scalars(step, dict)` (e.g. `vlajax.logging.MetricsLogger`: the
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
