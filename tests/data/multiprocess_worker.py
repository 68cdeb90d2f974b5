"""One process of a 2-process job reading one dataset (run by test_multiprocess_data.py).

argv: process_id port dataset_dir checkpoint_dir. Prints `RESULT <json>`.
"""

import dataclasses
import json
import sys

import jax
import numpy as np

from vlajax.config.schema import DistributedConfig, MeshConfig, get_config
from vlajax.training import distributed


def main(pid: int, port: int, root: str, ckpt: str) -> None:
    distributed.initialize(DistributedConfig(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                                             process_id=pid, local_device_count=4, initialization_timeout_s=120))
    from vlajax.data.build import make_loader
    from vlajax.training.checkpoint import Checkpointer
    from vlajax.training.sharding import make_mesh, replicated

    cfg = get_config("debug")
    cfg = cfg.replace(mesh=MeshConfig(dp=8), data=dataclasses.replace(
        cfg.data, dataset_dir=root, batch_size=16, batching="packed", pack_rows=8, shuffle_seed=5))
    mesh = make_mesh(cfg.mesh)
    loader, info = make_loader(cfg, mesh)
    state = jax.device_put(np.zeros(8, np.float32), replicated(mesh))
    first = next(loader)
    with Checkpointer(ckpt, async_save=False) as ck:
        ck.save(1, {"x": state}, data_iter=loader)
    second = next(loader)
    loader.close()
    fresh, _ = make_loader(cfg, mesh)
    with Checkpointer(ckpt, async_save=False) as ck:
        ck.restore({"x": state}, data_iter=fresh)
    again = next(fresh)
    fresh.close()
    g = distributed.allgather({k: first[k] for k in ("index", "sample_mask", "prefix_index", "segment_ids",
                                                     "sample_row")})
    same = all(np.array_equal(distributed.allgather(second[k]), distributed.allgather(again[k]))
               for k in ("index", "prefix_index", "segment_ids", "actions"))
    print("RESULT " + json.dumps({
        "shape": list(first["actions"].shape), "rows": list(first["segment_ids"].shape),
        "index": g["index"].tolist(), "mask": g["sample_mask"].tolist(),
        "prefix_index_max_by_half": [int(g["prefix_index"][:4].max()), int(g["prefix_index"][4:].min(
            where=g["segment_ids"][4:] > 0, initial=10**9))],
        "sample_row": g["sample_row"].tolist(), "length": info.spec.length, "resumed_same": bool(same),
    }), flush=True)
    distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
