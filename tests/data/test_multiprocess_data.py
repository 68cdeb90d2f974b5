"""Two processes read disjoint shards of one dataset into one global batch, and resume exactly."""

import json
import os
import subprocess
import sys

import portpicker
import pytest

from .helpers import write_dataset

WORKER = os.path.join(os.path.dirname(__file__), "multiprocess_worker.py")


@pytest.mark.multiprocess
def test_two_processes_shard_globalize_and_resume(tmp_path):
    root = write_dataset(str(tmp_path / "ds"), lengths=(6, 7, 8, 9, 10))
    port = portpicker.pick_unused_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, WORKER, str(pid), str(port), root, str(tmp_path / "ckpt")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for pid in range(2)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    r = results[0]
    assert results[0] == results[1]  # both see the same global batch
    assert r["shape"][0] == 16 and r["rows"][0] == 8
    idx = [i for i, m in zip(r["index"], r["mask"]) if m]
    first, second = r["index"][:8], r["index"][8:]
    assert all(i % 2 == 0 for i in first if i >= 0) and all(i % 2 == 1 for i in second if i >= 0)
    assert len(set(idx)) == len(idx)
    # process 1's rows address process 1's samples in the global batch (offset 8 slots x length)
    assert r["prefix_index_max_by_half"][0] < 8 * r["length"] <= r["prefix_index_max_by_half"][1]
    assert all(row >= 4 for row, i in zip(r["sample_row"][8:], second) if i >= 0)
    assert r["resumed_same"] is True
