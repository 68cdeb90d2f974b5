"""`python -m vlajax.train rl` as 2 processes on localhost completes and
writes one checkpoint (the plain launch of docs/multihost.md: same command per process,
JAX_* variables tell who is who; 2 virtual CPU devices per process form one 4-device mesh).

The synchronous loop and the asynchronous pipeline (`--pipeline.enabled`:
rollout host-local, training global) are both covered; the async runs also resume from their
multi-process checkpoint."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENVS, DECISIONS, H = 8, 4, 2  # rl-debug: num_envs, rollout_length, action_horizon


def _start_two(out: str, *extra: str, preset: str = "rl-debug", iterations: int = 1, progress: str = "none"
               ) -> tuple[list, list]:
    """Start the rl command once per process; -> (the Popen objects, their (stdout, stderr) log paths).

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
    for pid in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(pid), "VLAJAX_COMPILATION_CACHE": ""}
        env.pop("XLA_FLAGS", None)
        cmd = [sys.executable, "-m", "vlajax.train", "rl", "--preset", preset, "--output-dir", out,
               "--rl.num-iterations", str(iterations), "--logging.progress", progress,
               "--distributed.local-device-count", "2", *extra]
        with open(paths[pid][0], "w") as o, open(paths[pid][1], "w") as e:
            procs.append(subprocess.Popen(cmd, stdout=o, stderr=e, text=True, env=env, cwd=ROOT))
    return procs, paths


def _wait_two(procs: list, paths: list, timeout: float) -> list[tuple[str, str]]:
    """Wait for both processes; -> [(stdout, stderr)] of processes 0 and 1, both exit 0."""
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


def _launch_two(out: str, *extra: str, preset: str = "rl-debug", timeout: float = 900) -> list[tuple[str, str]]:
    """Run the rl command once per process (1 iteration unless `extra` says otherwise) and wait for both."""
    return _wait_two(*_start_two(out, *extra, preset=preset), timeout=timeout)


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



_DONE = re.compile(r"rl async: process (\d): (\w+) after (\d+) updates; rollout weights version (\d+) "
                   r"\(checksum (\S+)\); env steps trained on: (\d+) by this process, (\d+) by all")


