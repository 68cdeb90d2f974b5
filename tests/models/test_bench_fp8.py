"""`python -m vlajax.bench fp8` end to end on the tiny preset."""

import json

import pytest

from vlajax.bench import fp8 as bench_fp8


@pytest.mark.slow
@pytest.mark.entry
def test_bench_fp8_writes_json(tmp_path):
    path = tmp_path / "fp8.json"
    assert bench_fp8.main(["--preset", "tiny", "--fit-steps", "2", "--batch", "2", "--json", str(path)]) == 0
    r = json.loads(path.read_text())
    assert r["bytes_after"]["vision"] == r["bytes_before"]["vision"]
    assert r["fraction_saved_language"] >= 0.35
    assert r["actions"]["max_abs_error"] > 0 and r["actions"]["mean_abs_error"] <= r["actions"]["max_abs_error"]
    assert r["quantization"]["block"] == [128, 128]


@pytest.mark.slow
@pytest.mark.entry
def test_bench_fp8_on_a_checkpoint_measures_success(tmp_path):
    """demos -> 4 SFT steps (sft-tiny) -> the bench quantizes the checkpoint and evaluates both weight sets."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, like a user's run
    common = ["--preset", "sft-tiny", "--output-dir", str(tmp_path / "run"), "--logging.progress", "plain"]
    for args in (["demos", "--suite", "goal", "--episodes-per-task", "2", "--out", str(tmp_path / "demos")],
                 ["sft", "--data.dataset-dir", str(tmp_path / "demos")]):
        r = subprocess.run([sys.executable, "-m", "vlajax.train", *args, *common], env=env, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    path = tmp_path / "fp8.json"
    r = subprocess.run([sys.executable, "-m", "vlajax.bench", "fp8", "--checkpoint", str(tmp_path / "run/checkpoints"),
                        "--episodes-per-task", "1", "--batch", "2", "--json", str(path)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(path.read_text())
    assert res["checkpoint"]["step"] == 4 and res["fraction_saved_language"] >= 0.35
    s = res["success"]
    assert s["full_precision"]["episodes"] == s["fp8_ptq"]["episodes"] == 4
    assert s["change"] == s["fp8_ptq"]["mean_success"] - s["full_precision"]["mean_success"]
