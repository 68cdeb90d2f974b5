"""The planner's discrete-event model: exact on deterministic cases, pacing bounds, sharing, costs I/O."""

import json
import subprocess
import sys

import pytest
import simpy

from vlajax.plan import presets, validate
from vlajax.plan.costs import Costs, SimLatency, interp
from vlajax.plan.sim import MODES, Pipeline, _Shared, simulate

FIXED = SimLatency(median_s=0.05)  # every env step takes exactly 50 ms (sigma 0, no tail)


def costs(**kw):
    base = dict(infer_s=((4, 0.01),), train_update_s=((8, 0.2),), sim=FIXED, sync_s=0.003)
    return Costs(**base | kw)


def test_sync_matches_the_hand_computed_iteration():
    """sync: publication, then horizon x (inference + step), then the update -- nothing overlaps."""
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="sync", updates=3)
    out = simulate(p, costs())
    per_update = 0.003 + 2 * (0.01 + 0.05) + 0.2
    assert out["env_steps_per_s"] == pytest.approx(4 * 2 / per_update, rel=1e-9)
    assert out["trainer_idle_ratio"] == pytest.approx((per_update - 0.2) / per_update, rel=1e-9)
    assert out["staleness_max"] == 0


def test_train_async_hides_the_update_behind_rollout():
    """Rollout-bound (segment 0.12 s > update 0.05 s): train async runs at the rollout's rate, one
    version stale, and the trainer idles the difference."""
    c = costs(train_update_s=((8, 0.05),), sync_s=0.0)
    out = simulate(Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="train_async", placement="disaggregated",
                            devices=2, updates=6), c)
    seg = 2 * (0.01 + 0.05)
    assert out["env_steps_per_s"] == pytest.approx(8 / seg, rel=1e-6)
    assert out["staleness_max"] == 1 and out["rollouter_idle_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert out["trainer_idle_ratio"] == pytest.approx(1 - 0.05 / seg, rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_staleness_never_exceeds_the_threshold(mode):
    c = costs(sim=SimLatency(median_s=0.02, sigma=0.5, tail_prob=0.1, tail_scale=6.0))
    out = simulate(Pipeline(envs=8, horizon=3, steps_per_decision=2, mode=mode, slots=4, updates=6), c, seed=1)
    assert out["staleness_max"] <= (0 if mode in ("sync", "rollout_async") else 1)
    assert out["env_steps_per_s"] > 0


def test_processor_sharing_splits_a_device_between_jobs():
    env = simpy.Environment()
    dev = _Shared(env)
    done = {}

    def job(name, start, work):
        yield env.timeout(start)
        yield dev.run(work)
        done[name] = env.now

    env.process(job("a", 0.0, 1.0))
    env.process(job("b", 0.0, 1.0))
    env.process(job("c", 3.0, 0.5))
    env.run()
    assert done["a"] == pytest.approx(2.0) and done["b"] == pytest.approx(2.0) and done["c"] == pytest.approx(3.5)


def test_colocated_training_slows_rollout_that_disaggregation_frees():
    """Heavy training on the rollout's device (colocated, one device) takes device time from
    inference; on a device of its own (disaggregated 1:1 over two) it does not."""
    c = costs(infer_s=((4, 0.05),), train_update_s=((8, 0.4),), sim=SimLatency(median_s=0.01))
    co = simulate(Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="+partial_rollout", slots=2, devices=1,
                           updates=6), c)
    dis = simulate(Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="+partial_rollout", slots=2,
                            placement="disaggregated", devices=2, updates=6), c)
    assert dis["env_steps_per_s"] > co["env_steps_per_s"]


def test_costs_round_trip_and_interpolation():
    c = costs(env_compute_s=((4, 0.002), (16, 0.005)), shared_compute=True, infer_padded=True, source="x")
    assert Costs.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert interp(((4, 1.0), (8, 2.0)), 6) == pytest.approx(1.5)
    assert interp(((4, 1.0), (8, 2.0)), 12) == pytest.approx(3.0)  # extrapolated from the last two points
    assert interp(((10, 1.0),), 5) == pytest.approx(0.5)  # one point: proportional
    with pytest.raises(ValueError, match="unknown cost fields"):
        Costs.from_json({**c.to_json(), "bogus": 1})


def test_pipeline_refuses_what_does_not_split():
    with pytest.raises(ValueError, match="do not split"):
        Pipeline(envs=6, horizon=2, steps_per_decision=1, mode="rollout_async", slots=4)
    with pytest.raises(ValueError, match="mode"):
        Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="fast")


def test_bench_rows_map_to_their_pipelines():
    meta = {"workload": {"envs": 16, "horizon": 8, "action_horizon": 2}, "argv": ["--slots", "4"]}
    p = validate.row_pipeline(meta, {"placement": "disaggregated 1:1", "mode": "+partial_rollout",
                                     "updates_timed": 8, "max_wait_ms": 2.0})
    assert (p.devices, p.rollout_devices, p.train_devices, p.num_slots, p.partial) == (2, 1, (1,), 4, True)
    p = validate.row_pipeline(meta, {"placement": "colocated", "mode": "train_async", "updates_timed": 8})
    assert (p.devices, p.num_slots, p.staleness) == (1, 1, 1.0)


def test_pi05_libero_preset_reproduces_its_calibration_baselines():
    """The stored calibration gives the two 8-GPU synchronous figures it was fitted to (seed 000 Table 3)."""
    p = presets.get("pi05-libero")
    for placement, target in presets._CALIBRATION.items():
        got = simulate(p.pipeline(8, "sync", placement), p.costs)["env_steps_per_s"]
        assert got == pytest.approx(target, rel=0.03), placement


def test_cli_refuses_bad_flags_before_simulating():
    r = subprocess.run([sys.executable, "-m", "vlajax.plan", "--preset", "pi05-libero", "--ratios", "3-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error:" in r.stderr and "--ratios" in r.stderr
    r = subprocess.run([sys.executable, "-m", "vlajax.plan", "validate", "--profile-from", "/nonexistent"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "profile.json not found" in r.stderr
