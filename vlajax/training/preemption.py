"""Stop a run wherever SIGTERM / Ctrl-C lands: the preemption path of `sft` and of both `rl` loops.

A preemptible cluster (SLURM, Kubernetes, spot VMs) sends SIGTERM and kills the job a grace period
later. The command installs one `StopRequest` as it starts (`stop_request(what)`; the loops enter the
same one again), so a signal never meets Python's default action (exit -15) from set-up to exit.
The first SIGTERM or Ctrl-C then does one of two things, depending on where it lands:

- inside an *abandonable* region (`with stop.abandonable(doing, kept, cleanup):`) -- work that
  would lose nothing if dropped: set-up, compiles, a restore, an evaluation after its step's
  checkpoint was written, a step whose predecessor is saved -- the watcher thread abandons it at
  once: `cleanup()` (wait for a checkpoint write in flight, flush TensorBoard), one line on stderr
  (`rl: SIGTERM during the evaluation at iteration 3: abandoned it; newest checkpoint: iteration 3;
  exit 0`) and `os._exit(0)`. Nothing is waited for but the write in flight; a long XLA call (an
  evaluation, a compile) cannot delay the exit because nothing waits for it.
- anywhere else (a step with unsaved predecessors in flight) it only sets a flag; the loop reads
  `stop.requested()` after the step, saves that step's checkpoint (forced) and leaves with status
  "interrupted", printing the same kind of line (`stop.report`). The wait is one step.

The same command run again resumes from the newest checkpoint. A second signal exits at once (code
130) without waiting for anything: Orbax renames a checkpoint into place only when it is whole. Only the
`on_hard_exit` hooks run first (killing child processes that no terminal signal reaches).

Multi-process runs: a signal may reach some processes and not others, and a process that left
alone would leave its peers hanging in the next collective. So once a loop marks the request
`collective` (more than one process), regions are not abandoned: `requested` agrees on the flag
across processes at every step boundary (one tiny all-gather) and all stop after the same step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import jax
import numpy as np

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_ACTIVE: StopRequest | None = None  # the installed one (one per process)
_HARD_EXIT_HOOKS: list[Callable[[], object]] = []  # run before a second signal's os._exit(130)


def on_hard_exit(fn: Callable[[], object]) -> Callable[[], object]:
    """Register `fn()` to run, from the signal watcher thread, just before a second signal's `os._exit(130)`;
    its exceptions are ignored. For what must not outlive the process and that no terminal signal reaches:
    e.g. the LIBERO worker processes, each in a session of its own (`vlajax.libero.pool.kill_all`)."""
    if fn not in _HARD_EXIT_HOOKS:
        _HARD_EXIT_HOOKS.append(fn)
    return fn


def nothing_new(step: int | None, unit: str) -> str:
    """What an abandoned phase kept: the stop line's tail (`unit`: 'step', 'iteration', 'update')."""
    return "nothing new to save; " + ("no checkpoint yet" if step is None else f"newest checkpoint: {unit} {step}")


def stop_request(what: str) -> StopRequest:
    """The process's installed `StopRequest` (entering it again nests), or a new one for `what`."""
    return _ACTIVE if _ACTIVE is not None else StopRequest(what)


