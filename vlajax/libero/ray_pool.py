"""The Ray backend of the LIBERO worker pool: each worker a Ray actor (`vlajax.libero.ray_actor.WorkerActor`)
that reserves `cpus_per_worker` CPUs on some node of a Ray cluster (SPREAD scheduling: over the nodes) and
supervises one LIBERO worker process there; that process connects back over openpi's websocket to the policy
endpoint at the address it was given (the advertised one: `vlajax.libero.backend`).

    launcher = RayLauncher(address="auto")              # ray.init of the running cluster
    with WorkerPool(4, url, launcher=launcher) as pool:   # the pool's dealing and fault handling, unchanged
        results = pool.run(episodes)

The actor is the worker's channel: the pool's messages go to `actor.send`, a thread here per actor polls
`actor.poll` (0.25 s at most per call, the calls of one actor in order) and puts the messages into the pool's
inbox. An actor that dies (`ray.kill`, its process killed, its node removed) ends that channel (the poll raises
Ray's actor error): the pool replaces it with a new actor and re-runs its episodes from their initial state,
exactly as for a local process whose pipe closed. A hung actor (or hung worker) sends nothing: the pool's hang
timeout kills the actor (`kill_worker`, then `ray.kill`) and replaces it. A replacement that finds no free CPUs
waits for them (the pool's start-up timeout applies to it). Frames come back with each result (`_npy`) and are
written under the pool's frames directory on this host, so results and videos are the local pool's.

Needs `pip install '.[ray]'`; imported only for `--libero.backend ray`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
from typing import Any

import ray

from vlajax.libero import pool as pool_mod
from vlajax.libero.ray_actor import WorkerActor

log = logging.getLogger(__name__)

__all__ = ["RayLauncher", "connect"]

_CURRENT_CLUSTER = "/tmp/ray/ray_current_cluster"  # where `ray start --head` writes its address (Ray's convention)
POLL_S = 0.25  # an actor's poll waits at most this long for a message (a send queued behind it waits as long)


def gcs_address(address: str) -> str:
    """The HOST:PORT of the cluster's GCS that `address` names ('auto': `$RAY_ADDRESS`, else the cluster `ray start`
    made on this host, as Ray finds it), checked with one TCP connection (Ray itself retries a dead address for
    minutes). ValueError (one line) when there is none or nothing listens there."""
    hint = "start one with `ray start --head` (docs/cluster.md)"
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address and os.path.isfile(_CURRENT_CLUSTER):
            with open(_CURRENT_CLUSTER) as f:
                address = f.read().strip()
        if not address:
            raise ValueError(f"--libero.ray-address auto: no Ray cluster on this host and no $RAY_ADDRESS; {hint}")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--libero.ray-address {address!r}: HOST:PORT of the cluster's head (or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ValueError(f"--libero.ray-address: no Ray cluster answers at {address} ({type(e).__name__}: {e}); "
                         f"{hint}") from None
    return address


def connect(address: str) -> bool:
    """`ray.init(address)` unless Ray is initialised already. -> whether this call initialised it.
    ValueError naming the address when no cluster answers there."""
    if ray.is_initialized():
        return False
    address = gcs_address(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ValueError(f"--libero.ray-address {address}: no Ray cluster to connect to ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}); start one with `ray start --head` "
                         "(docs/cluster.md)") from e
    return True


class _RayProc(pool_mod._Proc):
    """The pool's view of one worker actor."""

    def __init__(self, index: int, gen: int, actor, inbox: queue.Queue, frames_dir: str | None):
        super().__init__(index, gen, "")
        self.actor, self.frames_dir = actor, frames_dir
        self.dead = threading.Event()
        self.code: int | None = None
        self.why = ""
        self.actor_pid, self.ip = -1, ""

        threading.Thread(target=self._read, args=(inbox,), daemon=True, name=f"libero-ray-worker{index}").start()

    def _wait(self, ref) -> Any:
        """ray.get(ref), given up (None) once this proc is killed; never abandons a call still running."""
        while not self.dead.is_set():
            ready, _ = ray.wait([ref], timeout=1.0)
            if ready:
                return ray.get(ready[0])
        return None

    def _read(self, inbox: queue.Queue) -> None:
        try:
            info = self._wait(self.actor.info.remote())  # waits for the actor's start (and for free CPUs)
            if info is None:
                return
            self.pid, self.node, self.log_path = info["pid"], info["node"], info["log"]
            self.actor_pid, self.ip = info["actor_pid"], info["ip"]
            while not self.dead.is_set():
                msgs = self._wait(self.actor.poll.remote(POLL_S))
                for m in msgs or ():
                    if "_eof" in m:
                        self.code = m["_eof"]
                        return
                    self._write_frames(m)
                    if m.get("event") == "result":
                        m["node"], m["node_ip"] = self.node, self.ip
                    inbox.put((self.gen, m))
        except Exception as e:  # noqa: BLE001 -- Ray's actor errors (died, node gone, unavailable): the channel ended
            self.why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        finally:
            self.dead.set()
            inbox.put((self.gen, None))

    def _write_frames(self, msg: dict[str, Any]) -> None:
        files = msg.pop("_npy", None)
        if not files:
            return
        if not self.frames_dir:
            msg["frames"] = None
            return
        os.makedirs(self.frames_dir, exist_ok=True)
        path = os.path.join(self.frames_dir, f"{msg['id']}.npy")
        for key, target in (("wrist", path[: -len(".npy")] + ".wrist.npy"), ("frames", path)):
            if key in files:
                tmp = f"{target}.tmp.{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(files[key])
                os.replace(tmp, target)
        msg["frames"] = path if "frames" in files else None

    def alive(self) -> bool:
        return not self.dead.is_set()

    def send(self, obj: dict[str, Any]) -> bool:
        if self.dead.is_set():
            return False
        self.actor.send.remote(obj)  # in order with this actor's other calls; a failure ends the channel
        return True

    def kill(self) -> None:
        was_alive = not self.dead.is_set()
        self.dead.set()
        if was_alive:
            with contextlib.suppress(Exception):  # a hung or dead actor: ray.kill below does it
                ray.get(self.actor.kill_worker.remote(), timeout=5)
        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)

    def exit_code(self) -> int | None:
        return self.code

    def end_reason(self) -> str:
        return f"actor lost ({self.why})" if self.why else f"exited (code {self.code})"


