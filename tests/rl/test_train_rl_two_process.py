"""Issue #8 acceptance 3: `python -m vlajax.train rl` as 2 processes on localhost completes and
writes one checkpoint (the plain launch of docs/multihost.md: same command per process,
JAX_* variables tell who is who; 2 virtual CPU devices per process form one 4-device mesh).

The asynchronous pipeline (`--pipeline.enabled true`) is not covered: `vlajax.rl.async_loop`
does not run multi-process yet (colocated: the weight server's device_put of the rollout
params is a cross-host transfer the CPU backend refuses; disaggregated: the trainer gets the
process-local rollout batch, not a global array over the train mesh)."""

import contextlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENVS, DECISIONS, H = 8, 4, 2  # rl-debug: num_envs, rollout_length, action_horizon


def _launch_two(out: str, *extra: str, timeout: float = 900) -> list[tuple[str, str]]:
    """Run the rl command once per process; -> [(stdout, stderr)] of processes 0 and 1, both exit 0.

    Output goes to files: both processes log a lot, and a full pipe would stall the one not
    being read while the other waits for it at the shutdown barrier. The persistent compile
    cache is off: only process 0 ever hits it (JAX writes entries from process 0 only, and
    process 1 misses), so process 0 would reach the first collective while process 1 still
    compiles the MJX rollout, and gloo gives up on a peer after 30 s."""
    import portpicker

    port = portpicker.pick_unused_port()
    logs = os.path.join(os.path.dirname(out), "logs")
    os.makedirs(logs, exist_ok=True)
    paths = [(os.path.join(logs, f"p{pid}.out"), os.path.join(logs, f"p{pid}.err")) for pid in range(2)]
    procs = []
    with contextlib.ExitStack() as stack:
        for pid in range(2):
            env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                   "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(pid), "VLAJAX_COMPILATION_CACHE": ""}
            env.pop("XLA_FLAGS", None)
            cmd = [sys.executable, "-m", "vlajax.train", "rl", "--preset", "rl-debug", "--output-dir", out,
                   "--rl.num-iterations", "1", "--logging.progress", "none",
                   "--distributed.local-device-count", "2", *extra]
            o, e = (stack.enter_context(open(path, "w")) for path in paths[pid])
            procs.append(subprocess.Popen(cmd, stdout=o, stderr=e, text=True, env=env, cwd=ROOT))
        try:
            for p in procs:
                p.wait(timeout=timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    outs = []
    for pid, p in enumerate(procs):
        with open(paths[pid][0]) as o, open(paths[pid][1]) as e:
            outs.append((o.read(), e.read()))
        assert p.returncode == 0, f"process {pid} exited {p.returncode}:\n{outs[-1][1][-4000:]}"
    return outs


def _summary(outs) -> dict:
    """The one JSON summary line; only process 0 prints it."""
    lines = [[ln for ln in o.splitlines() if ln.startswith("{")] for o, _ in outs]
    assert len(lines[0]) == 1 and not lines[1], lines
    return json.loads(lines[0][0])


def _assert_one_checkpoint(out: str) -> None:
    ckpt = os.path.join(out, "checkpoints")
    assert sorted(os.listdir(ckpt)) == ["1"], os.listdir(ckpt)  # exactly the one step, no leftover tmp dirs
    assert os.listdir(os.path.join(ckpt, "1")), "empty checkpoint step directory"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.entry
def test_two_process_rl_sync_loop_writes_one_checkpoint(tmp_path):
    out = str(tmp_path / "run")
    outs = _launch_two(out)
    summary = _summary(outs)
    assert summary["start_iteration"] == 0 and summary["iterations"] == 1
    assert summary["env_steps"] == ENVS * DECISIONS * H  # every env of the 4-device mesh stepped once
    assert summary["checkpoint_dir"] == os.path.join(out, "checkpoints")
    for _, err in outs:
        assert "2 local / 4 global devices" in err and "mesh {'dp': 4" in err
    _assert_one_checkpoint(out)

