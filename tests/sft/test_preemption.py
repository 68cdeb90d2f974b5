"""Preemption through the real commands: SIGTERM / Ctrl-C to `python -m vlajax.train sft` and to the
synchronous and asynchronous `rl` loops stops after the current step with that step's checkpoint
(exit 0, status "interrupted"); the same command then resumes and applies every remaining step once
(the resumed losses / metrics equal an uninterrupted run's). A second signal exits at once (130) and
leaves the last complete checkpoint. (The donated, blocking-update and fault cases of the async
lanes: tests/pipeline/test_faults.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.sft.test_cli import REPO, _env, _steps, _summary


def _no_partial_checkpoints(ckpt_dir: str) -> None:
    assert not [d for d in os.listdir(ckpt_dir) if "tmp" in d], os.listdir(ckpt_dir)


class _Run:
    """A command in a subprocess whose merged output is read line by line in a thread."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "vlajax.train", *args], cwd=REPO, env=_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for ln in self.proc.stdout:
            with self._cond:
                self.lines.append(ln.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 600.0) -> re.Match:
        """Block until a line matches `pattern` (regex); fail if the process ends first."""
        rx, seen = re.compile(pattern), 0
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for ln in self.lines[seen:]:
                    if m := rx.search(ln):
                        return m
                seen = len(self.lines)
                assert self.proc.poll() is None or seen < len(self.lines), "\n".join(self.lines[-40:])
                assert time.monotonic() < deadline, f"no line matching {pattern!r} in {timeout} s"
                self._cond.wait(1.0)

    def finish(self, timeout: float = 600.0) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        time.sleep(0.2)  # the reader drains the pipe
        return rc, "\n".join(self.lines)


def _run(args: list[str], timeout: float = 900.0) -> str:
    done = subprocess.run([sys.executable, "-m", "vlajax.train", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def _interrupt(args: list[str], progress: str, sig: int) -> tuple[int, str, float]:
    """Start `args`, wait for progress line `progress`, send `sig`; -> (exit code, output, seconds
    from the signal to the exit)."""
    run = _Run(args)
    run.wait_for(progress)
    t0 = time.monotonic()
    run.proc.send_signal(sig)
    rc, out = run.finish()
    return rc, out, time.monotonic() - t0


# ---- sft ------------------------------------------------------------------------------------


def _sft_args(dataset: str, out: str, steps: int) -> list[str]:
    return ["sft", "--preset", "sft-tiny", "--data.dataset-dir", dataset, "--output-dir", out,
            "--sft.num-steps", str(steps), "--checkpoint.every-steps", "1000", "--logging.progress", "plain",
            "--logging.every-steps", "1", "--compilation-cache-dir", ""]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["sigterm", "ctrl-c"])
def test_sft_stops_after_the_current_step_with_its_checkpoint_and_resumes(synthetic_dataset, tmp_path, sig):
    total = 40
    args = _sft_args(synthetic_dataset, str(tmp_path / "run"), total)
    rc, out, seconds = _interrupt(args, r"\[sft sft-tiny\] [3-9]/40", sig)
    assert rc == 0, out[-4000:]
    first = _summary(out)
    k = first["steps"]
    assert first["status"] == "interrupted" and 3 <= k < total, first
    assert seconds < 60, seconds  # one sft-tiny step, a save and the exit; not the remaining steps
    ckpt = str(tmp_path / "run" / "checkpoints")
    assert _steps(ckpt)[-1] == k  # the interrupted step, although every_steps=1000
    _no_partial_checkpoints(ckpt)
    resumed = _summary(_run(args))
    assert resumed["status"] == "done" and resumed["start_step"] == k and resumed["steps"] == total
    if sig == signal.SIGTERM:  # no step twice, none skipped: the losses continue an uninterrupted run's
        whole = _summary(_run(_sft_args(synthetic_dataset, str(tmp_path / "whole"), total)))
        assert whole["start_step"] == 0 and whole["steps"] == total
        assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)


