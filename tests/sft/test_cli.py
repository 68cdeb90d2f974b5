"""The commands as users run them: SIGKILL mid-run then the same command resumes; and the whole
demos -> sft -> eval chain with the tiny model (slow: MJX compiles the expert and policy rollouts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from vlajax.data.lerobot import LeRobotData

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "vlajax.train", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
    return env


def _summary(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    assert lines, stdout
    return json.loads(lines[-1])


def _steps(ckpt_dir: str) -> list[int]:
    if not os.path.isdir(ckpt_dir):
        return []
    return sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())


@pytest.mark.slow
def test_sigkill_then_same_command_resumes_from_the_last_checkpoint(synthetic_dataset, tmp_path):
    out = str(tmp_path / "run")
    args = _cmd("sft", "--preset", "sft-tiny", "--data.dataset-dir", synthetic_dataset, "--output-dir", out,
                "--sft.num-steps", "60", "--checkpoint.every-steps", "2", "--logging.progress", "plain")
    ckpt = os.path.join(out, "checkpoints")
    proc = subprocess.Popen(args, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while len(_steps(ckpt)) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    last = _steps(ckpt)[-1]  # complete steps only: orbax writes into a temporary name first
    assert 2 <= last < 60
    done = subprocess.run(args, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = _summary(done.stdout)
    assert summary["start_step"] == last and summary["steps"] == 60
    assert _steps(ckpt)[-1] == 60


@pytest.mark.slow
def test_demos_sft_eval_chain_tiny(tmp_path):
    demos, out = str(tmp_path / "demos"), str(tmp_path / "run")
    common = ["--preset", "sft-tiny", "--output-dir", out, "--logging.progress", "plain"]
    r = subprocess.run(_cmd("demos", "--suite", "goal", "--episodes-per-task", "2", "--out", demos, *common),
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    data = LeRobotData(demos)
    assert data.info["total_episodes"] == 8 and len(data.tasks) >= 1
    per_task = _summary(r.stdout)["tasks"]  # expert success counts every tried episode, not the kept ones
    assert all(t["episodes"] == 2 and t["tried"] >= 2 and t["expert_success"] >= 2 / t["tried"]
               for t in per_task.values())
    assert max(t["expert_success"] for t in per_task.values()) > 2 / min(t["tried"] for t in per_task.values())
    r = subprocess.run(_cmd("sft", "--data.dataset-dir", demos, *common), cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _summary(r.stdout)["steps"] == 4
    r = subprocess.run(_cmd("eval", "--checkpoint", os.path.join(out, "checkpoints"), "--suite", "goal",
                            "--episodes-per-task", "2", "--env.episode-length", "24", *common),
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    res = _summary(r.stdout)
    with open(os.path.join(res["out_dir"], "eval.json")) as f:
        full = json.load(f)
    assert set(full["per_task"]) == {"goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"}
    assert full["episodes"] == 8 and 0.0 <= full["mean_success"] <= 1.0 and full["seeds"]["seed"] == 0
    assert full["physics"] == "jax"  # the default env.physics_impl 'auto' evaluates on MJX, and eval.json says so
    assert os.path.isfile(os.path.join(res["out_dir"], "eval.md"))
    assert len([f for f in os.listdir(res["out_dir"]) if f.endswith(".gif")]) == 4
