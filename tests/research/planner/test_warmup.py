"""`plan validate --warmup K` (issue 44.5, third): the measured and the simulated window both start at the
end of update K instead of the first, from the bench rows' stored update times."""

import dataclasses
import json

import pytest

from research.planner import validate as val
from research.planner.costs import Costs
from research.planner.sim import Pipeline, simulate
from research.planner.sim_metrics import run_metrics

META = {"workload": {"micro_batches": 4, "env_steps_per_update": 100}}


def _sync_run(repeat: int, durations: list[float]) -> dict:
    """A sync run whose iterations (100 env steps each) take `durations` back to back."""
    t, times = 0.0, []
    for d in durations:
        times.append([t, t + d, 100.0])
        t += d
    ends = [x[1] for x in times]
    return {"repeat": repeat, "env_steps_per_s": 100 * (len(ends) - 1) / (ends[-1] - ends[0]),
            "loop": {"iteration_times": times}}


def _async_run(repeat: int, ends: list[float]) -> dict:
    return {"repeat": repeat, "env_steps_per_s": 100 * (len(ends) - 1) / (ends[-1] - ends[0]),
            "loop": {"update_times": ends}}


def _row(mode: str, runs: list[dict]) -> dict:
    vals = sorted(r["env_steps_per_s"] for r in runs)
    return {"regime": "mjx", "mode": mode, "placement": "colocated", "runs": runs, "env_steps_per_s": vals[1],
            "env_steps_per_s_all": [r["env_steps_per_s"] for r in runs], "env_steps_per_s_range": [vals[0], vals[-1]],
            "speedup_vs_sync": 1.0}


def _rows():
    # sync: a compiling iteration, two slow ones (the warm-up), then 1 s each; async: 0.5 s per update after 2
    sync = _row("sync", [_sync_run(k, [5.0, 3.0, 2.0] + [1.0] * 8) for k in range(3)])
    ends = [5.0, 7.0, 8.0] + [8.0 + 0.5 * i for i in range(1, 9)]
    asyn = _row("train_async", [_async_run(k, ends) for k in range(3)])
    return [sync, asyn]


def test_warmup_0_is_the_bench_window_and_k_drops_the_first_k_updates():
    rows = _rows()
    for row in rows:
        for run in row["runs"]:  # the stored times reproduce the bench's own figure
            assert val.steady_rate(META, run, 0) == pytest.approx(run["env_steps_per_s"])
        assert val.measured(META, row, rows, 0)["value"] == row["env_steps_per_s"]
    sync, asyn = rows
    assert val.steady_rate(META, sync["runs"][0], 0) == pytest.approx(1000 / 13)
    assert val.steady_rate(META, sync["runs"][0], 2) == pytest.approx(100.0)  # 8 iterations of 1 s
    m = val.measured(META, asyn, rows, 2)
    assert m["value"] == pytest.approx(200.0)  # 8 updates of 0.5 s
    assert m["speedup_vs_sync"] == pytest.approx(2.0)  # against the same repeat's sync run, same window
    assert m["all"] == pytest.approx([200.0] * 3)


def test_warmup_refuses_what_it_cannot_measure(tmp_path):
    run = _sync_run(0, [1.0] * 4)
    with pytest.raises(ValueError, match="leaves no update"):
        val.steady_rate(META, run, 3)
    with pytest.raises(ValueError, match="no update times"):
        val.steady_rate(META, {"repeat": 0, "loop": {}}, 1)
    with pytest.raises(ValueError, match="production"):  # the older bench's rows
        val.measured({"workload": {}}, _rows()[0], _rows(), 1)
    with pytest.raises(ValueError, match="warmup"):
        Pipeline(envs=4, horizon=2, steps_per_decision=1, updates=3, warmup=3)
    (tmp_path / "profile.json").write_text("{}")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"meta": META, "rows": _rows()}))
    with pytest.raises(SystemExit):
        val.main(["--profile-from", str(tmp_path), "--runs", str(bench), "--warmup", "10"])


def test_the_simulated_window_starts_after_the_warmup_updates():
    """The simulated run is measured over the same updates: from the end of update K."""
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="sync", updates=4)  # 8 env steps per update
    ends = [0.0, 5.0, 6.0, 7.0, 8.0]  # a slow first timed update
    m = lambda q: run_metrics(q, 1, ends, [], {}, [], [])
    assert m(p)["trained_env_steps_per_s"] == pytest.approx(4 * 8 / 8.0)
    assert m(dataclasses.replace(p, warmup=1))["trained_env_steps_per_s"] == pytest.approx(3 * 8 / 3.0)
    # a steady simulated pipeline gives the same rate over either window
    c = Costs(infer_s=((4, 0.004),), collect_s=((4, 0.02),), train_update_s=((8, 0.01),), cores=2.0)
    q = dataclasses.replace(p, updates=10)
    full, late = simulate(q, c), simulate(dataclasses.replace(q, warmup=4), c)
    assert late["trained_env_steps_per_s"] == pytest.approx(full["trained_env_steps_per_s"])


def test_profiles_of_one_workload_pool_their_calls(tmp_path):
    """Several --profile-from directories: each quantity's samples together; one directory as before;
    another workload refused."""
    from research.planner.profile import pooled

    wl = {"envs": 16, "slots": 4, "horizon": 8}
    for name, xs in (("a", [1.0, 2.0]), ("b", [3.0])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "profile.json").write_text(json.dumps(
            {"workload": wl, "machine": {"cores": 2.0}, "raw": {"jax/step": xs, "only_" + name: xs}}))
    one = pooled(str(tmp_path / "a"))
    assert one["raw"]["jax/step"] == [1.0, 2.0] and "pooled_from" not in one
    both = pooled([str(tmp_path / "a"), str(tmp_path / "b")])
    assert both["raw"]["jax/step"] == [1.0, 2.0, 3.0]
    assert both["raw"]["only_a"] == [1.0, 2.0] and both["raw"]["only_b"] == [3.0]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "profile.json").write_text(json.dumps(
        {"workload": wl | {"envs": 32}, "machine": {"cores": 2.0}, "raw": {}}))
    with pytest.raises(ValueError, match="another workload"):
        pooled([str(tmp_path / "a"), str(tmp_path / "c")])