class StopRequest:
    """Context manager: the first SIGTERM / SIGINT abandons an abandonable region at once or asks
    for a stop at the next step boundary; the second exits the process at once (code 130).

    Python runs signal handlers in the main thread between bytecodes, i.e. only after a long
    compile or a blocking device wait returns. So the handlers here do nothing themselves: the C
    level writes each signal's number to a wakeup pipe (`signal.set_wakeup_fd`) the moment it
    arrives, and a watcher thread reads it -- and acts at once, even mid-compile. Installed only
    in the main thread (elsewhere signals cannot be caught; the run then goes on as before);
    re-entrant (nested `with` blocks share one installation); everything is restored on the
    outermost exit.
    """

    def __init__(self, what: str):
        self.what = what
        self.signal_name: str | None = None  # the first signal received, e.g. "SIGTERM"
        self.collective = False  # more than one process: never abandon alone (see the module docstring)
        self._old: dict[int, object] = {}
        self._old_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._depth = 0
        self._lock = threading.RLock()  # the watcher vs entering / leaving an abandonable region
        self._region: tuple[str, Callable[[], str], Callable[[], None] | None] | None = None

    def __enter__(self) -> StopRequest:
        global _ACTIVE
        self._depth += 1
        if self._depth > 1 or threading.current_thread() is not threading.main_thread():
            return self
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._old = {s: signal.signal(s, _ignore) for s in _SIGNALS}
        self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(r,), name=f"{self.what}-signals", daemon=True).start()
        _ACTIVE = self
        log.info("%s: SIGTERM / Ctrl-C from here on stop the run (at once where nothing would be lost, else after "
                 "the current step with its checkpoint; a second one exits at once)", self.what)
        return self

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        self._depth -= 1
        if self._depth > 0 or self._pipe is None:
            return
        signal.set_wakeup_fd(self._old_fd)
        for s, old in self._old.items():
            signal.signal(s, old)
        os.close(self._pipe[1])  # the watcher reads EOF and ends (it closes the read end)
        self._old, self._pipe = {}, None
        if _ACTIVE is self:
            _ACTIVE = None

    def _watch(self, r: int) -> None:
        try:
            while data := os.read(r, 64):
                for signum in data:
                    if signum in _SIGNALS:
                        self._received(signal.Signals(signum).name)
        finally:
            os.close(r)

    def _received(self, name: str) -> None:
        if self.signal_name is not None:
            print(f"error: {self.what}: a second interrupt ({name}): exiting at once without saving; the last "
                  "complete checkpoint is kept", file=sys.stderr, flush=True)
            for hook in _HARD_EXIT_HOOKS:
                with contextlib.suppress(Exception):
                    hook()
            os._exit(130)
        with self._lock:
            self.signal_name = name
            if self._region is not None and not self.collective:
                self._abandon(*self._region)
        log.warning("%s: %s received: stopping after the current step, with a checkpoint "
                    "(send it again to exit at once)", self.what, name)

    @contextlib.contextmanager
    def abandonable(self, doing: str, kept: Callable[[], str],
                    cleanup: Callable[[], None] | None = None) -> Iterator[None]:
        """A region whose work may be dropped: a signal inside it (or before it) ends the process
        with code 0 -- `cleanup()` (e.g. wait for the checkpoint write in flight), then the line
        `<what>: <SIGNAL> during <doing>: abandoned it; <kept()>; exit 0`. The caller must not be
        writing anything `cleanup` waits for while inside (enter after issuing a save)."""
        with self._lock:
            if self.signal_name is not None and not self.collective:
                self._abandon(doing, kept, cleanup)
            outer, self._region = self._region, (doing, kept, cleanup)
        try:
            yield
        finally:
            with self._lock:
                self._region = outer

    def _abandon(self, doing: str, kept: Callable[[], str], cleanup: Callable[[], None] | None,
                 verb: str = "abandoned it; ") -> None:
        code = 0
        try:
            if cleanup is not None:
                cleanup()
            what_kept = kept()
        except BaseException as e:  # noqa: BLE001 - the exit below must happen whatever failed
            what_kept, code = f"the cleanup failed ({type(e).__name__}: {e})", 1
        print(f"{self.what}: {self.reason} during {doing}: {verb}{what_kept}; exit {code}", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        os._exit(code)

    def exit_now(self, doing: str, did: str, cleanup: Callable[[], None] | None = None) -> None:
        """After a stop at a boundary whose checkpoint is written: drop whatever else is in flight
        (other threads' calls) -- `cleanup()`, the line `<what>: <SIGNAL> during <doing>: <did>; exit 0`,
        `os._exit(0)`. Not with `collective` (a peer may still be in a collective): returns then."""
        if self.collective:
            return
        with self._lock:
            self._abandon(doing, lambda: did, cleanup, verb="")

    def report(self, doing: str, did: str) -> None:
        """The one line of a stop at a step boundary: `<what>: <SIGNAL> during <doing>: <did>; exit 0`."""
        print(f"{self.what}: {self.reason} during {doing}: {did}; exit 0", file=sys.stderr, flush=True)

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

    def local(self) -> bool:
        """Whether this process got a signal (no collective: safe from any thread, any time)."""
        return self.signal_name is not None


class UpdateBoundaries:
    """Where an async run (`vlajax.pipeline.AsyncRunner`) stops: shared by the tabletop `train_async`
    and the LIBERO loop.

    `scope(runner)` is the runner's `update_scope`: an update whose predecessor is saved (or this run's
    first, with its compiles) is abandonable; any other finishes. `interrupt(runner)` is its
    `on_interrupt`, in the trainer lane at the boundary after a stop: wait for the write in flight, save
    the update (forced) if it is new, then `stop.exit_now` with one line that says what it did and
    `dropped` (what the other lanes had in flight). `newest` is the caller's `{"step": newest
    checkpoint}` (its `save` updates it)."""

    def __init__(self, stop: StopRequest, ckpt, start: int, newest: dict, save: Callable[[object, bool], None],
                 cleanup: Callable[[], None], run: str, dropped: str):
        self.stop, self.ckpt, self.start, self.newest = stop, ckpt, start, newest
        self.save, self.cleanup, self.run, self.dropped = save, cleanup, run, dropped

    def kept(self) -> str:
        return nothing_new(self.newest["step"], "update")

    def scope(self, runner) -> contextlib.AbstractContextManager:
        u = runner.counters.updates
        if u == self.start or u == self.newest["step"]:
            return self.stop.abandonable(f"update {u + 1} (its predecessor is saved)", self.kept, self.cleanup)
        return contextlib.nullcontext()

    def interrupt(self, runner) -> None:
        self.ckpt.wait()  # the newest update may already be saved (every_steps=1, or a forced save)
        u = runner.counters.updates
        did = f"stopped at the boundary after update {u}"
        if u != self.start and u not in self.ckpt.all_steps():
            self.save(runner, True)
            did += f", saved checkpoint {u}, {self.dropped}"
        else:
            did += f", {self.dropped}; {self.kept()}"
        log.info("%s: interrupted after update %d; checkpoint in %s", self.stop.what, u, self.ckpt.directory)
        self.stop.exit_now(f"{self.run} at update {u}", did, self.cleanup)  # multi-process: returns


def _ignore(signum: int, frame) -> None:
    """The Python-level handler: nothing (the wakeup pipe's watcher acts), but not the default
    action (which would end the process)."""
