"""Interruptions and faults of an asynchronous run.

Interruption: a trainer that donates its state to a jitted update and
then blocks `block_s` per update runs in a subprocess; SIGTERM / Ctrl-C during update 2 (or
during an evaluation after it) must end the process within the runner's derived bound with one
checkpoint whose counters and params are of the same update; resuming from it must end on the
parameters of an uninterrupted run (no update applied twice or skipped; staleness 0, one
rollout lane, no streaming = the sync-equivalent mode). A second signal exits at once and
leaves the last complete checkpoint restorable. The default suite blocks 3 s per update; the
`slow` variant 15 s.

Faults: a slot that raises, a simulator step that hangs (the watchdog names the slot), a
trainer that raises; each stops the run with the lane's name in the error.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import AsyncConfig
from vlajax.pipeline.buffer import Trajectory
from vlajax.pipeline.lanes import LaneStalled, RunAborted
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters
from vlajax.pipeline.slots import SlotRollout

B, D = 4, 3


@functools.partial(jax.jit, donate_argnums=0)
def _update(state, x):
    return {"w": 0.9 * state["w"] + jnp.mean(x, 0), "step": state["step"] + 1}


def _toy(ckpt_dir: str, total: int, block_s: float = 0.0, eval_at: int = -1, eval_s: float = 0.0,
         save_every: int = 1000, say=lambda msg: None) -> dict:
    """Run (or resume) the toy async run; saves at the interrupt boundary and at the end."""
    from vlajax.training.checkpoint import Checkpointer

    ckpt = Checkpointer(ckpt_dir, save_every=save_every, async_save=True)
    state = {"w": jnp.zeros((D,), jnp.float32), "step": jnp.zeros((), jnp.int32)}
    counters = RunnerCounters()
    if ckpt.latest_step() is not None:
        state, extra = ckpt.restore(state)
        counters = RunnerCounters(**extra["counters"])
        say(f"resumed {counters.updates}")

    def sample_step(version, params, call):
        x = np.full((B, D), call + 1.0, np.float32) + 0.01 * float(np.asarray(params["w"]).sum())
        return [Trajectory({"x": x}, np.full((1,), version), num_samples=B, env_steps=B)]

    def train_step(s, batches):
        x = jnp.concatenate([jnp.asarray(it.data["x"]) for it in batches])
        say(f"begin {int(s['step']) + 1}")
        new = _update(s, x)  # `s` is donated: its buffers are gone from here on
        time.sleep(block_s)
        return new, {}

    def save(runner: AsyncRunner, force: bool) -> None:
        c = runner.resume_counters()
        ckpt.save(c.updates, runner.state, extra={"counters": c.to_json(), "buffer": runner.buffer.counters()},
                  force=force)

    def on_update(runner: AsyncRunner, rec: dict) -> None:
        u = rec["update"]
        save(runner, force=u == total)
        say(f"update {u}")
        if u == eval_at:
            say("eval")
            time.sleep(eval_s)

    runner = AsyncRunner(AsyncConfig(require_batches=1, staleness_threshold=0.0, streaming=False),
                         sample_step=sample_step, train_step=train_step, get_params=lambda s: {"w": s["w"]},
                         state=state, num_updates=total, samples_per_step=B, mini_batch=B, counters=counters,
                         on_update=on_update)
    try:
        status = runner.run(on_interrupt=lambda r: save(r, force=True))
    except RunAborted:
        say("aborted")
        raise
    ckpt.close()
    return {"status": status, "updates": runner.counters.updates, "interrupted_at": runner.interrupted_at,
            "bound": runner.drain_bound(), "stopped_after_s": runner.group.stopped_after_s,
            "w": np.asarray(runner.state["w"]).tolist(),
            "step": int(runner.state["step"])}


def _worker(argv: list[str]) -> int:
    d, total, block_s, eval_at, eval_s, save_every = argv
    say = lambda msg: print(msg, flush=True)
    try:
        out = _toy(d, int(total), float(block_s), int(eval_at), float(eval_s), int(save_every), say)
    except RunAborted:
        return 3
    say("result " + json.dumps(out))
    return 0


def _spawn(tmp_path, total=4, block_s=3.0, eval_at=-1, eval_s=0.0, save_every=1000):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, __file__, "worker", str(tmp_path / "ckpt"), str(total), str(block_s),
                             str(eval_at), str(eval_s), str(save_every)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _read_until(proc, marker: str, timeout: float = 120.0) -> list[str]:
    lines, box = [], []

    def read():
        for ln in proc.stdout:
            lines.append(ln.strip())
            if ln.strip() == marker:
                box.append(True)
                return

    th = threading.Thread(target=read, daemon=True)
    th.start()
    th.join(timeout)
    assert box, f"no {marker!r} within {timeout} s; got {lines}"
    return lines


def _restore(path):
    from vlajax.training.checkpoint import Checkpointer

    ckpt = Checkpointer(str(path), async_save=False)
    steps = ckpt.all_steps()
    state, extra = ckpt.restore({"w": jnp.zeros((D,), jnp.float32), "step": jnp.zeros((), jnp.int32)})
    ckpt.close()
    return steps, state, extra


@functools.cache
def _reference(total: int) -> list[float]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return _toy(d, total)["w"]


def _interrupt_and_resume(tmp_path, sig, block_s, during_eval=False):
    total = 4
    proc = _spawn(tmp_path, total=total, block_s=block_s, eval_at=2 if during_eval else -1,
                  eval_s=2 * block_s if during_eval else 0.0)
    _read_until(proc, "eval" if during_eval else "begin 2")
    time.sleep(0.5)
    t_sig = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    elapsed = time.monotonic() - t_sig
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(next(ln for ln in out.splitlines() if ln.startswith("result "))[7:])
    assert result["status"] == "interrupted" and result["interrupted_at"] == 2, result
    # signal -> trainer at its boundary, saved, every lane joined: within the derived bound; the
    # process then closes its checkpointer and exits (slack for a loaded machine's teardown)
    assert result["stopped_after_s"] <= result["bound"], result
    assert elapsed <= result["bound"] + 60, (elapsed, result["bound"])
    assert "update 3" not in out and "begin 3" not in out  # stopped at the boundary after update 2
    steps, state, extra = _restore(tmp_path / "ckpt")
    # (Orbax always writes the first save of a directory: update 1; then the interrupt's, once)
    assert steps == [1, 2] and extra["counters"]["updates"] == 2 == int(state["step"])  # of one update
    assert extra["buffer"]["consumed"] == 2 * B
    np.testing.assert_allclose(np.asarray(state["w"]), _reference(2), rtol=1e-6)
    resumed = _toy(str(tmp_path / "ckpt"), total)
    assert resumed["status"] == "done" and resumed["updates"] == total == resumed["step"]
    np.testing.assert_allclose(resumed["w"], _reference(total), rtol=1e-6)  # no update twice, none skipped


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_interrupt_during_a_blocking_donating_update_saves_that_update_once(tmp_path, sig):
    _interrupt_and_resume(tmp_path, sig, block_s=3.0)


@pytest.mark.timeout(240)
def test_sigterm_during_an_evaluation_saves_the_update_before_it(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGTERM, block_s=1.0, during_eval=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_interrupt_during_a_15_second_update(tmp_path):
    _interrupt_and_resume(tmp_path, signal.SIGTERM, block_s=15.0)


@pytest.mark.timeout(240)
def test_second_signal_exits_at_once_and_keeps_the_last_complete_checkpoint(tmp_path):
    proc = _spawn(tmp_path, total=4, block_s=20.0, save_every=1)
    _read_until(proc, "begin 2")
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err[-3000:]  # RunAborted
    assert time.monotonic() - t0 < 15  # did not wait for the 20 s update
    steps, state, extra = _restore(tmp_path / "ckpt")
    assert steps == [1] and extra["counters"]["updates"] == 1 == int(state["step"])
    np.testing.assert_allclose(np.asarray(state["w"]), _reference(1), rtol=1e-6)


# ----------------------------------------------------------------------------------------
# Faults in lanes
# ----------------------------------------------------------------------------------------


def _slot_run(step, watchdog_s=60.0, queue_timeout_s=60.0):
    cfg = AsyncConfig(enabled=True, num_slots=2, require_batches=2, staleness_threshold=0.0, max_wait_ms=1.0,
                      watchdog_s=watchdog_s, queue_timeout_s=queue_timeout_s)
    rollout = SlotRollout(cfg, reset=lambda s: (0, np.zeros(2, np.float32)), step=step,
                          infer=lambda params, obs: [o + 1 for o in obs], horizon=2, samples_per_slot=1)

    def train_step(state, batches):
        for _ in batches:
            pass
        return state, {}

    return AsyncRunner(cfg, sample_step=rollout.sample_step, train_step=train_step, get_params=lambda s: s,
                       state={"w": np.zeros(1, np.float32)}, num_updates=3, samples_per_step=1, mini_batch=1,
                       rollout=rollout.lanes)


@pytest.mark.timeout(60)
def test_a_slot_that_raises_stops_the_run_naming_the_slot():
    def step(slot, env_state, out):
        if slot == 1:
            raise FloatingPointError("simulator diverged")
        return env_state, out, {"o": out}

    with pytest.raises(FloatingPointError) as e:
        _slot_run(step).run(timeout=50)
    assert any("rollouter/slot1" in n for n in e.value.__notes__)


@pytest.mark.timeout(60)
def test_a_hanging_simulator_step_is_named_by_the_watchdog_within_its_timeout():
    release, calls, hung = threading.Event(), [0], []

    def step(slot, env_state, out):
        if slot == 0:
            calls[0] += 1
            if calls[0] == 3:  # slot 0's second segment: past its first call's budget for compiles
                hung.append(time.monotonic())
                release.wait(30)  # hangs (released at the end so the thread ends)
        return env_state, out, {"o": out}

    try:
        with pytest.raises(LaneStalled, match="rollouter/slot0"):
            _slot_run(step, watchdog_s=1.0).run(timeout=50)
        named = time.monotonic()
    finally:
        release.set()
    # within the slot's limit (watchdog 1 s; its segments take far less) + polling + the join bound
    assert hung and named - hung[0] < 1.0 + 15.0


@pytest.mark.timeout(60)
def test_slow_is_not_stuck_first_calls_and_slow_updates_outlive_short_timeouts():
    """queue_timeout 0.3 s, watchdog 0.3 s: a first update of 1.5 s (a compile) and later
    updates of 0.6 s (slow, not stuck) finish; rollout waits meanwhile without timing out."""
    def step(slot, env_state, out):
        return env_state, out, {"o": out}

    runner = _slot_run(step, watchdog_s=0.3, queue_timeout_s=0.3)
    durations = iter([1.5] + [0.6] * 10)

    def slow_train(state, batches):
        for _ in batches:
            pass
        time.sleep(next(durations))
        return state, {}

    runner.train_step = slow_train
    assert runner.run(timeout=50) == "done" and runner.counters.updates == 3


@pytest.mark.timeout(60)
def test_an_evaluation_in_the_trainer_lane_beats_its_heartbeat():
    """An on_update evaluation of 2 s under a 0.5 s watchdog (its first update is quick, so its
    limit is the watchdog's) does not stall the trainer when it runs under `heartbeat()`."""
    def step(slot, env_state, out):
        return env_state, out, {"o": out}

    runner = _slot_run(step, watchdog_s=0.5)

    def on_update(r, rec):
        if rec["update"] == 2:
            with r.trainer_lane.heartbeat(0.1):
                time.sleep(2.0)

    runner.on_update = on_update
    assert runner.run(timeout=50) == "done"


@pytest.mark.timeout(60)
def test_a_trainer_that_raises_stops_the_run_naming_the_trainer():
    def step(slot, env_state, out):
        return env_state, out, {"o": out}

    runner = _slot_run(step)

    def bad_train(state, batches):
        next(batches)
        raise RuntimeError("loss is NaN")

    runner.train_step = bad_train
    with pytest.raises(RuntimeError, match="loss is NaN") as e:
        runner.run(timeout=50)
    assert any("'trainer'" in n for n in e.value.__notes__)


@pytest.mark.timeout(120)
def test_a_failing_checkpoint_write_stops_the_run_naming_the_path_and_keeps_the_previous(tmp_path, monkeypatch):
    """The filesystem refuses step 2's final rename (ENOSPC at Orbax's atomic commit): the
    error reaches the trainer lane with the path in it, step 1 stays the newest complete
    checkpoint and restores, and no directory for step 2 appears."""
    import errno

    from orbax.checkpoint._src.path import async_path

    rename = async_path.rename

    async def failing_rename(src, dst):
        if os.path.basename(str(dst)) == "2":
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return await rename(src, dst)

    monkeypatch.setattr(async_path, "rename", failing_rename)
    d = tmp_path / "ckpt"
    with pytest.raises(OSError, match="No space left") as e:
        _toy(str(d), total=4, save_every=1)
    assert str(d / "2") in str(e.value) and any("'trainer'" in n for n in e.value.__notes__)
    monkeypatch.setattr(async_path, "rename", rename)
    steps, state, extra = _restore(d)
    assert steps == [1] and extra["counters"]["updates"] == 1 == int(state["step"])
    assert "2" not in os.listdir(d)


def test_sft_prefetch_wait_is_bounded(monkeypatch):
    """The data loader's consumer raises when its prefetch thread died silently or is stuck."""
    import queue as queue_mod
    import types

    from vlajax.data import loader

    monkeypatch.setattr(loader, "_POLL_S", 0.05)
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    fake = types.SimpleNamespace(_queue=queue_mod.Queue(), _thread=dead)
    with pytest.raises(RuntimeError, match="ended without a batch"):
        loader.Loader._next_item(fake)
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, daemon=True)
    stuck.start()
    monkeypatch.setattr(loader, "STALL_S", 0.2)
    try:
        with pytest.raises(TimeoutError, match="no batch"):
            loader.Loader._next_item(types.SimpleNamespace(_queue=queue_mod.Queue(), _thread=stuck))
    finally:
        release.set()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    # a run started in the foreground gets Ctrl-C as KeyboardInterrupt; one whose parent was launched in
    # the background of a non-interactive shell inherits SIGINT ignored (POSIX), and Python keeps it so
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(_worker(sys.argv[2:]))
