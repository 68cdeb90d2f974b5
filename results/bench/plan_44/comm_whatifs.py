"""Issue 44.5 what-ifs of the communication model (NOT the headline: docs/planner.md fixed the headline's
constants before its run). Each variant is recalibrated to the two 8-GPU baselines like the preset, then
the seeds' cells are simulated (8, 16, 32 GPUs; colocated and disaggregated 1:1; sync, train_async,
train_async+rollout_async, +streaming; 1 seed, as `python -m research.planner`).

    JAX_PLATFORMS=cpu python results/bench/plan_44/comm_whatifs.py results/bench/plan_44/comm_whatifs.json
"""

import dataclasses
import json
import sys
import time

from research.planner import presets
from research.planner.sim import simulate_mean

MODES = ("sync", "train_async", "train_async+rollout_async", "+streaming")
VARIANTS = {
    # FSDP full shard: parameters all-gathered for forward and backward of every micro-batch (32 per GPU)
    "fsdp_regather": lambda g: dataclasses.replace(presets.PI05_COMM, regather_per_micro_batch=True),
    # NVLink 200 GB/s per GPU and direction (an H800's 400 GB/s bidirectional) instead of 450
    "nvlink_200": lambda g: dataclasses.replace(presets.PI05_COMM, intra_gbs=200.0),
    # the global batch grows with the GPUs (1024 at 8: 128 decisions per GPU) instead of staying 1024
    "global_batch_scales": lambda g: dataclasses.replace(presets.PI05_COMM, global_batch=128 * g),
}


def main(out: str) -> None:
    result = {"variants": {}}
    for name, comm_of in VARIANTS.items():
        t0 = time.time()
        median, train = presets.calibrate_pi05_libero(comm=comm_of(8))
        rows = []
        for g in (8, 16, 32):
            p = presets._pi05_libero(median, train, comm=comm_of(g))
            for placement in ("colocated", "disaggregated"):
                for mode in MODES if placement == "disaggregated" else ("sync",):
                    m = simulate_mean(p.pipeline(g, mode, placement), p.costs, seeds=1)
                    rows.append({"devices": g, "placement": placement if placement == "colocated"
                                 else "disaggregated 1:1", "mode": mode, **m})
        result["variants"][name] = {"calibrated": [median, train], "rows": rows, "seconds": time.time() - t0}
        print(name, [median, train], f"{time.time() - t0:.0f} s", flush=True)
    result["reference"] = presets.REFERENCE["pi05-libero"]
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
