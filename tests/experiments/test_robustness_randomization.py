"""experiments/robustness_randomization.py: the per-arm statistics (mean and 95% t-interval over
seeds) and its markdown from known numbers; slow: the `--smoke` run end to end (demos with and
without `--env.randomize`, SFT, `eval --robustness camera,lighting`) through its documented command."""

import importlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("experiments.robustness_randomization")


def _result(base, cam):
    return {"mean": {"none": {"0": base}, "camera": {"3": cam}, "lighting": {"3": base}},
            "episodes_per_task": 2, "tasks": ["goal/stack"]}


def test_summary_statistics():
    m = _module()
    runs = {"plain": {0: _result(0.5, 0.1), 1: _result(0.7, 0.3), 2: _result(0.6, 0.2)},
            "randomized": {0: _result(0.5, 0.5), 1: _result(0.5, 0.5), 2: _result(0.5, 0.5)}}
    s = m.summarize(runs)
    row = {(r["arm"], r["axis"], r["level"]): r for r in s["rows"]}
    cam = row["plain", "camera", 3]
    half = 4.302652729911275 * np.std([0.1, 0.3, 0.2], ddof=1) / np.sqrt(3)  # t(0.975, df=2)
    assert cam["mean"] == pytest.approx(0.2) and cam["hi"] - cam["mean"] == pytest.approx(half)
    assert row["randomized", "camera", 3]["lo"] == pytest.approx(0.5)  # no spread, no width
    md = m.table_markdown(s)
    assert "| camera | 3 | 20.0% [" in md and "| +30.0 |" in md and s["seeds"] == [0, 1, 2]


@pytest.mark.slow  # 2 arms x (demos + SFT + 7-row robustness eval): several minutes on CPU
def test_smoke_run(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    out = tmp_path / "rr"
    p = subprocess.run([sys.executable, "experiments/robustness_randomization.py", "--smoke", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert {(r["arm"], r["axis"], r["level"]) for r in s["rows"]} == {
        (arm, ax, lv) for arm in ("plain", "randomized") for ax, lv in
        [("none", 0), ("camera", 1), ("camera", 2), ("camera", 3), ("lighting", 1), ("lighting", 2), ("lighting", 3)]}
    assert all(len(r["per_seed"]) == 1 for r in s["rows"])
    info = json.loads((out / "randomized-seed0" / "demos" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2
    assert "| camera | 3 |" in (out / "summary.md").read_text()