@pytest.mark.timeout(600)
def test_a_signal_mid_compile_after_a_resume_abandons_at_once_keeping_the_last_checkpoint(synthetic_dataset, tmp_path):
    """The first step after a resume (it compiles) has nothing unsaved before it, so a signal abandons it
    at once (exit 0, one line). (A second signal exiting 130: tests/reliability/test_stop_anywhere.py.)"""
    out_dir = tmp_path / "run"
    args = _sft_args(synthetic_dataset, str(out_dir), 4)
    _run(args)  # 4 complete steps: the checkpoint to keep
    ckpt = str(out_dir / "checkpoints")
    assert _steps(ckpt)[-1] == 4
    args[args.index("--sft.num-steps") + 1] = "100000"
    run = _Run(args)  # the same command, longer: resumes at 4, compiles its step
    run.wait_for(r"sft: resumed from step 4")
    run.proc.send_signal(signal.SIGTERM)  # seen at once by the watcher thread, although the main
    t0 = time.monotonic()  # thread is inside a compile (or a step)
    rc, out = run.finish(timeout=60)
    assert rc == 0, out[-3000:]
    assert time.monotonic() - t0 < 10
    assert re.search(r"sft: SIGTERM during (set-up \(before the first step\)|step \d+ \(its predecessor is saved\)): "
                     r"abandoned it; nothing new to save; newest checkpoint: step \d+; exit 0", out), out[-3000:]
    newest = max(_steps(ckpt))
    assert newest >= 4  # (a step may have completed, and been saved, before the signal)
    _no_partial_checkpoints(ckpt)
    from vlajax.training.checkpoint import Checkpointer

    with Checkpointer(ckpt, async_save=False) as c:
        assert c.latest_step() == newest


# ---- rl: the synchronous and asynchronous loops ------------------------------------------------


def _rl_args(out: str, iterations: int, *extra: str) -> list[str]:
    return ["rl", "--preset", "rl-debug", "--output-dir", out, "--rl.num-iterations", str(iterations),
            "--rl.eval-every", "-1", "--checkpoint.every-steps", "1000", "--logging.progress", "plain",
            "--compilation-cache-dir", "", *extra]


@pytest.mark.timeout(900)
def test_sync_rl_sigterm_stops_after_the_current_iteration_and_resumes(tmp_path):
    total = 12
    args = _rl_args(str(tmp_path / "run"), total)
    rc, out, seconds = _interrupt(args, r"\[rl rl-debug\] [2-9]/12", signal.SIGTERM)
    assert rc == 0, out[-4000:]
    first = _summary(out)
    assert first["status"] == "interrupted", first
    ckpt = str(tmp_path / "run" / "checkpoints")
    k = _steps(ckpt)[-1]
    assert 2 <= k < total and f"interrupted (SIGTERM) after iteration {k}" in out
    _no_partial_checkpoints(ckpt)
    resumed = _summary(_run(args))
    assert resumed["status"] == "done" and resumed["start_iteration"] == k and _steps(ckpt)[-1] == total
    assert resumed["env_steps"] == pytest.approx(total * 8 * 4 * 2)  # 8 envs x 4 chunks x H=2 per iteration
    assert resumed["evals"] == []  # rl.eval_every=-1: not even at the end


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_async_rl_sigterm_stops_at_an_update_boundary_and_resumes(tmp_path):
    total = 12
    args = _rl_args(str(tmp_path / "run"), total, "--pipeline.enabled", "--pipeline.staleness-threshold", "0")
    rc, out, _ = _interrupt(args, r"\[rl async rl-debug\] [3-9]/12", signal.SIGTERM)
    assert rc == 0, out[-4000:]
    # the trainer stops at its next boundary, saves it, and the process leaves (the rollout in flight dropped)
    m = re.search(r"rl: SIGTERM during the async run at update (\d+): stopped at the boundary after update \d+, "
                  r"saved checkpoint (\d+)", out)
    assert m, out[-4000:]
    k = int(m.group(2))
    assert 3 <= k < total
    ckpt = str(tmp_path / "run" / "checkpoints")
    assert _steps(ckpt)[-1] == k
    _no_partial_checkpoints(ckpt)
    resumed = _summary(_run(args))
    assert resumed["status"] == "done" and resumed["updates"] == total and _steps(ckpt)[-1] == total
