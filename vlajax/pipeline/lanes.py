"""Lanes: the threads of the asynchronous pipeline, with one shared lifetime.

A *lane* (D-VLA's swimlane) is a thread that calls its body again and again until the body
returns `False` or the run stops: sampling (envs + inference), training, the weight control
plane. All lanes of a run share a `Lifetime`:

- any exception in a lane stops every lane, and `LaneGroup.run()` re-raises that exception in
  the calling (main) thread, with its original traceback and a note naming the lane;
- every wait has a timeout (`Lifetime.wait_until`) that means "stuck", not "slow": it fires
  only when no other lane has been busy during the last timeout (every lane waiting = nothing
  can ever arrive); while some lane works, the wait goes on and that lane is the watchdog's
  business. A wait that times out
  raises `PipelineTimeout` naming what it waited for, a wait interrupted by a stop raises
  `PipelineStopped` (which the lane treats as a normal exit);
- a watchdog thread reports a lane that has been *busy* (not waiting) without a heartbeat for
  longer than its limit as `LaneStalled`, naming it. The limit is `watchdog_s`, or 3x the
  lane's longest completed iteration when that is longer (a slow lane is not a stuck one);
  a lane's first iteration (compiles) gets `FIRST_CALL_BUDGET x watchdog_s`;
- Ctrl-C (KeyboardInterrupt) or SIGTERM in the main thread: with a `drain` callback the lanes
  are asked to stop at their next safe point (the trainer: its next update boundary, where it
  saves itself) and waited for, bounded by the seconds `drain()` returns; without one they stop
  at once and `on_interrupt` is called after they are joined. Either way `run()` returns
  `"interrupted"`. A second signal while draining stops everything at once and raises
  `RunAborted` (nothing is saved; the last complete checkpoint stays as it is). Lanes still
  running after the join bound raise `PipelineTimeout` naming them: the caller must then not
  close what they use.

Waiting time is recorded in the run's `Timeline` (it is what the idle ratios are made of).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

from vlajax.pipeline.metrics import Timeline

__all__ = ["PipelineTimeout", "PipelineStopped", "LaneStalled", "RunAborted", "Lifetime", "Lane", "LaneGroup"]

_POLL_S = 0.05  # granularity at which waits re-check the stop flag
FIRST_CALL_BUDGET = 10.0  # a lane's first iteration (first-call compiles) may stay busy this many watchdog_s
SLOW_FACTOR = 3.0  # later iterations: busy up to this many times the longest completed one


class PipelineTimeout(TimeoutError):
    """A queue / pacing / weight wait exceeded its timeout. The message names what it waited for."""


class PipelineStopped(RuntimeError):
    """The run was stopped while this lane waited (another lane failed, or an interrupt)."""


class LaneStalled(RuntimeError):
    """The watchdog saw a lane busy without a heartbeat for longer than its limit."""


class RunAborted(RuntimeError):
    """A second SIGTERM / Ctrl-C while the lanes drained: stopped at once, nothing saved."""


class Lifetime:
    """The stop flag shared by every lane of a run, and the first error that stopped it."""

    def __init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.error_lane: str | None = None
        # busy_elsewhere(window_s): some lane other than the caller's is busy or was within the
        # last window_s seconds (set by LaneGroup); a wait past its timeout then goes on
        self.busy_elsewhere: Callable[[float], bool] = lambda window_s: False

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self, error: BaseException | None = None, lane: str | None = None) -> None:
        """Stop the run; the first error recorded wins."""
        with self._lock:
            if error is not None and self.error is None:
                self.error, self.error_lane = error, lane
            self._stop.set()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless stopped first; True if the run is still live."""
        return not self._stop.wait(seconds)

    def wait_until(self, cond: threading.Condition, predicate: Callable[[], bool], timeout: float, what: str,
                   on_block: Callable[[], None] | None = None) -> None:
        """Wait on `cond` (held by the caller) until `predicate()`; raises on stop, and on timeout
        unless another lane is busy (then the deadline moves on: see the module docstring).
        `on_block()` is called once, with `cond` held, when the predicate is false at the first check
        (the wait really blocks; e.g. an env slot leaving its batcher's active set)."""
        deadline = time.monotonic() + timeout
        if on_block is not None and not predicate():
            on_block()
        while not predicate():
            if self.stopped:
                raise PipelineStopped(f"stopped while waiting for {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                if not self.busy_elsewhere(timeout):
                    raise PipelineTimeout(f"waited {timeout:.3g} s for {what} while no other lane was busy")
                deadline, left = time.monotonic() + timeout, timeout
            cond.wait(min(left, _POLL_S))


class Lane:
    """One thread. `body(lane)` is called until it returns False or the run stops.

    Inside the body, `with lane.waiting("reason"):` marks an idle period (recorded in the
    timeline, ignored by the watchdog); `lane.beat()` marks progress in long busy sections.
    """

    def __init__(self, name: str, body: Callable[[Lane], bool | None], lifetime: Lifetime, timeline: Timeline):
        self.name, self.body, self.lifetime, self.timeline = name, body, lifetime, timeline
        self.iterations = 0
        self.longest_s = 0.0  # longest completed body call
        self.last_active = time.monotonic()  # when its last busy period ended
        self._busy_since = time.monotonic()
        self._waiting: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"lane:{name}", daemon=True)
        self.done = threading.Event()
        timeline.register(name)

    def beat(self) -> None:
        self._busy_since = time.monotonic()

    @contextlib.contextmanager
    def waiting(self, reason: str) -> Iterator[None]:
        self._waiting = reason
        self.last_active = time.monotonic()
        self.timeline.begin_idle(self.name, reason)
        try:
            yield
        finally:
            self.timeline.end_idle(self.name)
            self._waiting = None
            self.beat()

    def busy_for(self, now: float) -> float:
        """Seconds busy without a heartbeat (0 while waiting or finished)."""
        if self._waiting is not None or self.done.is_set():
            return 0.0
        return now - self._busy_since

    @contextlib.contextmanager
    def heartbeat(self, period_s: float = 1.0) -> Iterator[None]:
        """Beat every `period_s` while the block runs (a long known-finite section such as a
        closed-loop evaluation inside the trainer lane: busy, but not stalled)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(period_s):
                self.beat()

        t = threading.Thread(target=beat, name=f"lane:{self.name}:heartbeat", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
            self.beat()

    def limit(self, watchdog_s: float) -> float:
        """Busy seconds without a heartbeat before this lane counts as stalled."""
        if self.iterations == 0:
            return FIRST_CALL_BUDGET * watchdog_s
        return max(watchdog_s, SLOW_FACTOR * self.longest_s)

    @property
    def busy(self) -> bool:
        return self._waiting is None and self.thread.is_alive() and not self.done.is_set()

    def _run(self) -> None:
        try:
            while not self.lifetime.stopped:
                self.beat()
                t0 = time.monotonic()
                if self.body(self) is False:
                    break
                self.longest_s = max(self.longest_s, time.monotonic() - t0)
                self.iterations += 1
        except PipelineStopped:
            pass
        except BaseException as e:  # noqa: BLE001 - every error must reach the main thread
            e.add_note(f"raised in pipeline lane {self.name!r}")
            self.lifetime.stop(e, self.name)
        finally:
            self.last_active = time.monotonic()
            self.done.set()


class LaneGroup:
    """The lanes of one run, started together and supervised from the calling thread."""

    def __init__(self, lifetime: Lifetime | None = None, timeline: Timeline | None = None, watchdog_s: float = 300.0):
        self.lifetime = lifetime or Lifetime()
        self.timeline = timeline or Timeline()
        self.watchdog_s = watchdog_s
        self.lanes: list[Lane] = []
        self._watchdog: threading.Thread | None = None
        self.interrupted_at: float | None = None  # monotonic time of the first SIGTERM / Ctrl-C
        self.stopped_after_s: float | None = None  # first signal -> every lane stopped and joined
        self.lifetime.busy_elsewhere = self._busy_elsewhere

    def _busy_elsewhere(self, window_s: float) -> bool:
        me, now = threading.current_thread(), time.monotonic()
        return any(lane.busy or now - lane.last_active < window_s for lane in self.lanes if lane.thread is not me)

    def add(self, name: str, body: Callable[[Lane], bool | None]) -> Lane:
        lane = Lane(name, body, self.lifetime, self.timeline)
        self.lanes.append(lane)
        return lane

    def _watch(self) -> None:
        period = min(max(self.watchdog_s / 10, 0.01), 1.0)
        while self.lifetime.sleep(period):
            now = time.monotonic()
            for lane in self.lanes:
                busy, limit = lane.busy_for(now), lane.limit(self.watchdog_s)
                if busy > limit:
                    err = LaneStalled(f"lane {lane.name!r} stalled: busy {busy:.2f} s without a heartbeat "
                                      f"(limit {limit:.3g} s: watchdog {self.watchdog_s:.3g} s"
                                      f"{', first call' if lane.iterations == 0 else ''})")
                    self.lifetime.stop(err, lane.name)
                    return

    def run(self, timeout: float | None = None, on_interrupt: Callable[[], None] | None = None,
            join_timeout: float | Callable[[], float] = 10.0, handle_sigterm: bool = True,
            drain: Callable[[], float] | None = None, stop: Callable[[], bool] | None = None) -> str:
        """Start every lane, wait for all to finish; returns 'done' or 'interrupted'.

        Re-raises the first lane error (original traceback, note naming the lane). `timeout`
        bounds the whole run (raises `PipelineTimeout`). Installs a SIGTERM handler while
        running when called from the main thread. `drain` / `on_interrupt`: see the module
        docstring. `join_timeout` (seconds, or a function giving them when the lanes stop)
        bounds the wait for the lanes after the stop. `stop`: a flag someone else keeps (e.g.
        `vlajax.training.preemption.StopRequest.local`, which owns the signals): polled instead of
        installing a handler; its first True counts as the first interrupt.
        """
        sigterms: list[float] = []
        old_handler = None
        if stop is None and handle_sigterm and threading.current_thread() is threading.main_thread():
            old_handler = signal.signal(signal.SIGTERM, lambda *_: sigterms.append(time.monotonic()))
        deadline = None if timeout is None else time.monotonic() + timeout
        interrupts, handled, aborted = 0, 0, False
        drain_deadline, bound = None, 0.0
        try:
            self.start()
            while True:
                try:
                    while not all(lane.done.is_set() for lane in self.lanes) and not self.lifetime.stopped:
                        if len(sigterms) > handled:
                            handled += 1
                            raise KeyboardInterrupt("SIGTERM")
                        if stop is not None and not interrupts and stop():
                            raise KeyboardInterrupt("stop requested")
                        now = time.monotonic()
                        if deadline is not None and now > deadline:
                            self.lifetime.stop(PipelineTimeout(f"run exceeded {timeout:.3g} s"), "main")
                            break
                        if drain_deadline is not None and now > drain_deadline:
                            self.lifetime.stop(PipelineTimeout(
                                f"interrupted, but the lanes did not reach a safe stopping point within {bound:.3g} s "
                                f"(still running: {', '.join(self.alive)})"), "main")
                            break
                        time.sleep(_POLL_S)
                    break
                except KeyboardInterrupt:
                    interrupts += 1
                    if interrupts == 1:
                        self.interrupted_at = time.monotonic()
                    if interrupts == 1 and drain is not None:
                        bound = drain()
                        drain_deadline = time.monotonic() + bound
                        continue
                    aborted = interrupts > 1
                    break
        finally:
            self.lifetime.stop()
            if not aborted:
                self._join(join_timeout() if callable(join_timeout) else join_timeout)
                if self.interrupted_at is not None:
                    self.stopped_after_s = time.monotonic() - self.interrupted_at
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
        if aborted:
            raise RunAborted("a second interrupt: stopped at once without saving; the last complete checkpoint "
                             "is kept")
        if self.lifetime.error is not None:
            raise self.lifetime.error
        if self.alive:
            raise PipelineTimeout(f"lanes still running after the stop: {', '.join(self.alive)}")
        if interrupts:
            if drain is None and on_interrupt is not None:
                on_interrupt()
            return "interrupted"
        return "done"

    def start(self) -> None:
        """Start every lane not yet started, and the watchdog (idempotent)."""
        for lane in self.lanes:
            if lane.thread.ident is None:
                lane.thread.start()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name="lane:watchdog", daemon=True)
            self._watchdog.start()

    def stop(self, join_timeout: float = 10.0) -> None:
        """Stop every lane and join them (bounded); use after `start()` without `run()`."""
        self.lifetime.stop()
        self._join(join_timeout)

    def _join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for lane in self.lanes:
            if lane.thread.is_alive():
                lane.thread.join(max(deadline - time.monotonic(), 0.0))

    @property
    def alive(self) -> list[str]:
        return [lane.name for lane in self.lanes if lane.thread.is_alive()]
