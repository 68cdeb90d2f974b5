"""The parent side of the LIBERO workers (runs in our .venv): spawn N worker processes with the LIBERO
venv's python, deal them episodes, gather one result per episode, restart the dead and the hung.

    with WorkerPool(workers=2, policy_url="ws://127.0.0.1:8000", frames_dir=d) as pool:
        results = pool.run([Episode("t0-i0", "libero_spatial", 0, 0), ...])   # {id: result dict}

Faults: a worker whose channel closes (it died) or that has sent nothing for `hang_timeout_s`
while it holds episodes (it hangs; `startup_timeout_s` while it starts or builds an env) is killed
(SIGKILL) and replaced; its unfinished episodes go back to the front of the queue and run again
from their initial state. A result counts once: it is taken only from the worker generation the
episode is assigned to, and only the first time.
After `max_attempts` runs lost to dead workers an episode is recorded as an error. An episode the
worker itself reports as failed (an exception: a server error, a bad answer) is an error and is
not re-run (it would fail again).

Stops: every process this module starts (workers, `describe`) runs in a session of its own (a terminal's
Ctrl-C reaches the parent only) and is listed until it is reaped, so a stop that abandons the run
(`vlajax.preemption`: its cleanup, then `os._exit`) calls `kill_all()` from its watcher thread: SIGKILL to
each one's process group, reaped, and no new one starts in this process after it. A second signal, which
exits at once (130), runs `kill_all(reap=False)` first (`preemption.on_hard_exit`). Nothing is orphaned.

The LIBERO venv is `.venv-libero` in the repo (`make libero`), or `$VLAJAX_LIBERO_VENV`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vlajax import preemption
from vlajax.libero import protocol as P

log = logging.getLogger(__name__)

__all__ = ["REPO", "LiberoEnvMissing", "WorkerPool", "describe", "kill_all", "libero_python"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LIVE: dict[int, subprocess.Popen] = {}  # pid -> a process started here and not reaped yet
_LIVE_LOCK = threading.Lock()
_EXITING = threading.Event()  # set by kill_all: this process is about to exit, start nothing more


def _start(cmd: list[str], **kw) -> subprocess.Popen:
    """Popen in a session of its own, listed for `kill_all` (after `kill_all`: never returns)."""
    with _LIVE_LOCK:
        if not _EXITING.is_set():
            popen = subprocess.Popen(cmd, start_new_session=True, **kw)
            _LIVE[popen.pid] = popen
            return popen
    threading.Event().wait()  # the process is exiting (kill_all's caller exits next): start no worker
    raise AssertionError("unreachable")


def _reaped(popen: subprocess.Popen) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(popen.pid, None)


def kill_all(timeout_s: float = 10.0, reap: bool = True) -> list[int]:
    """SIGKILL every process this module started and has not reaped (each one's process group), reap them
    (unless `reap` is False: the second signal's exit, which must not wait), and start none after it (a later
    `_start` blocks). For a process about to exit (a stop's cleanup, from any thread). -> the pids killed."""
    with _LIVE_LOCK:
        _EXITING.set()
        procs = list(_LIVE.values())
        _LIVE.clear()
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    for p in procs if reap else ():
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
    return [p.pid for p in procs]


# a second signal's exit leaves no worker behind: SIGKILL only, no reaping (the exit must come at once, before
# the main thread can finish a stop of its own; the killed workers are reaped by whoever adopts them)
preemption.on_hard_exit(functools.partial(kill_all, reap=False))


class LiberoEnvMissing(RuntimeError):
    """The LIBERO venv is not there (the text says how to create it)."""


def libero_venv() -> str:
    return os.environ.get("VLAJAX_LIBERO_VENV") or os.path.join(REPO, ".venv-libero")


def libero_python() -> str:
    """The LIBERO venv's python, or LiberoEnvMissing naming the command that creates it."""
    venv = libero_venv()
    py = os.path.join(venv, "bin", "python")
    if not (os.path.isfile(os.path.join(venv, ".installed")) and os.access(py, os.X_OK)):
        raise LiberoEnvMissing(f"the LIBERO environment {venv} is missing; create it with `make libero` "
                               f"(or `bash scripts/setup_libero.sh {venv}`)")
    return py


class _Proc:
    """One worker process and what it holds."""

    def __init__(self, index: int, gen: int, popen: subprocess.Popen, log_path: str):
        self.index, self.gen, self.popen, self.log_path = index, gen, popen, log_path
        self.assigned: dict[str, P.Episode] = {}
        self.last_heard = time.monotonic()
        self.last_key: tuple | None = None
        self.events = 0
        self.quiet_ok = True  # starting or building an env: the start-up timeout applies, not the hang one

    def alive(self) -> bool:
        return self.popen.poll() is None


class WorkerPool:
    """N LIBERO worker processes (see the module docstring)."""

    def __init__(self, workers: int, policy_url: str | None = None, *, envs_per_worker: int = 1,
                 frames_dir: str | None = None, log_dir: str | None = None, gl: str = "egl",
                 hang_timeout_s: float = 300.0, startup_timeout_s: float = 600.0, max_attempts: int = 3,
                 python: str | None = None, env: dict[str, str] | None = None):
        if workers < 1 or envs_per_worker < 1:
            raise ValueError("workers and envs_per_worker must be >= 1")
        self.python = python or libero_python()
        self.policy_url, self.envs, self.frames_dir, self.gl = policy_url, envs_per_worker, frames_dir, gl
        self.log_dir = log_dir or frames_dir
        self.hang_timeout_s, self.startup_timeout_s = hang_timeout_s, startup_timeout_s
        self.max_attempts = max_attempts
        self.extra_env = dict(env or {})  # more environment variables of the workers (e.g. LP_NUM_THREADS)
        self.inbox: queue.Queue = queue.Queue()
        self.procs: list[_Proc] = []
        self._gen = 0
        self.restarts = 0
        self.events: list[dict[str, Any]] = []  # faults and restarts, for the report
        for i in range(workers):
            self.procs.append(self._spawn(i))

    # ------------------------------------------------------------ processes

    def _spawn(self, index: int) -> _Proc:
        self._gen += 1
        cmd = [self.python, "-u", "-m", "vlajax.libero.worker", "--envs", str(self.envs), "--gl", self.gl]
        if self.policy_url:
            cmd += ["--policy", self.policy_url]
        if self.frames_dir:
            cmd += ["--frames-dir", self.frames_dir]
        env = {**os.environ, "PYTHONPATH": REPO, "MUJOCO_GL": self.gl, "PYOPENGL_PLATFORM": self.gl,
               **self.extra_env}
        for k in ("JAX_PLATFORMS", "XLA_FLAGS", "VIRTUAL_ENV"):
            env.pop(k, None)
        log_dir = self.log_dir or os.path.join(REPO, "runs", "libero")
        os.makedirs(log_dir, exist_ok=True)
        log_path = os.path.join(log_dir, f"worker{index}.gen{self._gen}.log")
        with open(log_path, "wb") as err:
            popen = _start(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env)
        proc = _Proc(index, self._gen, popen, log_path)
        threading.Thread(target=self._read, args=(proc,), daemon=True, name=f"libero-worker{index}").start()
        return proc

    def _read(self, proc: _Proc) -> None:
        for line in proc.popen.stdout:
            msg = P.read_line(line)
            if msg is not None:
                self.inbox.put((proc.gen, msg))
        self.inbox.put((proc.gen, None))

    def _send(self, proc: _Proc, obj: dict[str, Any]) -> bool:
        try:
            proc.popen.stdin.write((json.dumps(obj) + "\n").encode())
            proc.popen.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def _kill(self, proc: _Proc) -> None:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)  # the worker and anything it started
        proc.popen.wait(30)
        _reaped(proc.popen)
        for f in (proc.popen.stdin, proc.popen.stdout):
            with contextlib.suppress(OSError):
                f.close()

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs]

    # ------------------------------------------------------------ episodes

    def run(self, episodes: Sequence[P.Episode], on_result: Callable[[dict], None] | None = None,
            on_event: Callable[[int, dict], None] | None = None,
            abort: Callable[[], bool] | None = None) -> dict[str, dict[str, Any]]:
        """Run every episode once; -> {episode id: result} (a result has 'success'; an error has 'error').
        `abort()` (polled about every second) True: return the results so far at once (the episodes still
        running stay with their workers until `close`)."""
        ids = [e.id for e in episodes]
        if len(set(ids)) != len(ids):
            raise ValueError("episode ids must be unique")
        pending = collections.deque(episodes)
        attempts: dict[str, int] = collections.Counter()
        results: dict[str, dict[str, Any]] = {}
        by_gen = {p.gen: p for p in self.procs}

        def finish(ep_id: str, res: dict[str, Any]) -> None:
            if ep_id in results:  # never twice
                return
            results[ep_id] = res
            if on_result is not None:
                on_result(res)

        def replace(proc: _Proc, why: str) -> None:
            self._kill(proc)
            lost = list(proc.assigned.values())
            self.restarts += 1
            self.events.append({"worker": proc.index, "pid": proc.popen.pid, "why": why,
                                "episodes": [e.id for e in lost], "time": time.time()})
            log.warning("libero: worker %d (pid %d) %s; re-running %s", proc.index, proc.popen.pid, why,
                        [e.id for e in lost] or "nothing")
            for ep in reversed(lost):
                attempts[ep.id] += 1
                if attempts[ep.id] >= self.max_attempts:
                    finish(ep.id, {"id": ep.id, "suite": ep.suite, "task": ep.task, "init": ep.init, "success": False,
                                   "error": f"lost {attempts[ep.id]} times to dead or hung workers ({why})"})
                else:
                    pending.appendleft(ep)
            new = self._spawn(proc.index)
            self.procs[proc.index] = new
            by_gen[new.gen] = new

        while len(results) < len(episodes) and not (abort is not None and abort()):
            for proc in self.procs:  # deal: an episode of the task the worker has built first
                while pending and len(proc.assigned) < self.envs and proc.alive():
                    k = next((i for i, e in enumerate(pending) if (e.suite, e.task) == proc.last_key), 0)
                    ep = pending[k]
                    del pending[k]
                    if ep.id in results:
                        continue
                    proc.assigned[ep.id] = ep
                    proc.last_key = (ep.suite, ep.task)
                    if not self._send(proc, {"cmd": "episode", **ep.to_json()}):
                        break  # it died: its channel's end replaces it
                    proc.last_heard = time.monotonic()
            try:
                gen, msg = self.inbox.get(timeout=1.0)
            except queue.Empty:
                gen, msg = None, None
            proc = by_gen.get(gen)
            if proc is not None and self.procs[proc.index] is proc:  # messages of replaced workers are dropped
                if msg is None:
                    replace(proc, f"exited (code {proc.popen.wait(30)})")
                else:
                    proc.last_heard = time.monotonic()
                    proc.events += 1
                    if msg.get("event") in ("building", "built", "progress", "hello"):
                        proc.quiet_ok = msg["event"] == "building"
                    if on_event is not None:
                        on_event(proc.index, msg)
                    ep_id = msg.get("id")
                    if msg.get("event") in ("result", "error") and ep_id in proc.assigned:
                        ep = proc.assigned.pop(ep_id)
                        if msg["event"] == "error":
                            msg = {"id": ep_id, "suite": ep.suite, "task": ep.task, "init": ep.init,
                                   "success": False, "error": msg.get("message", "")}
                        finish(ep_id, {**msg, "attempts": attempts[ep_id] + 1})
            now = time.monotonic()
            for p in list(self.procs):
                limit = self.startup_timeout_s if p.quiet_ok else self.hang_timeout_s
                if p.assigned and now - p.last_heard > limit:
                    replace(p, f"sent nothing for {now - p.last_heard:.0f} s (hang)")
                elif not p.alive() and p.assigned and self.inbox.empty():
                    replace(p, f"exited (code {p.popen.returncode})")
        return results

    def close(self) -> None:
        for p in self.procs:
            if p.alive():
                self._send(p, {"cmd": "exit"})
        deadline = time.monotonic() + 20
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            self._kill(p)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe(suites: Sequence[str], python: str | None = None, timeout_s: float = 300.0) -> dict[str, Any]:
    """{suite: {'n_tasks', 'n_init', 'tasks'} or None (no such suite)}, asked of the LIBERO venv (~2 s)."""
    py = python or libero_python()
    env = {**os.environ, "PYTHONPATH": REPO}
    popen = _start([py, "-m", "vlajax.libero.worker", "--describe", *suites], cwd=REPO, env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = popen.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.communicate()
        raise
    finally:
        _reaped(popen)
    out = subprocess.CompletedProcess(popen.args, popen.returncode, stdout, stderr)
    for line in out.stdout.decode(errors="replace").splitlines():
        msg = P.read_line(line)
        if msg and msg.get("event") == "describe":
            return msg["suites"]
    raise RuntimeError(f"the LIBERO worker could not describe {list(suites)} (exit {out.returncode}): "
                       f"{out.stderr.decode(errors='replace')[-2000:]}")
