"""One process of a 2-process `jax.distributed` job on localhost (run by test_multiprocess.py).

argv: process_id coordinator_port checkpoint_dir. Prints `RESULT <json>` on success.
"""

import json
import sys

import jax

from vlajax.config.schema import DistributedConfig, MeshConfig
from vlajax.training import checkpoint, distributed, sharding


def main(pid: int, port: int, ckpt_dir: str) -> None:
    distributed.initialize(
        DistributedConfig(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=2,
            process_id=pid,
            local_device_count=4,
            initialization_timeout_s=120,
        )
    )
    import flax.linen as nn
    import jax.numpy as jnp
    import numpy as np
    import optax

    from vlajax.training.train_state import TrainState

    assert jax.process_count() == 2 and jax.device_count() == 8 and jax.local_device_count() == 4

    # A dp x tp mesh spanning both processes.
    cfg = MeshConfig(dp=4, tp=2)
    mesh = sharding.make_mesh(cfg)
    rules = cfg.logical_rules

    # Process-local rows -> one global [8, 3] array; a jitted reduction crosses processes.
    local = np.arange(12, dtype=np.float32).reshape(4, 3) + 100 * pid
    x = distributed.to_global(local, sharding.data_sharding(mesh))
    total = float(jax.jit(jnp.sum, out_shardings=sharding.replicated(mesh))(x))
    back = distributed.to_local(x, mesh)
    assert np.array_equal(back, local), (back, local)

    # A sharded train state, saved by both processes and restored onto another mesh shape.
    class Dense(nn.Module):
        @nn.compact
        def __call__(self, h):
            k = self.param("k", nn.with_logical_partitioning(nn.initializers.normal(), ("embed", "mlp")), (16, 32))
            return h @ k

    tx = optax.adam(1e-3)

    def init(rng):
        return TrainState.create(Dense().init(rng, jnp.zeros((1, 16)))["params"], tx, rng)

    state, _ = sharding.init_sharded(init, mesh, rules, jax.random.key(0))
    with checkpoint.Checkpointer(ckpt_dir) as ckpt:
        ckpt.save(1, state, extra={"pid_saved": 0})
    distributed.sync("saved")
    other = MeshConfig(dp=2, tp=4)
    other_mesh = sharding.make_mesh(other)
    abstract = jax.eval_shape(init, jax.random.key(0))
    target = checkpoint.abstract_state(nn.unbox(abstract), sharding.tree_shardings(abstract, other_mesh, rules))
    with checkpoint.Checkpointer(ckpt_dir) as ckpt:
        restored, extra = ckpt.restore(target)
    same = all(
        np.array_equal(a, b)
        for a, b in zip(distributed.allgather(jax.tree.leaves(state)), distributed.allgather(jax.tree.leaves(restored)))
    )
    result = {
        "pid": pid,
        "total": total,
        "same": same,
        "extra": extra,
        "restored_spec": list(restored.params["k"].sharding.spec),
        "restored_mesh": dict(restored.params["k"].sharding.mesh.shape),
    }
    print("RESULT " + json.dumps(result), flush=True)
    distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
