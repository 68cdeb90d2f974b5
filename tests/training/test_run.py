"""The run skeleton (`vlajax.training.run.Run`) on a tiny real state: real Orbax checkpoints, the step
boundary's order (stop -> forced save -> stop line -> evaluate), resume, and the stop regions' bookkeeping.

A stop request is the flag a SIGTERM sets (`StopRequest.signal_name`); the signal path itself is
`tests/sft/test_preemption.py`'s (real subprocesses)."""

import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vlajax.config.schema import TrainConfig
from vlajax.training.run import Run


def _cfg(tmp_path, every=2, resume=True):
    cfg = TrainConfig()
    return dataclasses.replace(
        cfg, output_dir=str(tmp_path / "run"),
        checkpoint=dataclasses.replace(cfg.checkpoint, every_steps=every, async_save=False, resume=resume),
        logging=dataclasses.replace(cfg.logging, tensorboard=False, progress="none"))


def _loop(cfg, total, *, stop_after=None, evaluate_every=0):
    """A synchronous trainer on the skeleton: w += 1 per step. -> (run, steps, final w, evaluated steps, start)."""
    evaluated = []
    with Run(cfg, "toy", unit="step", total=total) as run:
        with run.setting_up():
            mesh = run.start(progress="toy")
            state, _ = run.init_state(lambda rng: {"w": jnp.zeros((4,), jnp.float32)})
            run.open_checkpoints()
            state, extra = run.restore(state)
            start = run.resumed_at(int(extra["step"])) if extra else 0
        run.open_logger()
        steps = run.steps(start, total)
        for step in steps:
            with steps.region(step):
                state = {"w": state["w"] + 1}
            done = step + 1
            if stop_after == done:
                run.stop.signal_name = "SIGTERM"  # what the signal watcher sets
            want = evaluate_every > 0 and done % evaluate_every == 0
            if steps.boundary(done, state, {"step": done}, want):
                with run.evaluating(done):
                    evaluated.append(done)
        saved = run.ckpt.all_steps()
    assert mesh is not None
    return steps, saved, np.asarray(jax.device_get(state["w"])), evaluated, start


def test_steps_save_on_cadence_and_at_the_end_then_resume_is_a_no_op(tmp_path):
    cfg = _cfg(tmp_path, every=2)
    steps, saved, w, evaluated, start = _loop(cfg, 5, evaluate_every=2)
    assert steps.status == "done" and start == 0 and w.tolist() == [5.0] * 4
    assert 5 in saved and 4 in saved  # the cadence, and the forced final save
    assert evaluated == [2, 4]  # each evaluation's step was saved first (forced)
    steps, _, w, evaluated, start = _loop(cfg, 5)
    assert start == 5 and w.tolist() == [5.0] * 4 and evaluated == []


def test_a_stop_request_saves_the_finished_step_and_leaves_with_one_line(tmp_path, capsys):
    cfg = _cfg(tmp_path, every=100)  # nothing on the cadence: the stop's save is the forced one
    steps, saved, w, evaluated, _ = _loop(cfg, 6, stop_after=3, evaluate_every=3)
    assert steps.status == "interrupted" and steps.end == 3 and w.tolist() == [3.0] * 4
    assert 3 in saved and max(saved) == 3
    assert evaluated == []  # no evaluation after a stop
    err = capsys.readouterr().err
    assert "toy: SIGTERM during step 3: finished it and saved checkpoint 3; exit 0" in err
    # the same command again resumes after step 3 and finishes the run
    steps, saved, w, _, start = _loop(cfg, 6)
    assert start == 3 and steps.status == "done" and w.tolist() == [6.0] * 4 and max(saved) == 6


def test_a_step_is_abandonable_only_while_its_predecessor_is_saved(tmp_path):
    cfg = _cfg(tmp_path, every=2)
    kinds = []
    with Run(cfg, "toy", unit="step", total=4) as run:
        run.start()
        run.open_checkpoints()
        steps = run.steps(0, 4)
        for step in steps:
            kinds.append(not isinstance(steps.region(step), contextlib.nullcontext))
            steps.boundary(step + 1, {"w": jnp.full((2,), step, jnp.float32)}, {"step": step + 1})
        assert run.kept() == "nothing new to save; newest checkpoint: step 4"
    # step 0 (the start), step 1 (checkpoint 1: Orbax's first save), step 2 after checkpoint 2; not step 3
    assert kinds == [True, True, True, False]
