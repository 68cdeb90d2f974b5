"""The versioned parameter server: the control plane between trainer and rollout.

The trainer calls `publish(version, params)`; it returns at once (it only dispatches an
on-device snapshot so that the trainer may donate its state in the next step). The control-
plane lane (`ParamServer.lane_body`, run as one `Lane`) takes the newest pending publication,
reshards it onto the rollout sub-mesh with `jax.device_put`, waits until the transfer is
complete, and only then swaps it in. Rollout reads `latest()` -> `(version, params)`, a
single attribute read that never waits for a transfer in flight: during a slow publish it
returns the previous version immediately. Publications that arrive while another is pending
are coalesced (the newest wins; `superseded` counts the others).

Listeners registered with `on_install` run in the control-plane lane after each swap (the
trajectory buffer uses this to open its pacing budget for the new version).

Multi-host (DESIGN.md): training is global, rollout host-local. Published params that span
processes must be replicated (`gather_to=` makes the snapshot gather them, in the trainer's
thread where every process dispatches it in lockstep); the control plane then moves this
process's replica onto the local rollout mesh without any cross-host traffic.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.pipeline.lanes import Lane, Lifetime

__all__ = ["ParamServer"]

RECENT = 10_000  # per-install transfer times kept (older ones live on in the running sum / max)
_copy_tree = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))


def _local_replica(x: Any) -> Any:
    """A process-spanning replicated array -> this process's copy (rollout is host-local)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if not x.sharding.is_fully_replicated:
            raise ValueError("params spanning processes must be replicated to reach a host-local rollout mesh; "
                             "pass ParamServer(gather_to=NamedSharding(train_mesh, PartitionSpec()))")
        return x.addressable_data(0)
    return x


class ParamServer:
    """Newest (version, params) for rollout, installed by a control-plane lane.

    initial: params of `version` (placed synchronously); shardings: a pytree of shardings
    matching params (or one sharding for every leaf) on the rollout sub-mesh, None = leave
    where they are; snapshot: copy params on publish so the trainer may donate its buffers.
    """

    def __init__(self, initial: Any, shardings: Any = None, *, snapshot: bool = True,
                 place: Callable[[Any], Any] | None = None, lifetime: Lifetime | None = None, version: int = 0,
                 gather_to: Any = None):
        self.shardings = shardings
        self.snapshot = snapshot
        # Multi-host: a replicated sharding on the train mesh; the snapshot gathers sharded
        # params into it (a collective, so it runs in the trainer's thread, in lockstep).
        self._snap = _copy_tree if gather_to is None else jax.jit(
            lambda tree: jax.tree.map(jnp.copy, tree), out_shardings=gather_to)
        self._place_fn = place
        self.lifetime = lifetime or Lifetime()
        self._cond = threading.Condition()
        self._pending: tuple[int, Any, float] | None = None
        self._current: tuple[int, Any] = (version, self._place(self._snap(initial) if snapshot else initial))
        jax.block_until_ready(self._current[1])
        self._listeners: list[Callable[[int], None]] = []
        self.published = 0
        self.installed = 0
        self.superseded = 0
        # publish -> installed seconds: the newest RECENT installs, and running sum / max over all.
        self.transfer_s: collections.deque[float] = collections.deque(maxlen=RECENT)
        self.transfer_sum_s = 0.0
        self.transfer_max_s = 0.0

    # -- trainer side ---------------------------------------------------------------------

    def publish(self, version: int, params: Any) -> None:
        """Queue `params` as `version` (non-blocking). Versions must increase."""
        with self._cond:
            newest = self._pending[0] if self._pending else self._current[0]
            if version <= newest:
                raise ValueError(f"published version {version} is not newer than {newest}")
            if self._pending is not None:
                self.superseded += 1
            self._pending = (version, self._snap(params) if self.snapshot else params, time.monotonic())
            self.published += 1
            self._cond.notify_all()

    # -- rollout side ---------------------------------------------------------------------

    def latest(self) -> tuple[int, Any]:
        """The newest installed (version, params). Never waits."""
        return self._current

    @property
    def version(self) -> int:
        return self._current[0]

    def wait_version(self, version: int, timeout: float) -> tuple[int, Any]:
        """Block (with a timeout) until a version >= `version` is installed."""
        with self._cond:
            self.lifetime.wait_until(self._cond, lambda: self._current[0] >= version, timeout,
                                     f"weights version {version} to be installed")
            return self._current

    def on_install(self, callback: Callable[[int], None]) -> None:
        self._listeners.append(callback)

    # -- control plane ----------------------------------------------------------------------

    def _place(self, params: Any) -> Any:
        params = jax.tree.map(_local_replica, params)
        if self._place_fn is not None:
            return self._place_fn(params)
        if self.shardings is None:
            return params
        return jax.device_put(params, self.shardings)

    def install_pending(self) -> bool:
        """Transfer and swap in the pending publication, if any (control-plane thread)."""
        with self._cond:
            pending, self._pending = self._pending, None
        if pending is None:
            return False
        version, params, t0 = pending
        placed = self._place(params)
        jax.block_until_ready(placed)
        with self._cond:
            self._current = (version, placed)
            self.installed += 1
            dt = time.monotonic() - t0
            self.transfer_s.append(dt)
            self.transfer_sum_s += dt
            self.transfer_max_s = max(self.transfer_max_s, dt)
            self._cond.notify_all()
        for cb in self._listeners:
            cb(version)
        return True

    def lane_body(self, lane: Lane, poll_s: float = 0.05) -> bool:
        """One control-plane iteration: wait (idle) for a publication, then install it."""
        with self._cond:
            if self._pending is None:
                with lane.waiting("publication"):
                    self._cond.wait(poll_s)
        self.install_pending()
        return True
