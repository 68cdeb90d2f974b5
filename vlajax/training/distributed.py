"""Multi-host start-up and moving arrays between process-local numpy and global jax.Arrays.

Every host runs the same program. `initialize(cfg)` must run before anything touches the JAX
backend (device counts, arrays, compiles). It calls `jax.distributed.initialize` when:
- `DistributedConfig.coordinator_address` is set (explicit: address, process count and id), or
- the environment names a cluster: `JAX_COORDINATOR_ADDRESS` (+ `JAX_NUM_PROCESSES`,
  `JAX_PROCESS_ID`), a SLURM job with more than one task, or Open MPI with more than one rank
  (JAX's own cluster auto-detection fills in the rest).
Otherwise it is a single-process run and nothing is initialized.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vlajax.config.schema import DistributedConfig

log = logging.getLogger(__name__)

__all__ = [
    "initialize",
    "shutdown",
    "is_main_process",
    "cluster_detected",
    "to_global",
    "to_local",
    "allgather",
    "sync",
    "barrier",
    "broadcast_from_main",
]

_initialized = False


def cluster_detected(environ: dict[str, str] | None = None) -> bool:
    """True when the environment describes a multi-process job JAX can join."""
    env = os.environ if environ is None else environ
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return True
    if "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return True
    return int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1


def initialize(cfg: DistributedConfig = DistributedConfig()) -> bool:
    """Join the multi-process job if there is one. Returns True when distributed is active."""
    global _initialized
    if cfg.local_device_count > 0:
        jax.config.update("jax_num_cpu_devices", cfg.local_device_count)
    if _initialized:
        return True
    if cfg.coordinator_address:
        kwargs = dict(
            coordinator_address=cfg.coordinator_address,
            num_processes=cfg.num_processes,
            process_id=cfg.process_id,
        )
    elif cluster_detected():
        kwargs = {}
        if os.environ.get("JAX_COORDINATOR_ADDRESS"):
            kwargs = dict(
                num_processes=_env_int("JAX_NUM_PROCESSES", cfg.num_processes),
                process_id=_env_int("JAX_PROCESS_ID", cfg.process_id),
            )
    else:
        return False
    jax.distributed.initialize(initialization_timeout=cfg.initialization_timeout_s, **kwargs)
    _initialized = True
    log.info(
        "jax.distributed: process %d/%d, %d local / %d global devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
    return True


def _env_int(name: str, fallback: int) -> int | None:
    value = os.environ.get(name)
    if value is not None:
        return int(value)
    return fallback if fallback >= 0 and (name != "JAX_NUM_PROCESSES" or fallback > 0) else None


def shutdown() -> None:
    global _initialized
    if _initialized:
        jax.distributed.shutdown()
        _initialized = False


def is_main_process() -> bool:
    return jax.process_index() == 0


def to_global(tree: Any, sharding: NamedSharding | Any) -> Any:
    """Process-local numpy batches -> global jax.Arrays (`make_array_from_process_local_data`).

    Each process passes its own slice of the batch (leading dim = global batch / processes).
    `sharding` is one NamedSharding for every leaf, or a tree of them.
    """
    if isinstance(sharding, NamedSharding):
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)
    return jax.tree.map(lambda x, s: jax.make_array_from_process_local_data(s, np.asarray(x)), tree, sharding)


def to_local(tree: Any, mesh: Mesh, spec: PartitionSpec | Any = PartitionSpec("dp")) -> Any:
    """Global jax.Arrays -> this process's slice as numpy (inverse of `to_global`)."""
    local = multihost_utils.global_array_to_host_local_array(tree, mesh, spec)
    return jax.tree.map(np.asarray, local)


def allgather(tree: Any) -> Any:
    """Every process gets the full value of each (global or process-local) array as numpy."""
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))


def sync(name: str) -> None:
    """Barrier across all processes (no-op with one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def barrier(name: str, timeout_s: float) -> None:
    """Wait until every process reached the barrier `name` (no-op with one process).

    Unlike `sync` this is the coordination service's barrier (gRPC), not a device collective:
    it waits up to `timeout_s` (gloo, the CPU collectives, gives up on a late peer after 30 s),
    so a process can wait here for a peer that is still compiling or still producing its data
    before both enter a collective. Every name may be used once per run.
    """
    if jax.process_count() == 1:
        return
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:
        raise RuntimeError("distributed.barrier: jax.distributed is not initialized")
    client.wait_at_barrier(name, int(timeout_s * 1000))


def broadcast_from_main(tree: Any) -> Any:
    """Process 0's values on every process (e.g. a run directory name or a seed)."""
    if jax.process_count() == 1:
        return tree
    return multihost_utils.broadcast_one_to_all(tree)
