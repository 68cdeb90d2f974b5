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
