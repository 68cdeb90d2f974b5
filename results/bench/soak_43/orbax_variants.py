"""Issue 43: does RSS grow per Orbax checkpoint save, and which option stops it? (no vlajax in the loop)

    .venv/bin/python results/bench/soak_43/orbax_variants.py VARIANT N EVERY OUT_JSON [KIB]

Saves a pytree of float32 arrays (KIB KiB in all, default 64: the rl-debug train state's size) N times
with an `ocp.CheckpointManager` (max_to_keep 3, force=True, waiting after each save), recording RSS every
EVERY saves; slope = KiB per save by least squares after the first 10%.
Variants: base (as vlajax.training.checkpoint: async, OCDBT), sync (enable_async_checkpointing=False),
no_ocdbt (StandardCheckpointHandler(use_ocdbt=False)), gc (base + gc.collect() after every save),
one_manager_per_save (a new manager each save, closed after it), idle (no save: sleeps 50 ms).
"""
import gc
import json
import os
import shutil
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

variant, n, every, out_json = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kib = int(sys.argv[5]) if len(sys.argv) > 5 else 64
d = f"/tmp/orbax_variant_{variant}"
shutil.rmtree(d, ignore_errors=True)
leaves = 16
tree = {f"w{i}": jnp.full((kib * 256 // leaves,), float(i), jnp.float32) for i in range(leaves)}


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def manager():
    handlers = None
    if variant == "no_ocdbt":
        handlers = {"state": ocp.StandardCheckpointHandler(use_ocdbt=False), "extra": ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(d, item_handlers=handlers, options=ocp.CheckpointManagerOptions(
        max_to_keep=3, enable_async_checkpointing=variant != "sync", create=True, cleanup_tmp_directories=True))


mgr = manager() if variant not in ("idle", "one_manager_per_save") else None
samples, t0 = [], time.perf_counter()
for i in range(1, n + 1):
    if variant == "idle":
        time.sleep(0.05)
    else:
        m = manager() if variant == "one_manager_per_save" else mgr
        m.save(i, args=ocp.args.Composite(state=ocp.args.StandardSave(tree), extra=ocp.args.JsonSave({"i": i})),
               force=True)
        m.wait_until_finished()
        if variant == "one_manager_per_save":
            m.close()
        if variant == "gc":
            gc.collect()
    if i % every == 0:
        samples.append({"i": i, "s": round(time.perf_counter() - t0, 1), "rss_mib": round(rss_mib(), 1),
                        "threads": len(os.listdir("/proc/self/task")), "files": len(os.listdir("/proc/self/fd"))})
        print(json.dumps(samples[-1]), flush=True)
warm = [s for s in samples if s["i"] > n // 10]
b = np.polyfit([s["i"] for s in warm], [s["rss_mib"] for s in warm], 1)[0]
res = {"variant": variant, "n": n, "tree_kib": kib, "kib_per_save": round(b * 1024, 2),
       "load": open("/proc/loadavg").read().split()[:3], "orbax": ocp.__version__ if hasattr(ocp,
                                                                                             "__version__") else None,
       "samples": samples}
print(json.dumps({k: v for k, v in res.items() if k != "samples"}), flush=True)
json.dump(res, open(out_json, "w"), indent=1)
