"""The Ray actor of the LIBERO worker pool's Ray backend: it runs on some node of the cluster, in the driver's
Python (Ray's workers), and supervises ONE LIBERO worker process of that node's LIBERO venv
(`python -m vlajax.libero.worker`, Python 3.11, robosuite 1.4), whose websocket connects back to the policy
endpoint's advertised address. Standard library, numpy (via `protocol`) and ray only: no jax on the CPU nodes.

    actor = ray.remote(WorkerActor).options(num_cpus=1, scheduling_strategy="SPREAD").remote(spec)
    ray.get(actor.info.remote())        # {node, ip, host, pid, actor_pid, log}
    actor.send.remote({"cmd": "episode", ...})
    ray.get(actor.poll.remote(0.25))    # the channel's messages since the last poll; [{'_eof': code}] at its end
    ray.get(actor.kill_worker.remote())

The LIBERO process is in a session of its own (killed as a group) and dies with the actor (Linux's parent-death
signal: SIGKILL when the actor's process is gone -- `ray.kill`, a crash, its node removed), so no simulator is
orphaned. Its frames are written to a directory of the node and shipped with the result (`_npy`: the .npy files'
bytes, which the driver writes under its own frames directory): the nodes need no shared file system. Its log
goes to `spec['log_dir']` when that directory exists on the node (this host's run directory, a shared file
system), else to a temporary directory of the node (`info()['log']` says where).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from typing import Any

from vlajax.libero import launch
from vlajax.libero import protocol as P

__all__ = ["WorkerActor"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # (runs in the child between fork and exec)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class WorkerActor:
    """One LIBERO worker process on this node (module docstring). `spec`: 'envs', 'gl', 'policy_url',
    'frames' (ship frames), 'env' (more environment variables), 'libero_venv' ('' = the node's own:
    `launch.libero_venv()` there), 'repo' (the vlajax checkout the worker imports its protocol from; '' = the
    one this actor runs), 'log_dir', 'log_name'."""

    def __init__(self, spec: dict[str, Any]):
        import ray  # noqa: PLC0415 -- this module is imported on the nodes only through Ray

        python = launch.libero_python(spec.get("libero_venv") or None)  # LiberoEnvMissing: the actor fails to start
        self.frames_dir = tempfile.mkdtemp(prefix="vlajax-libero-frames-") if spec.get("frames") else None
        log_dir = spec.get("log_dir") or ""
        if not os.path.isdir(log_dir):
            log_dir = tempfile.mkdtemp(prefix="vlajax-libero-logs-")
        self.log_path = os.path.join(log_dir, spec.get("log_name", "worker.log"))
        cmd = launch.worker_command(python, spec["envs"], spec["gl"], spec.get("policy_url"), self.frames_dir)
        repo = spec.get("repo") or launch.REPO
        env = launch.worker_env(repo, spec["gl"], dict(spec.get("env") or {}))
        self.inbox: queue.Queue = queue.Queue()
        with open(self.log_path, "wb") as err:
            self.popen = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                          cwd=repo, env=env, start_new_session=True,
                                          preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, daemon=True, name="libero-worker-channel").start()
        ctx = ray.get_runtime_context()
        self._info = {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
                      "pid": self.popen.pid, "actor_pid": os.getpid(), "log": self.log_path}

    def _read(self) -> None:
        for line in self.popen.stdout:
            msg = P.read_line(line)
            if msg is not None:
                self.inbox.put(msg)
        self.inbox.put({"_eof": self.popen.wait()})

    def info(self) -> dict[str, Any]:
        return self._info

    def send(self, obj: dict[str, Any]) -> bool:
        """One command to the worker's stdin; False when it is gone."""
        return P.send_line(self.popen.stdin, obj)

    def _ship(self, msg: dict[str, Any]) -> None:
        """A result's frame files -> their bytes in msg['_npy'] (removed here; the driver writes them)."""
        path = msg.get("frames")
        if msg.get("event") != "result" or not path:
            return
        files = {}
        for key, p in (("frames", path), ("wrist", path[: -len(".npy")] + ".wrist.npy")):
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    files[key] = f.read()
                os.remove(p)
        msg["_npy"] = files

    def poll(self, timeout_s: float) -> list[dict[str, Any]]:
        """The worker's messages since the last poll: waits up to `timeout_s` for the first, then takes what
        else is there. The channel's end is `{'_eof': exit code}`."""
        out = []
        with contextlib.suppress(queue.Empty):
            out.append(self.inbox.get(timeout=timeout_s))
            while True:
                out.append(self.inbox.get_nowait())
        for m in out:
            self._ship(m)
        return out

    def kill_worker(self) -> int | None:
        """SIGKILL the worker's process group, reap it, remove this node's frames directory. -> exit code."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        code = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = self.popen.wait(30)
        if self.frames_dir:
            shutil.rmtree(self.frames_dir, ignore_errors=True)
        return code
