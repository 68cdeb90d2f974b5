"""Where the LIBERO workers run: one pool interface (`vlajax.libero.pool.WorkerPool`), two backends.

    --libero.backend local          processes of this host (the default; no Ray imported)
    --libero.backend ray            Ray actors over a cluster's nodes (`vlajax.libero.ray_pool`; pip install '.[ray]')
      --libero.ray-address auto|HOST:PORT      the cluster (auto: $RAY_ADDRESS or the one `ray start` made here)
      --libero.cpus-per-worker 1               CPUs each worker actor reserves on its node
      --libero.ray-libero-venv DIR             the LIBERO venv on the nodes ('' = each node's own)
      --libero.ray-repo DIR                    the vlajax checkout on the nodes ('' = the one the actor imports)
    --libero.bind 127.0.0.1                    the interface this process's policy endpoint listens on
    --libero.advertise HOST                    the host name / IP the workers connect to ('' = bind's, or with bind
                                               0.0.0.0 this node's IP as Ray reports it)

Same dealing, same fault handling, same results for the same seeds on both backends: only where a worker
process runs changes. A worker on another host must reach the endpoint: with `--libero.backend ray` on a cluster
whose nodes are on other hosts, a loopback endpoint (bind 127.0.0.1, or a `--policy-server ws://127.0.0.1:...`)
is refused before any worker starts (`check_reachable`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["PoolBackend", "advertised_url", "check_reachable", "make_launcher", "make_pool", "with_host"]


@dataclasses.dataclass(frozen=True)
class PoolBackend:
    """Where the LIBERO workers run and where they find the policy endpoint (`--libero.*`)."""

    backend: Literal["local", "ray"] = "local"  # local: processes of this host | ray: actors over a Ray cluster
    ray_address: str = "auto"  # ray: the cluster to join (auto: $RAY_ADDRESS or this host's `ray start`) | HOST:PORT
    bind: str = "127.0.0.1"  # the interface the in-process policy endpoint listens on (0.0.0.0: every interface)
    advertise: str = ""  # the host the workers connect to ('' = bind; with bind 0.0.0.0: this node's IP)
    cpus_per_worker: float = 1.0  # ray: CPUs each worker actor reserves on its node
    ray_libero_venv: str = ""  # ray: the LIBERO venv on the nodes ('' = each node's own: its .venv-libero)
    ray_repo: str = ""  # ray: the vlajax checkout on the nodes ('' = the one each actor imports vlajax from)

    def check(self) -> None:
        """ValueError naming the first bad field (before anything starts); with `ray`, also when no cluster
        answers at `ray_address`."""
        if self.backend not in ("local", "ray"):
            raise ValueError(f"--libero.backend {self.backend!r}: local or ray")
        if self.cpus_per_worker <= 0:
            raise ValueError("--libero.cpus-per-worker must be > 0")
        if not self.bind:
            raise ValueError("--libero.bind: an interface address (127.0.0.1, 0.0.0.0, a host's IP)")
        if self.backend == "local":
            bad = [f for f in ("ray_libero_venv", "ray_repo") if getattr(self, f)]
            if self.cpus_per_worker != 1.0:
                bad.insert(0, "cpus_per_worker")
            if self.ray_address != "auto":
                bad.insert(0, "ray_address")
            if bad:
                raise ValueError(f"--libero.{bad[0].replace('_', '-')}: a Ray setting, and --libero.backend is local "
                                 "(add --libero.backend ray)")
            return
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("ray") is None:
            raise ValueError("--libero.backend ray: Ray is not installed (pip install 'vlajax[ray]', or "
                             "`pip install -e '.[ray]'` in a checkout)")
        from vlajax.libero.ray_pool import gcs_address  # noqa: PLC0415

        gcs_address(self.ray_address)  # a cluster answers there (one TCP connection), else one line


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _node_ip() -> str:
    import ray  # noqa: PLC0415 -- the ray backend only

    return ray.util.get_node_ip_address()


def advertised_url(b: PoolBackend, port: int) -> str:
    """ws://HOST:PORT the workers connect to for an endpoint of this process listening on `b.bind`:`port`."""
    host = b.advertise or b.bind
    if not b.advertise and b.bind in ("0.0.0.0", "::"):  # every interface: name one the workers reach
        host = _node_ip() if b.backend == "ray" else socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"ws://{host}:{port}"


def check_reachable(url: str, launcher) -> None:
    """ValueError when the workers of `launcher` could not reach `url`: a loopback host while the Ray cluster has
    nodes on other hosts (their 127.0.0.1 is not this host's)."""
    nodes = getattr(launcher, "nodes", None)
    host = urlsplit(url).hostname or ""
    if nodes is None or not _is_loopback(host):
        return
    here = _node_ip()
    others = sorted({n["ip"] for n in nodes() if n["ip"] != here and not _is_loopback(n["ip"])})
    if others:
        raise ValueError(f"the policy endpoint {url} is this host's loopback, and the Ray cluster has nodes on other "
                         f"hosts ({', '.join(others)}) that cannot reach it: serve on an address they reach "
                         "(--libero.bind 0.0.0.0 [--libero.advertise HOST], or a --policy-server ws://HOST:PORT)")


def with_host(url: str, host: str) -> str:
    """`url` with its host replaced (the port kept)."""
    parts = urlsplit(url)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def make_launcher(b: PoolBackend, python: str | None = None):
    """The backend's launcher (`pool.LocalLauncher` or `ray_pool.RayLauncher`; the latter joins the cluster)."""
    if b.backend == "ray":
        from vlajax.libero.ray_pool import RayLauncher  # noqa: PLC0415 -- Ray only when asked for

        return RayLauncher(b.ray_address, cpus_per_worker=b.cpus_per_worker, libero_venv=b.ray_libero_venv,
                           repo=b.ray_repo)
    from vlajax.libero.pool import LocalLauncher  # noqa: PLC0415

    return LocalLauncher(python)


def make_pool(b: PoolBackend, workers: int, policy_url: str | None, *, launcher=None, python: str | None = None,
              **kw: Any):
    """A `WorkerPool` of `workers` on backend `b` (`launcher`: one made already by `make_launcher`)."""
    from vlajax.libero.pool import WorkerPool  # noqa: PLC0415

    launcher = launcher or make_launcher(b, python)
    if policy_url:
        check_reachable(policy_url, launcher)
    return WorkerPool(workers, policy_url, launcher=launcher, python=python, **kw)
