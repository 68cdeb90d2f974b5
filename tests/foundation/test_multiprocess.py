"""Two real processes on localhost form one 8-device program (gloo collectives)."""

import json
import os
import subprocess
import sys

import portpicker
import pytest

WORKER = os.path.join(os.path.dirname(__file__), "multiprocess_worker.py")


@pytest.mark.multiprocess
def test_two_processes_mesh_reduction_and_checkpoint(tmp_path):
    port = portpicker.pick_unused_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(pid), str(port), str(tmp_path / "ckpt")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for pid in range(2)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
            line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    # sum(0..11) + sum(100..111) = 66 + 1266 = 1332, seen identically by both processes.
    assert [r["total"] for r in results] == [1332.0, 1332.0]
    for r in results:
        assert r["same"] is True
        assert r["extra"] == {"pid_saved": 0}
        assert r["restored_mesh"] == {"dp": 2, "tp": 4, "sp": 1}
        assert r["restored_spec"] == ["dp", "tp"]
