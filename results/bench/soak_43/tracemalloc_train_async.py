"""Where does train_async's RSS grow? tracemalloc started after update A; snapshots at updates A+, B, C."""
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
import tracemalloc

sys.path.insert(0, "/work/main")
from research.bench.soak import rss_mb
from vlajax.config.schema import get_config
from vlajax.rl import async_loop

out = sys.argv[1]; marks = [int(x) for x in sys.argv[2].split(",")]
logging.basicConfig(level=logging.WARNING)
base = get_config("rl-debug")
cfg = base.replace(output_dir=out, rl=dataclasses.replace(base.rl, num_iterations=10**9, eval_every=50),
    pipeline=dataclasses.replace(base.pipeline, enabled=True),
    checkpoint=dataclasses.replace(base.checkpoint, every_steps=10),
    logging=dataclasses.replace(base.logging, tensorboard=True, progress="off"))
metrics = os.path.join(out, "async_metrics.jsonl")
def updates():
    try:
        with open(metrics, "rb") as f: return f.read().count(b'"train": ')
    except FileNotFoundError: return 0
def watch():
    snaps = []
    for i, m in enumerate(marks):
        while updates() < m: time.sleep(2)
        if i == 0: tracemalloc.start(10)
        gc.collect()
        s = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        cur, peak = tracemalloc.get_traced_memory()
        print(f"== update {updates()}: rss {rss_mb():.0f} MiB, traced {cur/2**20:.2f} MiB, gc objects "
              f"{len(gc.get_objects())}", flush=True)
        if snaps:
            for st in s.compare_to(snaps[-1], "traceback")[:10]:
                print(f"  {st.size_diff/1024:+.0f} KiB, {st.count_diff:+d} blocks", flush=True)
                for line in st.traceback.format()[-10:]: print("     ", line, flush=True)
        snaps.append(s)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=watch, daemon=True).start()
async_loop.run_async(cfg)
