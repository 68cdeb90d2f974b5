"""The processes of a multi-process async RL run (DESIGN.md "Multi-host shape": rollout host-local,
training global): each process's share of the envs and its rollout seed, its rows of a global batch,
the env state saved as one global `[process_count, ...]` array, counters summed over processes.

`vlajax.rl.async_loop` makes one when `jax.process_count() > 1`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.training import distributed, sharding

__all__ = ["Hosts"]

SEED_STRIDE = 1_000_003  # process p's rollout seed is seed + p * stride (process 0 keeps the run's seed)


class Hosts:
    """Multi-process helpers: per-process rollout config, global batches, global env-state checkpoints."""

    def __init__(self, cfg: TrainConfig, train_mesh):
        self.count, self.index = jax.process_count(), jax.process_index()
        if cfg.env.num_envs % self.count:
            raise ConfigError(f"env.num_envs={cfg.env.num_envs} does not split over {self.count} processes")
        env = dataclasses.replace(cfg.env, num_envs=cfg.env.num_envs // self.count)
        self.seed = (cfg.seed + self.index * SEED_STRIDE) % (2**31 - 1)
        self.cfg = dataclasses.replace(cfg, env=env)  # the run's seed: the same init and eval everywhere
        self.batch = NamedSharding(train_mesh, PartitionSpec(sharding.DP))
        self.repl = NamedSharding(train_mesh, PartitionSpec())
        firsts = [min((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                  for p in range(self.count)]
        self.rows = NamedSharding(Mesh(np.asarray(firsts), ("process",)), PartitionSpec("process"))
        self.timeout = cfg.pipeline.queue_timeout_s

    def to_global(self, data: Any) -> Any:
        """This process's flat learner batch -> its rows of the global batch (via host memory)."""
        local = jax.device_get(data)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(
            self.batch if np.ndim(x) else self.repl, np.asarray(x)), local)

    def barrier(self, name: str) -> None:
        distributed.barrier(name, self.timeout)

    def stack(self, leaves: list) -> list:
        """Host-local env-state leaves -> global `[process_count, ...]` arrays (Orbax writes each row)."""
        return [jax.make_array_from_process_local_data(self.rows, np.asarray(jax.device_get(x))[None])
                for x in leaves]

    def abstract_stack(self, leaves: list) -> list:
        return [jax.ShapeDtypeStruct((self.count, *x.shape), x.dtype, sharding=self.rows) for x in leaves]

    def unstack(self, leaves: list) -> list:
        """Inverse of `stack`: this process's row of each restored leaf."""
        return [np.asarray(x.addressable_data(0))[0] for x in leaves]

    def sum(self, values: list[int]) -> list[int]:
        """Each integer summed over the processes (a collective: call in lockstep)."""
        hi_lo = np.asarray([[v >> 20, v & (2**20 - 1)] for v in values], np.int32)
        out = np.asarray(distributed.allgather(hi_lo[None])).reshape(self.count, len(values), 2).astype(np.int64)
        return [int(v) for v in (out[..., 0] * 2**20 + out[..., 1]).sum(0)]
