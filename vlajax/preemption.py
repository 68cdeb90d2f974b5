"""Stop a step loop at its next boundary on SIGTERM / Ctrl-C: the preemption path of `sft` and the
synchronous `rl` loop (the asynchronous loop's lanes have their own: `vlajax.pipeline.lanes`).

A preemptible cluster (SLURM, Kubernetes, spot VMs) sends SIGTERM and kills the job a grace period
later. Inside `with StopRequest("sft") as stop:` the first SIGTERM or Ctrl-C only sets a flag; the
loop reads `stop.requested(...)` after each completed step, saves that step's checkpoint (forced,
so the periodic cadence does not matter) and leaves with status "interrupted". The same command
run again resumes from it. A second signal exits at once (code 130) without waiting for the step
or a write in flight: the newest complete checkpoint (Orbax renames a checkpoint into place only
when it is whole) is the one to resume from.

Multi-process runs: a signal may reach some processes and not others, and processes that stop at
different steps would hang in the next collective. With more than one process, `requested` agrees
on the flag across processes every step (one tiny all-gather), so all stop after the same step.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import jax
import numpy as np

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Context manager: the first SIGTERM / SIGINT requests a stop at the next step boundary, the
    second exits the process at once (code 130).

    Python runs signal handlers in the main thread between bytecodes, i.e. only after a long
    compile or a blocking device wait returns. So the handlers here do nothing themselves: the C
    level writes each signal's number to a wakeup pipe (`signal.set_wakeup_fd`) the moment it
    arrives, and a watcher thread reads it -- the first is logged at once (even mid-compile), the
    second ends the process at once. Installed only in the main thread (elsewhere signals cannot
    be caught; the loop then runs as before); everything is restored on exit.
    """

    def __init__(self, what: str):
        self.what = what
        self.signal_name: str | None = None  # the first signal received, e.g. "SIGTERM"
        self._old: dict[int, object] = {}
        self._old_fd = -1
        self._pipe: tuple[int, int] | None = None

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._old = {s: signal.signal(s, _ignore) for s in _SIGNALS}
        self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(r,), name=f"{self.what}-signals", daemon=True).start()
        log.info("%s: SIGTERM / Ctrl-C from here on stop after the current step with its checkpoint "
                 "(a second one exits at once)", self.what)
        return self

    def __exit__(self, *exc) -> None:
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._old_fd)
        for s, old in self._old.items():
            signal.signal(s, old)
        os.close(self._pipe[1])  # the watcher reads EOF and ends (it closes the read end)
        self._old, self._pipe = {}, None

    def _watch(self, r: int) -> None:
        try:
            while data := os.read(r, 64):
                for signum in data:
                    if signum in _SIGNALS:
                        self._received(signal.Signals(signum).name)
        finally:
            os.close(r)

    def _received(self, name: str) -> None:
        if self.signal_name is None:
            self.signal_name = name
            log.warning("%s: %s received: stopping after the current step, with a checkpoint "
                        "(send it again to exit at once)", self.what, name)
            return
        print(f"error: {self.what}: a second interrupt ({name}): exiting at once without saving; the last "
              "complete checkpoint is kept", file=sys.stderr, flush=True)
        os._exit(130)

    @property
    def reason(self) -> str:
        """What asked for the stop, for the log: the signal's name, or another process's signal."""
        return self.signal_name or "a signal to another process"

    def requested(self) -> bool:
        """Whether to stop after the step just completed (the same answer on every process)."""
        local = self.signal_name is not None
        if jax.process_count() == 1:
            return local
        from jax.experimental import multihost_utils

        return bool(np.max(multihost_utils.process_allgather(np.int32(local))))


def _ignore(signum: int, frame) -> None:
    """The Python-level handler: nothing (the wakeup pipe's watcher acts), but not the default
    action (which would end the process)."""
