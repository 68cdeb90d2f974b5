"""`python -m vlajax.serve` as users run it, driven by openpi's own `WebsocketClientPolicy` (the
real `openpi-client` package, in its own numpy<2 venv), then SIGTERM while requests are in
flight: every received request is answered and the server exits 0."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from websockets.sync.client import connect

from tests.serve.client_env import SCRIPT, client_python
from vlajax.serve.codec import pack, unpack

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    return env


class Served:
    """`python -m vlajax.serve --checkpoint DIR --port 0 ...` in a subprocess; `.url` once it listens."""

    def __init__(self, checkpoint: str, *extra: str, timeout: float = 600):
        self.proc = subprocess.Popen([sys.executable, "-m", "vlajax.serve", "--checkpoint", checkpoint, "--port", "0",
                                      *extra], cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(ln) for ln in self.proc.stdout], daemon=True).start()
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError("server did not start: " + "".join(self.stderr[-20:])) from None
        assert line.startswith("serving ws://127.0.0.1:"), line + "".join(self.stderr[-20:])
        self.url = line.split()[1]
        self.host, self.port = "127.0.0.1", int(self.url.rsplit(":", 1)[1])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def openpi_client(host: str, port: int, requests: int = 3) -> dict:
    py, reason = client_python()
    if py is None:
        pytest.skip(reason)
    r = subprocess.run([py, SCRIPT, host, str(port), str(requests)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_openpi_client(out: dict, horizon: int = 4, action_dim: int = 4) -> None:
    assert out["numpy"].startswith("1."), out["numpy"]  # the client's own pinned numpy
    assert out["shapes"] == [[horizon, action_dim]] * len(out["shapes"]) and out["finite"]
    assert out["error"].startswith("Error in inference server:\nerror: missing key"), out["error"]
    assert out["after_error"] == [horizon, action_dim]


def test_openpi_client_then_sigterm_drains(policy_checkpoint):
    # T_max 1.5 s and B_max 8: the 4 requests below wait in the scheduler when SIGTERM arrives
    s = Served(policy_checkpoint, "--max-batch", "8", "--buckets", "1", "8", "--max-wait-ms", "1500")
    try:
        out = openpi_client(s.host, s.port)
        check_openpi_client(out)
        assert set(out["observation"]) == {"pixels/agentview", "pixels/wrist", "state", "prompt"}

        # SIGTERM with requests in flight: each sent request gets its answer, then the server exits 0
        answers, sent, errors = [], [], []
        go = threading.Barrier(5)

        def client(i):
            try:
                with connect(s.url, compression=None, max_size=None, open_timeout=30) as ws:
                    meta = unpack(ws.recv(timeout=30))
                    obs = {k: (np.zeros(e["shape"], np.uint8) if e["dtype"] == "uint8" else
                               np.zeros(e["shape"], np.float32) if e["dtype"] == "float32" else "press the button")
                           for k, e in meta["observation"].items()}
                    go.wait(30)
                    ws.send(pack(obs))
                    sent.append(i)
                    answers.append(ws.recv(timeout=60))
            except Exception as e:  # noqa: BLE001 -- asserted empty below
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        go.wait(60)
        deadline = time.monotonic() + 30
        while len(sent) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # received and queued, not yet answered (T_max = 1.5 s)
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        assert s.proc.wait(120) == 0, "".join(s.stderr[-20:])
        assert not errors and len(answers) == len(sent) == 4
        for a in answers:  # every in-flight request answered with its actions
            assert isinstance(a, bytes) and unpack(a)["actions"].shape == (4, 4), a
    finally:
        s.kill()


def test_cli_refuses_bad_flags_before_loading(tmp_path):
    from vlajax.serve.app import main

    assert main(["--checkpoint", str(tmp_path / "nope")]) == 2
    assert main(["--checkpoint", str(tmp_path), "--max-batch", "0"]) == 2
    assert main(["--checkpoint", str(tmp_path), "--max-batch", "8", "--buckets", "1", "4"]) == 2
    assert main(["--checkpoint", str(tmp_path), "--host", "example.com"]) == 2
    assert main(["--checkpoint", str(tmp_path), "--port", "70000"]) == 2
    assert main(["--checkpoint", str(tmp_path), "--replicas", "-1"]) == 2
    assert main(["--checkpoint", str(tmp_path), "--replicas", "4096"]) == 2  # more than the local devices
