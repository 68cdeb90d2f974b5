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
(`vlajax.training.preemption`: its cleanup, then `os._exit`) calls `kill_all()` from its watcher thread: SIGKILL to
each one's process group, reaped, and no new one starts in this process after it. A second signal, which
exits at once (130), runs `kill_all(reap=False)` first (`preemption.on_hard_exit`). Nothing is orphaned.

Backends: `LocalLauncher` (the default: processes of this host, above) or `vlajax.libero.ray_pool.RayLauncher`
(each worker a Ray actor on some node of a cluster, supervising its LIBERO process there); the dealing, the
fault handling and the results are this module's for both (`launcher=`; `vlajax.libero.backend.make_pool`).

The LIBERO venv is `.venv-libero` in the repo (`make libero`), or `$VLAJAX_LIBERO_VENV`.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import functools
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vlajax.libero import protocol as P
from vlajax.libero.launch import REPO, LiberoEnvMissing, libero_python, libero_venv, worker_command, worker_env
from vlajax.training import preemption

log = logging.getLogger(__name__)

__all__ = ["REPO", "LiberoEnvMissing", "LocalLauncher", "WorkerPool", "describe", "kill_all", "libero_python",
           "libero_venv", "on_kill_all"]

_LIVE: dict[int, subprocess.Popen] = {}  # pid -> a process started here and not reaped yet
_LIVE_LOCK = threading.Lock()
_EXITING = threading.Event()  # set by kill_all: this process is about to exit, start nothing more
_KILL_HOOKS: list[Callable[[], None]] = []  # other backends' kill_all (the Ray launcher: kill its actors)


def on_kill_all(hook: Callable[[], None]) -> Callable[[], None]:
    """Run `hook()` in every later `kill_all` (a backend whose workers are not processes of this host).
    -> a function that removes it again."""
    _KILL_HOOKS.append(hook)
    return lambda: _KILL_HOOKS.remove(hook) if hook in _KILL_HOOKS else None


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
    for hook in list(_KILL_HOOKS):
        with contextlib.suppress(Exception):  # a stop's cleanup goes on whatever one backend says
            hook()
    deadline = time.monotonic() + timeout_s
    for p in procs if reap else ():
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
    return [p.pid for p in procs]


# a second signal's exit leaves no worker behind: SIGKILL only, no reaping (the exit must come at once, before
# the main thread can finish a stop of its own; the killed workers are reaped by whoever adopts them)
preemption.on_hard_exit(functools.partial(kill_all, reap=False))


class _Proc(abc.ABC):
    """One worker and what it holds; a backend says how it runs (`_LocalProc` here, a Ray actor in
    `vlajax.libero.ray_pool`). Its channel's messages go to the pool's inbox as (gen, message), then
    (gen, None) once the channel ended."""

    def __init__(self, index: int, gen: int, log_path: str):
        self.index, self.gen, self.log_path = index, gen, log_path
        self.pid = -1  # the LIBERO worker process (on its node)
        self.node = ""  # where it runs ('' = this host)
        self.assigned: dict[str, P.Episode] = {}
        self.last_heard = time.monotonic()
        self.last_key: tuple | None = None
        self.events = 0
        self.quiet_ok = True  # starting or building an env: the start-up timeout applies, not the hang one

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the worker process is still running."""

    @abc.abstractmethod
    def send(self, obj: dict[str, Any]) -> bool:
        """Write one command to the worker; False when it is gone."""

    @abc.abstractmethod
    def kill(self) -> None:
        """SIGKILL the worker (and what it started) and release it; returns once it is gone."""

    @abc.abstractmethod
    def exit_code(self) -> int | None:
        """The worker's exit status once its channel ended (None: unknown or still running)."""

    def end_reason(self) -> str:
        """Why its channel ended, for the report."""
        return f"exited (code {self.exit_code()})"