def _async_done(outs) -> list[tuple]:
    """Each process's closing log line: (status, updates, version, checksum, steps here, steps all)."""
    done = []
    for pid, (_, err) in enumerate(outs):
        m = _DONE.findall(err)
        assert len(m) == 1 and int(m[0][0]) == pid, err[-4000:]
        done.append(m[0][1:])
    return done


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.entry
@pytest.mark.parametrize("mode", ["colocated", "disaggregated-slots"])
def test_two_process_rl_async_pipeline_trains_globally_and_resumes(tmp_path, mode):
    """The async RL loop as 2 processes. Each process rolls out its own 4 envs on its
    own devices; every update is one global step over both processes' batches; both processes
    take the same updates, install the same published weights on their own rollout mesh, and
    write one checkpoint together, from which a second launch resumes (colocated)."""
    out = str(tmp_path / "run")
    # generous bounds: the first waits include compiles (the closing evaluation compiles in the trainer lane)
    extra = ["--pipeline.enabled", "--pipeline.queue-timeout-s", "900", "--pipeline.watchdog-s", "1800"]
    preset = "rl-debug"
    if mode == "disaggregated-slots":  # 1 rollout + 1 train device per process; 2 env slots, streaming, partial
        preset = "rl-async-debug"
        extra += ["--pipeline.placement", "disaggregated", "--pipeline.staleness-threshold", "0"]
    outs = _launch_two(out, *extra, preset=preset, timeout=1800)
    summary = _summary(outs)
    assert summary["status"] == "done" and summary["updates"] == 1 and summary["version"] == 1
    assert summary["processes"] == 2
    # the one update trained on every env of both processes: 2 x (4 envs x 4 decisions x H steps)
    assert summary["consumed_env_steps"] == ENVS * DECISIONS * H
    done = _async_done(outs)
    for status, updates, version, _, here, everywhere in done:
        assert (status, updates, version) == ("done", "1", "1")
        assert int(here) == ENVS // 2 * DECISIONS * H and int(everywhere) == ENVS * DECISIONS * H
    assert done[0][3] == done[1][3]  # both rollout replicas hold the same published weights
    rollout, train = [], []
    for _, err in outs:
        assert "2 local / 4 global devices" in err
        m = re.search(r"placement \w+: rollout .* on devices (\[[\d, ]+\]), train .* on devices (\[[\d, ]+\])", err)
        rollout.append(set(json.loads(m.group(1))))
        train.append(set(json.loads(m.group(2))))
    assert not rollout[0] & rollout[1]  # each process rolls out on its own devices only
    assert train[0] == train[1] and len(rollout[0]) == (2 if mode == "colocated" else 1)
    if mode == "colocated":  # training on all 4 devices of both processes
        assert train[0] == rollout[0] | rollout[1]
    else:  # training on the other device of each process
        assert len(train[0]) == 2 and not train[0] & (rollout[0] | rollout[1])
    _assert_one_checkpoint(out)
    if mode != "colocated":  # (the slot path resets its envs on resume; the collect path restores them)
        return

    # resume: the second update only, from the env state each process saved as its row
    outs = _launch_two(out, *extra, "--rl.num-iterations", "2", preset=preset, timeout=1800)
    summary = _summary(outs)
    assert summary["status"] == "done" and summary["updates"] == 2 and summary["version"] == 2
    assert summary["consumed_env_steps"] == ENVS * DECISIONS * H
    done = _async_done(outs)
    assert [d[:3] for d in done] == [("done", "2", "2")] * 2 and done[0][3] == done[1][3]
    for _, err in outs:
        assert "rl async: resumed at update 1 (version 1)" in err
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == ["1", "2"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_sigterm_to_one_process_stops_both_after_the_same_iteration(tmp_path):
    """A preemption notice that reaches one host only (SIGTERM to process 1): the processes agree on
    it every iteration (`vlajax.training.preemption.StopRequest.requested`, one all-gather), so both stop after
    the same iteration, save that iteration's checkpoint together and exit 0 -- none is left
    waiting in a collective for a peer that has gone."""
    import time

    out = str(tmp_path / "run")
    total = 200
    procs, paths = _start_two(out, "--rl.eval-every", "-1", "--checkpoint.every-steps", "1000", iterations=total,
                              progress="plain")
    ckpt = os.path.join(out, "checkpoints")

    def logged() -> str:
        text = ""
        for path in paths[0]:
            with open(path) as f:
                text += f.read()
        return text

    deadline = time.monotonic() + 900
    while not re.search(rf"\[rl rl-debug\] [3-9]\d*/{total}", logged()):  # a few iterations done
        assert all(p.poll() is None for p in procs), logged()[-4000:]
        assert time.monotonic() < deadline, "no progress line"
        time.sleep(1.0)
    procs[1].send_signal(signal.SIGTERM)
    outs = _wait_two(procs, paths, timeout=600)
    summary = _summary(outs)
    assert summary["status"] == "interrupted" and summary["start_iteration"] == 0
    steps = sorted(int(d) for d in os.listdir(ckpt) if d.isdigit())
    k = steps[-1]  # the forced save of the last iteration (step 1: Orbax saves a directory's first step)
    assert 2 <= k < total and steps[:-1] in ([], [1]), os.listdir(ckpt)
    assert not [d for d in os.listdir(ckpt) if "tmp" in d], os.listdir(ckpt)
    assert f"interrupted (SIGTERM) after iteration {k}" in outs[1][1]
    assert f"interrupted (a signal to another process) after iteration {k}" in outs[0][1]  # process 0 got none
