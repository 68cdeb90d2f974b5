"""`eval` never writes over another evaluation: results are named by the evaluated run and step, beside it
(or under `--out` / a command line's `--output-dir`), a second result of the same name gets a new name unless
`--overwrite`; GIFs are viewable (>= 256 px tall) with the outcome drawn; eval.md shows the instructions."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.sft.conftest import write_dataset
from vlajax import train as train_cli
from vlajax.envs.video import FAILURE_RGB, SUCCESS_RGB, outcome_clip
from vlajax.evaluation import closed_loop as evaluation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(*args: str):
    return train_cli.parse("eval", ["--preset", "sft-tiny", "--suite", "goal", *args])


def _result(tasks=("goal/stack", "goal/press_button")) -> dict:
    return {"suite": "goal", "per_task": {t: 0.5 for t in tasks}, "mean_success": 0.5, "episodes": 4,
            "episodes_per_task": 2, "failures": {t: 1 for t in tasks}, "gif_episodes": 2,
            "instructions": {t: ["stack the red cube on the blue cube", "stack the green cube on the red cube"]
                             for t in tasks},
            "episode_success": {t: [1, 0] for t in tasks}, "episode_steps": {t: [10, 40] for t in tasks}}


def _write(out_dir: str) -> str:
    frames = np.zeros((40, 4, 32, 32, 3), np.uint8)  # [S, tasks x gif episodes, h, w, 3]
    frames[:] = (60 + 2 * np.arange(40, dtype=np.uint8))[:, None, None, None, None]  # every frame differs
    evaluation.write_outputs(out_dir, _result(), frames)
    return out_dir


def test_two_runs_evaluated_into_the_default_place_keep_both_results(tmp_path):
    a, b = tmp_path / "run-a" / "checkpoints", tmp_path / "run-b" / "checkpoints"
    first = evaluation.result_dir(_cfg("--checkpoint", str(a)), "goal", 2)
    assert first == str(tmp_path / "run-a" / "eval" / "goal-step-2")  # beside the evaluated run
    _write(first)
    second = evaluation.result_dir(_cfg("--checkpoint", str(b)), "goal", 2)
    assert second == str(tmp_path / "run-b" / "eval" / "goal-step-2")
    _write(second)
    again = evaluation.result_dir(_cfg("--checkpoint", str(a)), "goal", 2)  # the same run and step again
    assert again == first + "-2"  # a new name: the first result is kept
    assert evaluation.result_dir(_cfg("--checkpoint", str(a), "--overwrite"), "goal", 2) == first
    for d in (first, second):
        assert json.loads(pathlib.Path(d, "eval.json").read_text())["mean_success"] == 0.5
    # a step directory <dir>/<step> names the same run
    a.mkdir(parents=True)
    (a / "policy.json").write_text("{}")
    assert evaluation.result_dir(_cfg("--checkpoint", str(a / "2")), "goal", 2) == first + "-2"


def test_out_and_output_dir_name_the_run(tmp_path):
    ckpt = str(tmp_path / "run-a" / "checkpoints")
    out = evaluation.result_dir(_cfg("--checkpoint", ckpt, "--out", str(tmp_path / "results")), "goal", 5)
    assert out == str(tmp_path / "results" / "run-a-goal-step-5")
    mine = evaluation.result_dir(_cfg("--checkpoint", ckpt, "--output-dir", str(tmp_path / "mine")), "goal", 5)
    assert mine == str(tmp_path / "mine" / "eval" / "run-a-goal-step-5")
    other = evaluation.result_dir(_cfg("--checkpoint", str(tmp_path / "imported" / "pi05")), "goal", 0)
    assert other == str(tmp_path / "imported" / "eval" / "pi05-goal-step-0")  # a directory not named checkpoints


def test_gifs_are_viewable_with_the_outcome_drawn_and_eval_md_shows_instructions(tmp_path):
    out = _write(str(tmp_path / "res"))
    md = pathlib.Path(out, "eval.md").read_text()
    assert "stack the red cube on the blue cube; stack the green cube on the red cube" in md
    assert "{target}" not in md
    gif = Image.open(os.path.join(out, "goal__stack.gif"))
    assert gif.size[1] >= 256 and gif.size[0] == 2 * gif.size[1] and gif.n_frames == 40
    gif.seek(39)
    last = np.asarray(gif.convert("RGB"))
    h = last.shape[0]
    assert np.abs(last[h // 2, 1].astype(int) - SUCCESS_RGB).max() < 40  # episode 0 succeeded: green frame
    assert np.abs(last[h // 2, -2].astype(int) - FAILURE_RGB).max() < 40  # episode 1 failed: red frame
    gif.seek(5)
    early = np.asarray(gif.convert("RGB"))
    assert np.abs(early[h // 2, 1].astype(int) - 70).max() < 10  # before its success: no border yet
    clip = outcome_clip(np.zeros((3, 1, 64, 64, 3), np.uint8))  # no outcome given: upscaled only
    assert clip.shape == (3, 256, 256, 3) and not clip.any()


def test_eval_flags_are_aliases_of_the_logging_section():
    cfg = _cfg("--out", "/tmp/x", "--overwrite")
    assert cfg.logging.eval_out == "/tmp/x" and cfg.logging.overwrite


@pytest.mark.slow  # two tiny SFT runs and two closed-loop evaluations through the CLI (MJX compiles: minutes)
def test_eval_command_keeps_both_runs_results_with_real_instructions_and_gifs(tmp_path):
    demos = write_dataset(str(tmp_path / "demos"))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user runs it
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")

    def cli(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "vlajax.train", *args, "--preset", "sft-tiny"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r.stdout

    small = ("--env.suite", "goal", "--env.episode-length", "8", "--env.num-envs", "2")
    outs = []
    for run in ("run-a", "run-b"):
        cli("sft", "--data.dataset-dir", demos, "--output-dir", run, "--sft.num-steps", "2", *small)
        last = json.loads(cli("eval", "--checkpoint", f"{run}/checkpoints", "--episodes-per-task", "1",
                              *small).splitlines()[-1])
        outs.append(last["out_dir"])
    assert outs == [str(tmp_path / r / "eval" / "goal-step-2") for r in ("run-a", "run-b")]  # beside each run
    for d in outs:
        result = json.loads(pathlib.Path(d, "eval.json").read_text())
        texts = [t for v in result["instructions"].values() for t in v]
        assert texts and not any("{" in t for t in texts), texts  # the instructions the episodes were given
        gifs = sorted(pathlib.Path(d).glob("*.gif"))
        assert len(gifs) == 4 and all(Image.open(g).size[1] >= 256 for g in gifs)
