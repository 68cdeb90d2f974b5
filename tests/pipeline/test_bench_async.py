"""`python -m vlajax.bench async` has a pulse: a tiny run writes one row per (regime, placement, mode)."""

import json

import pytest

from vlajax.bench import async_


@pytest.mark.entry
@pytest.mark.devices(8)
@pytest.mark.timeout(180)
def test_bench_async_writes_rows(tmp_path):
    out = tmp_path / "async.json"
    rc = async_.main(["--json", str(out), "--regimes", "cpu_longtail,mjx", "--placements", "colocated,disaggregated",
                      "--modes", "sync,+partial_rollout", "--updates", "3", "--envs", "8", "--slots", "2",
                      "--horizon", "2", "--hidden", "16", "--epochs", "1", "--median-ms", "1"])
    assert rc == 0
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["regime"], r["placement"], r["mode"]) for r in rows] == [
        (g, p, m) for g in ("cpu_longtail", "mjx") for p in ("colocated", "disaggregated 1:1")
        for m in ("sync", "+partial_rollout")]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and 0 <= r["trainer_idle_ratio"] <= 1 and 0 <= r["rollouter_idle_ratio"] <= 1
        assert r["ratio_to_sync_colocated"] > 0
    assert all(r["staleness_max"] == 0 for r in rows if r["mode"] == "sync")
    assert data["meta"]["workload"]["name"] == "standin"
