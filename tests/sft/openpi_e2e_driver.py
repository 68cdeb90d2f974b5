"""The phases of tests/sft/test_openpi_e2e.py in one process (one JAX start, one CPU device):

    python tests/sft/openpi_e2e_driver.py OUT FIXTURES CLIENT_PYTHON

import (`python -m vlajax.policies.import_openpi`'s main) -> SFT -> async RL (staleness 1, VLM
frozen, no eval of its own) -> `python -m vlajax.train eval` on the RL checkpoint -> `vlajax.serve`
of that checkpoint, driven by the real openpi-client (`CLIENT_PYTHON`, its own venv; '' skips that
phase). Each phase calls the same `main` a user's command line does; each prints one JSON line
`{"phase": ..., "seconds": ..., ...}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = ("--env.cameras", "agentview", "--env.task", "goal/press_button")
SMALL = ("--model.num-cameras", "1", "--model.max-text-len", "64", "--model.num-denoise-steps", "4",
         "--data.camera-map", "agentview=base_0_rgb", "--logging.progress", "none", *ENV)
# eval reads the model and its camera map from the checkpoint; only the sampling fields may change
EVAL_SMALL = ("--model.num-denoise-steps", "4", *ENV)


def _phase(name: str, fn, *args) -> dict:
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = fn(*args)
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("{")]
    result = {"phase": name, "rc": rc, "seconds": round(time.perf_counter() - t0, 1),
              "result": json.loads(lines[-1]) if lines else out.getvalue()[-2000:]}
    print(json.dumps(result), flush=True)
    if rc != 0:
        sys.exit(1)
    return result


def main() -> int:
    out, fixtures, client = sys.argv[1], sys.argv[2], sys.argv[3]
    from vlajax import train
    from vlajax.policies import import_openpi

    tok = os.path.join(fixtures, "tokenizer.model")
    imported, sft, rl = (os.path.join(out, d) for d in ("imported", "sft", "rl"))
    _phase("import", import_openpi.main, ["--checkpoint", os.path.join(fixtures, "pi05_libero", "ckpt"), "--config",
                                          "pi05_libero", "--size", "dummy", "--tokenizer", tok, "--out", imported])
    _phase("sft", train.main, ["sft", "--preset", "pi05-dummy", "--sft.init-from", imported, "--data.dataset-dir",
                               os.path.join(REPO, "tests", "fixtures", "lerobot-v3.0-images"), "--data.drop-cameras",
                               "wrist", "--output-dir", sft, "--sft.num-steps", "2", "--data.batch-size", "2",
                               "--sft.eval-every", "-1", "--model.tokenizer-path", tok, *SMALL])
    _phase("rl", train.main, ["rl", "--preset", "pi05-dummy", "--rl.init-from", os.path.join(sft, "checkpoints"),
                              "--output-dir", rl, "--pipeline.enabled", "--pipeline.staleness-threshold", "1",
                              "--rl.num-iterations", "2", "--env.num-envs", "2", "--rl.group-size", "2",
                              "--env.episode-length", "10", "--model.trainable", "expert",
                              "--rl.eval-every", "-1", *SMALL])  # the eval phase below evaluates it
    _phase("eval", train.main, ["eval", "--preset", "pi05-dummy", "--checkpoint", os.path.join(rl, "checkpoints"),
                                "--output-dir", rl, "--episodes-per-task", "1", "--env.episode-length", "10",
                                *EVAL_SMALL])
    if client:
        _phase("serve", serve, os.path.join(rl, "checkpoints"), client)
    return 0


def serve(checkpoint: str, client: str) -> int:
    """`vlajax.serve` in a thread of this process; the openpi-client script asks it 2 requests."""
    from vlajax.serve import app

    server = app.build(app.ServeArgs(checkpoint=checkpoint, port=0, max_batch=1, replicas=1))
    ready = threading.Event()
    thread = threading.Thread(target=lambda: asyncio.run(server.run(lambda port: ready.set(), signals=False)),
                              daemon=True)
    thread.start()
    assert ready.wait(120), "server did not start"
    script = os.path.join(REPO, "tests", "serve", "openpi_client_script.py")
    try:
        r = subprocess.run([client, script, "127.0.0.1", str(server.port), "2"], capture_output=True, text=True,
                           timeout=300)
    finally:
        server.request_stop()
        thread.join(60)
    print(r.stdout.strip().splitlines()[-1] if r.returncode == 0 else json.dumps({"error": r.stderr[-2000:]}))
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
