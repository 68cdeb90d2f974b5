"""Two processes on localhost run the async runner: rollout host-local, training global."""

import json
import os
import subprocess
import sys

import portpicker
import pytest

WORKER = os.path.join(os.path.dirname(__file__), "multiprocess_runner_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_two_process_async_run_completes():
    port = portpicker.pick_unused_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, WORKER, str(pid), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) for pid in range(2)]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=280)
            assert p.returncode == 0, err[-4000:]
            results.append(json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r in results:
        assert r["status"] == "done" and r["updates"] == 4 and r["version"] == 4
        assert r["staleness"] == [0] * 8
        assert r["changed"] and r["rollout_w_equals_trainer"]
        assert set(r["rollout_devices"]) <= set(r["local_devices"])  # rollout stayed on this host
        assert r["train_processes"] == [0, 1]  # training spans both
    assert results[0]["final_w"] == results[1]["final_w"]  # one global train state
    assert results[0]["local_devices"] != results[1]["local_devices"]
