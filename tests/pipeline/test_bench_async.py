"""`python -m vlajax.bench async` has a pulse: a tiny run writes one row per (regime, placement, mode)."""

import json

import pytest

from vlajax.bench import async_


@pytest.mark.entry
@pytest.mark.devices(8)
@pytest.mark.timeout(180)
def test_bench_async_writes_rows(tmp_path):
    out = tmp_path / "async.json"
    rc = async_.main(["--json", str(out), "--workload", "standin", "--regimes", "cpu_longtail,mjx",
                      "--placements", "colocated,disaggregated",
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
    assert set(data["meta"]["expected_batch_ms"]) == {"8 envs x 1 steps", "4 envs x 1 steps"}


@pytest.mark.devices(8)
@pytest.mark.timeout(180)
def test_streaming_modes_without_gradient_streaming_use_the_full_update():
    """A workload with several epochs/minibatches (grad_streaming=False): the streaming modes still
    hand micro-batches over as they arrive, but the trainer is built non-streaming (the same update)."""
    built = []

    class Spy(async_.StandInWorkload):
        def trainer(self, device, streaming, require_batches=1):
            built.append(streaming)
            return super().trainer(device, streaming, require_batches)

    w = Spy(async_.StandIn(envs=8, horizon=2, hidden=16, epochs=1))
    lat = async_.LatencyModel(median_s=0.001, reset_prob=0.5, reset_s=0.002)
    for grad_streaming in (True, False):
        row = async_.run_one(w, "cpu_longtail", "colocated", "+streaming", slots=2, updates=2, latency=lat,
                             ratio="1:1", max_wait_ms=0.0, grad_streaming=grad_streaming)
        assert row["grad_streaming"] is grad_streaming and row["max_wait_ms"] == 0.0 and row["env_steps_per_s"] > 0
    sync = async_.run_one(w, "cpu_longtail", "colocated", "sync", slots=2, updates=2, latency=lat, ratio="1:1",
                          grad_streaming=False)
    assert sync["grad_streaming"] is None
    assert built == [True, False, False]


@pytest.mark.slow
@pytest.mark.entry
@pytest.mark.devices(8)
@pytest.mark.timeout(1500)
def test_bench_async_rl_workload(tmp_path):
    """The real workload (MLP PPO on tabletop envs; the CPU-bound regime steps them in C MuJoCo):
    sync and the fully async mode produce rows."""
    out = tmp_path / "async_rl.json"
    rc = async_.main(["--json", str(out), "--workload", "rl", "--regimes", "cpu_longtail", "--placements", "colocated",
                      "--modes", "sync,+partial_rollout", "--updates", "2", "--envs", "4", "--slots", "2",
                      "--horizon", "2", "--width", "16", "--median-ms", "1", "--update-epochs", "2",
                      "--minibatches", "2", "--reset-prob", "0.1", "--reset-steps", "5"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["meta"]["workload"]["name"] == "rl" and data["meta"]["workload"]["envs"] == 4
    assert data["meta"]["workload"]["update_epochs"] == 2 and not data["meta"]["workload"]["grad_streaming"]
    assert data["meta"]["latency_model"]["reset_s"] == pytest.approx(0.005)
    sync, part = data["rows"]
    assert sync["staleness_max"] == 0 and sync["env_steps_per_s"] > 0 and part["env_steps_per_s"] > 0
    assert part["slots"] == 2 and part["staleness_max"] <= 1
    assert sync["physics"] == part["physics"] == "c"  # the CPU-bound regime steps C MuJoCo
    with pytest.raises(SystemExit):  # one timed update is refused (its samples may precede the window)
        async_.main(["--workload", "standin", "--updates", "1"])
