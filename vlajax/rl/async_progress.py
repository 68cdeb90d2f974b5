"""Terminal progress of the asynchronous RL loop: updates, env steps/s, staleness and success.

`AsyncProgress` wraps `vlajax.training.logging.Progress` (a rich bar in a terminal, plain lines
otherwise, nothing on processes other than 0 or with `logging.progress='none'`) and adds a
heartbeat: an update of the async loop can take minutes (the first one compiles the rollout and
the learner), so a background thread reports whenever nothing was shown for `heartbeat_s`
seconds (25 s, checked every 2.5 s: a line at least every 30 s) -- in plain mode one line with
the env steps produced so far and the seconds since the last update; in rich mode it refreshes
the bar's metrics. Each update reports:

    [rl async NAME] 3/20 (0.05 it/s) env_sps=412.3 staleness=1 success=0.375 eval=0.45

`env_sps` is the env steps the rollout lanes produced since the previous report over its wall
time; `staleness` the largest policy lag (in versions) of the samples that update trained on;
`success` the rollout's success rate on those samples (when the rollout path records it);
`eval` the newest closed-loop evaluation's mean success.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from vlajax.training.logging import Progress, print_line

HEARTBEAT_S = 25.0  # silence before a heartbeat line; checked every 2.5 s, so lines come at most ~28 s apart


class AsyncProgress:
    """`update(u, ...)` after each optimizer update; `evaluated(success)` after each evaluation.

    `env_steps()` returns the env steps produced so far (called from the heartbeat thread too).
    Use as a context manager: the heartbeat thread runs inside it.
    """

    def __init__(self, total: int, description: str, mode: str, every: int, start: int,
                 env_steps: Callable[[], float], heartbeat_s: float = HEARTBEAT_S, clock=time.perf_counter):
        self.progress = Progress(total, description, mode, every, start)
        self.mode, self.total, self.every = self.progress.mode, total, max(1, every)
        self.description, self.heartbeat_s, self.clock = description, heartbeat_s, clock
        self._env_steps = env_steps
        self._lock = threading.Lock()
        self._stop = threading.Event()
        now = clock()
        self._t_update = self._t_report = self._t_print = now
        self._steps_report = float(env_steps())
        self._update = self._start = start
        self._metrics: dict[str, float] = {}
        self._thread: threading.Thread | None = None

    # ---- reports --------------------------------------------------------------------------

    def _rate(self, now: float) -> float:
        steps = float(self._env_steps())
        rate = (steps - self._steps_report) / max(now - self._t_report, 1e-9)
        self._steps_report, self._t_report = steps, now
        return rate

    def update(self, update: int, staleness: float, success: float | None = None) -> None:
        """Report optimizer update `update` (1-based)."""
        with self._lock:
            now = self.clock()
            m = {"env_sps": self._rate(now), "staleness": staleness}
            if success is not None:
                m["success"] = success
            if "eval" in self._metrics:
                m["eval"] = self._metrics["eval"]
            self._metrics, self._update, self._t_update = m, update, now
            self.progress.update(update, m)
            if self.mode == "plain" and (update % self.every == 0 or update == self.total):
                self._t_print = now

    def evaluated(self, mean_success: float) -> None:
        with self._lock:
            self._metrics["eval"] = mean_success

    def heartbeat(self) -> str | None:
        """Report now if nothing was shown for `heartbeat_s`. -> the plain line printed, if any."""
        with self._lock:
            now = self.clock()
            if self.mode == "none" or now - self._t_print < self.heartbeat_s:
                return None
            self._t_print = now
            m = {**self._metrics, "env_sps": self._rate(now)}
            if self.mode == "rich":
                self.progress.update(self._update, m)
                return None
            doing = f"waiting for update {self._update + 1}" if self._update < self.total else "finishing"
            since = "the start" if self._update == self._start else "the last update"
            line = (f"[{self.description}] {self._update}/{self.total} ({doing}: {now - self._t_update:.0f} s "
                    f"since {since}) env_steps={int(self._steps_report)} {Progress._fmt(m)}")
            print_line(line)
            return line

    # ---- the heartbeat thread -------------------------------------------------------------

    def _beat(self) -> None:
        while not self._stop.wait(min(2.5, self.heartbeat_s / 4)):
            self.heartbeat()

    def __enter__(self) -> AsyncProgress:
        if self.mode != "none":
            self._thread = threading.Thread(target=self._beat, name="async-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.progress.close()