class _LocalProc(_Proc):
    """A worker process of this host, its channel its stdout."""

    def __init__(self, index: int, gen: int, popen: subprocess.Popen, log_path: str, inbox: queue.Queue):
        super().__init__(index, gen, log_path)
        self.popen, self.pid = popen, popen.pid
        threading.Thread(target=self._read, args=(inbox,), daemon=True, name=f"libero-worker{index}").start()

    def _read(self, inbox: queue.Queue) -> None:
        for line in self.popen.stdout:
            msg = P.read_line(line)
            if msg is not None:
                inbox.put((self.gen, msg))
        inbox.put((self.gen, None))

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, obj: dict[str, Any]) -> bool:
        return P.send_line(self.popen.stdin, obj)

    def kill(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)  # the worker and anything it started
        self.popen.wait(30)
        _reaped(self.popen)
        for f in (self.popen.stdin, self.popen.stdout):
            with contextlib.suppress(OSError):
                f.close()

    def exit_code(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.popen.wait(30)
        return None

    def wait(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)


class LocalLauncher:
    """Workers as processes of this host (the default backend; needs no Ray)."""

    name = "local"

    def __init__(self, python: str | None = None):
        self.python = python or libero_python()

    def spawn(self, pool: WorkerPool, index: int, gen: int) -> _Proc:
        cmd = worker_command(self.python, pool.envs, pool.gl, pool.policy_url, pool.frames_dir)
        env = worker_env(REPO, pool.gl, pool.extra_env)
        log_dir = pool.log_dir or os.path.join(REPO, "runs", "libero")
        os.makedirs(log_dir, exist_ok=True)
        log_path = os.path.join(log_dir, f"worker{index}.gen{gen}.log")
        with open(log_path, "wb") as err:
            popen = _start(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env)
        return _LocalProc(index, gen, popen, log_path, pool.inbox)

    def close(self) -> None:
        pass


class WorkerPool:
    """N LIBERO worker processes (see the module docstring)."""

    def __init__(self, workers: int, policy_url: str | None = None, *, envs_per_worker: int = 1,
                 frames_dir: str | None = None, log_dir: str | None = None, gl: str = "egl",
                 hang_timeout_s: float = 300.0, startup_timeout_s: float = 600.0, max_attempts: int = 3,
                 python: str | None = None, env: dict[str, str] | None = None, launcher=None):
        if workers < 1 or envs_per_worker < 1:
            raise ValueError("workers and envs_per_worker must be >= 1")
        self.launcher = launcher or LocalLauncher(python)
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
        try:
            for i in range(workers):
                self.procs.append(self._spawn(i))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ processes

    def _spawn(self, index: int) -> _Proc:
        self._gen += 1
        return self.launcher.spawn(self, index, self._gen)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    # ------------------------------------------------------------ episodes

    def run(self, episodes: Sequence[P.Episode], on_result: Callable[[dict], None] | None = None,
            on_event: Callable[[int, dict], None] | None = None,
            abort: Callable[[], bool] | None = None) -> dict[str, dict[str, Any]]:
        """Run every episode once; -> {episode id: result} (a result has 'success'; an error has 'error').
        `abort()` (polled about every second) True: return the results so far at once (the episodes still
        running stay with their workers until `close`, or until they end: a later `run` drops their results and
        does not re-run them)."""
        ids = [e.id for e in episodes]
        if len(set(ids)) != len(ids):
            raise ValueError("episode ids must be unique")
        wanted = set(ids)  # (an aborted run's episodes may still be running: theirs are dropped)
        pending = collections.deque(episodes)
        attempts: dict[str, int] = collections.Counter()
        results: dict[str, dict[str, Any]] = {}
        by_gen = {p.gen: p for p in self.procs}

        def finish(ep_id: str, res: dict[str, Any]) -> None:
            if ep_id in results or ep_id not in wanted:  # never twice; nothing of another run
                return
            results[ep_id] = res
            if on_result is not None:
                on_result(res)

        def replace(proc: _Proc, why: str) -> None:
            proc.kill()
            lost = list(proc.assigned.values())
            self.restarts += 1
            self.events.append({"worker": proc.index, "pid": proc.pid, "node": proc.node, "why": why,
                                "episodes": [e.id for e in lost], "time": time.time()})
            log.warning("libero: worker %d (pid %d%s) %s; re-running %s", proc.index, proc.pid,
                        f" on node {proc.node}" if proc.node else "", why, [e.id for e in lost] or "nothing")
            for ep in reversed([e for e in lost if e.id in wanted]):
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
                    if not proc.send({"cmd": "episode", **ep.to_json()}):
                        break  # it died: its channel's end replaces it
                    proc.last_heard = time.monotonic()
            try:
                gen, msg = self.inbox.get(timeout=1.0)
            except queue.Empty:
                gen, msg = None, None
            proc = by_gen.get(gen)
            if proc is not None and self.procs[proc.index] is proc:  # messages of replaced workers are dropped
                if msg is None:
                    replace(proc, proc.end_reason())
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
                    replace(p, p.end_reason())
        return results

    def close(self) -> None:
        for p in self.procs:
            if p.alive():
                p.send({"cmd": "exit"})
        deadline = time.monotonic() + 20
        try:
            for p in self.procs:
                if hasattr(p, "wait"):
                    p.wait(max(0.1, deadline - time.monotonic()))
                p.kill()
        finally:
            self.launcher.close()

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
