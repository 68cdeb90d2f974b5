"""`bench soak --workload train_async`: the slope verdict (fast, on synthetic samples) and, `slow`, a short soak
of the real `rl --pipeline.enabled` loop with checkpoints, TensorBoard, evaluations and progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from research.bench.soak import slope, slope_verdict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _samples(mib_per_hour: float, files_growth: int = 0, minutes: int = 60, noise: float = 2.0) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"minute": float(m), "rss_mb": 1600.0 + mib_per_hour * m / 60.0 + noise * rng.standard_normal(),
             "updates": 10 * m, "open_files": 40 + (files_growth * m // minutes), "threads": 30}
            for m in range(minutes + 1)]


def test_slope_recovers_a_known_line_with_its_interval():
    s = slope([0, 30, 60, 90, 120], [100.0, 101.0, 102.0, 103.0, 104.0])
    assert s["per_hour"] == pytest.approx(2.0) and s["lo"] == pytest.approx(2.0) and s["hi"] == pytest.approx(2.0)


def test_slope_verdict_passes_a_flat_run_and_fails_a_leak_or_growing_files():
    flat = slope_verdict(_samples(0.0), settle_min=5, max_per_hour=5.0)
    assert flat["ok"] and flat["rss_mib_per_hour"]["lo"] < 0 < flat["rss_mib_per_hour"]["hi"] < 5
    leak = slope_verdict(_samples(20.0), settle_min=5, max_per_hour=5.0)  # 0.48 GB/day
    assert not leak["ok"] and leak["rss_mib_per_hour"]["lo"] > 5
    files = slope_verdict(_samples(0.0, files_growth=30), settle_min=5, max_per_hour=5.0)
    assert not files["ok"] and files["counts"]["open_files"]["max"] > files["counts"]["open_files"]["settle"] + 2
    assert not slope_verdict(_samples(0.0)[:4], settle_min=5, max_per_hour=5.0)["ok"]  # too few samples


@pytest.mark.slow  # ~1.6 min (a warm compile cache; ~4 min cold): the MJX env's compile, then the real loop
def test_a_short_train_async_soak_runs_the_real_loop_and_stops_cleanly(tmp_path):
    out, js = tmp_path / "run", tmp_path / "soak.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, "-m", "research.bench", "soak", "--workload", "train_async", "--minutes", "1.5",
                        "--sample-s", "10", "--settle-min", "0.5", "--checkpoint-every", "3", "--eval-every", "5",
                        "--out", str(out), "--json", str(js)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text[-4000:]
    res = json.loads(js.read_text())
    assert len(res["samples"]) >= 8 and res["samples"][-1]["updates"] > 0
    assert {"rss_mib_per_hour", "counts"} <= set(res["verdict"])
    assert os.listdir(out / "checkpoints") and os.listdir(out / "tb")  # checkpoints, TensorBoard
    assert "eval mean success" in text and "[rl async" in text  # evaluations, progress
    assert "rl: SIGTERM during" in text  # ended through the run's own stop path