class RayLauncher:
    """Workers as Ray actors (module docstring). `address`: 'auto' (the running cluster: $RAY_ADDRESS or this
    host's) or HOST:PORT (a cluster's GCS); ignored when this process has initialised Ray already.
    `libero_venv` / `repo`: the LIBERO venv and the vlajax checkout on the nodes ('' = each node's own)."""

    name = "ray"

    def __init__(self, address: str = "auto", *, cpus_per_worker: float = 1.0, libero_venv: str = "",
                 repo: str = ""):
        if cpus_per_worker <= 0:
            raise ValueError("--libero.cpus-per-worker must be > 0")
        self.owns_ray = connect(address)
        self.cpus, self.libero_venv, self.repo = cpus_per_worker, libero_venv, repo
        self.actor_cls = ray.remote(WorkerActor)
        self.actors: list[Any] = []
        self._unhook = pool_mod.on_kill_all(self.kill_actors)

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes: {'node', 'ip', 'cpus'}."""
        return [{"node": n["NodeID"], "ip": n["NodeManagerAddress"], "cpus": n.get("Resources", {}).get("CPU", 0)}
                for n in ray.nodes() if n.get("Alive")]

    def spawn(self, pool, index: int, gen: int) -> _RayProc:
        spec = {"envs": pool.envs, "gl": pool.gl, "policy_url": pool.policy_url, "frames": bool(pool.frames_dir),
                "env": pool.extra_env, "libero_venv": self.libero_venv, "repo": self.repo,
                "log_dir": pool.log_dir or "", "log_name": f"worker{index}.gen{gen}.log"}
        if pool.log_dir:
            os.makedirs(pool.log_dir, exist_ok=True)
        actor = self.actor_cls.options(num_cpus=self.cpus, scheduling_strategy="SPREAD", max_restarts=0,
                                       max_task_retries=0).remote(spec)
        self.actors.append(actor)
        return _RayProc(index, gen, actor, pool.inbox, pool.frames_dir)

    def kill_actors(self) -> None:
        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a, no_restart=True)

    def close(self) -> None:
        self.kill_actors()
        self.actors.clear()
        self._unhook()
        if self.owns_ray:
            ray.shutdown()
