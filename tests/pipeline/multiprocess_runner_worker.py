"""One process of a 2-process async run on localhost (run by test_multiprocess_runner.py).

Rollout is host-local (this process's 2 rollout devices, its own envs), training is global
(a 4-device train mesh over both processes: each update all-reduces gradients across them),
weights go back through each process's control plane. argv: process_id port. Prints
`RESULT <json>`.
"""

import json
import sys

import jax

from vlajax.config.schema import AsyncConfig, DistributedConfig, MeshConfig
from vlajax.training import distributed


def main(pid: int, port: int) -> None:
    distributed.initialize(DistributedConfig(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                                             process_id=pid, local_device_count=4, initialization_timeout_s=120))
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from tests.pipeline import toy
    from vlajax.pipeline.placement import make_placement
    from vlajax.pipeline.runner import AsyncRunner

    cfg = AsyncConfig(enabled=True, placement="disaggregated", placement_ratio="1:1", staleness_threshold=0.0,
                      require_batches=2, queue_timeout_s=120.0, watchdog_s=120.0)
    p = make_placement(cfg, MeshConfig())
    repl = NamedSharding(p.train_mesh, PartitionSpec())
    batch_s = NamedSharding(p.train_mesh, PartitionSpec(None, "dp"))  # [T, B, ...]: envs over dp
    state = jax.jit(lambda: toy.init_state(0), out_shardings=repl)()
    init_w = np.asarray(state.params["w"].addressable_data(0))

    class GlobalTrainer(toy.ToyTrainer):
        """Each process's local micro-batch becomes its slice of one global batch."""

        def __call__(self, state, micro_batches):
            def to_global(items):
                for it in items:
                    local = jax.tree.map(np.asarray, it.data)  # data plane: via host memory
                    yield type(it)(jax.tree.map(lambda x: jax.make_array_from_process_local_data(batch_s, x),
                                                local), it.versions, it.num_samples)
            return super().__call__(state, to_global(micro_batches))

    sampler = toy.ToySampler(seed=pid)
    runner = AsyncRunner(cfg, sample_step=sampler, train_step=GlobalTrainer(), get_params=toy.get_params,
                         state=state, num_updates=4, samples_per_step=toy.B, mini_batch=toy.B,
                         rollout_shardings=NamedSharding(p.rollout_mesh, PartitionSpec()), publish_sharding=repl)
    status = runner.run(timeout=200)
    final = np.asarray(runner.state.params["w"].addressable_data(0))
    version, rollout_params = runner.weights.latest()
    result = {
        "status": status, "updates": runner.counters.updates, "version": version,
        "staleness": [s for h in runner.history for s in h["staleness"]],
        "final_w": final.tolist(), "changed": bool(np.abs(final - init_w).max() > 0),
        "rollout_devices": sorted(d.id for d in rollout_params["w"].sharding.device_set),
        "local_devices": sorted(d.id for d in jax.local_devices()),
        "train_processes": sorted({d.process_index for d in p.train_devices}),
        "rollout_w_equals_trainer": bool(np.array_equal(np.asarray(rollout_params["w"]), final)),
    }
    print("RESULT " + json.dumps(result), flush=True)
    distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
