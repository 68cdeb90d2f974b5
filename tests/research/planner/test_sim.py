"""The planner's discrete-event model: exact on deterministic cases, pacing bounds, sharing, costs I/O."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest
import simpy

from research.planner import presets, validate
from research.planner.costs import Costs, SimLatency, interp
from research.planner.sim import MODES, Pipeline, _Shared, simulate

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


@pytest.mark.parametrize("name", ["pi05-libero", "pi05-libero-comm", "pi05-libero-nocomm"])
def test_pi05_libero_preset_reproduces_its_calibration_baselines(name):
    """Each stored calibration (with and without the communication model) gives the two 8-GPU
    synchronous figures it was fitted to (seed 000 Table 3) within 3%."""
    p = presets.get(name)
    assert (p.costs.comm is not None) == (name != "pi05-libero-nocomm")  # pi05-libero: with communication
    for placement, target in presets._CALIBRATION.items():
        got = simulate(p.pipeline(8, "sync", placement), p.costs)["env_steps_per_s"]
        assert got == pytest.approx(target, rel=0.03), placement


def test_cli_refuses_bad_flags_before_simulating():
    r = subprocess.run([sys.executable, "-m", "research.planner", "--preset", "pi05-libero", "--ratios", "3-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error:" in r.stderr and "--ratios" in r.stderr
    r = subprocess.run([sys.executable, "-m", "research.planner", "--preset", "pi05-libero", "--modes", "sync", "fast"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error:" in r.stderr and "--modes" in r.stderr and "fast" in r.stderr
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--profile-from", "/nonexistent"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "profile.json not found" in r.stderr


# -- the production loops on a CPU host (fused collect, host simulator calls, a multi-core host) --


def test_multicore_host_shares_its_cores_max_min_fairly():
    """Two one-core jobs on two cores run at solo speed; a two-core job beside a one-core job gets
    the core the other leaves (half its solo speed) until that one ends."""
    env = simpy.Environment()
    dev = _Shared(env, capacity=2.0)
    done = {}

    def job(name, work, cores):
        yield dev.run(work, cores)
        done[name] = env.now

    env.process(job("a", 1.0, 1.0))
    env.process(job("b", 1.0, 1.0))
    env.run()
    assert done == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    env = simpy.Environment()
    dev = _Shared(env, capacity=2.0)
    env.process(job("wide", 1.0, 2.0))
    env.process(job("narrow", 0.5, 1.0))
    env.run()  # wide: 0.5 of its work in the first 1.0 s (1 of 2 cores), then alone: 0.5 s more
    assert done["narrow"] == pytest.approx(0.5) and done["wide"] == pytest.approx(1.0 + 0.5 - 0.25)


def prod_costs(**kw):
    base = dict(infer_s=((4, 0.01),), train_update_s=((8, 0.02),), collect_s=((4, 0.08),), host_sim_s=((4, 0.005),),
                host_calls_per_decision=2.0, shared_compute=True, env_on_device=True, cores=1.0)
    return Costs(**base | kw)


def test_sync_through_the_fused_collect_matches_the_hand_computed_iteration():
    """rl.loop.train: per decision the collect's compute, then its host calls, each lasting
    max(real, the farm's draw); then the update. No publication, no preparation."""
    p = Pipeline(envs=4, horizon=2, steps_per_decision=2, mode="sync", updates=3)
    out = simulate(p, prod_costs(sim=SimLatency(median_s=0.01), prep_s_per_sample=1.0, sync_s=5.0))
    per_update = 2 * (0.04 + 2 * 0.01) + 0.02
    assert out["trained_env_steps_per_s"] == pytest.approx(4 * 2 * 2 / per_update, rel=1e-9)
    no_farm = simulate(p, prod_costs())["trained_env_steps_per_s"]
    assert no_farm == pytest.approx(16 / (2 * (0.04 + 2 * 0.005) + 0.02), rel=1e-9)


def test_train_async_through_the_collect_overlaps_on_a_two_core_host():
    """train_async (one rollouter lane calling collect, one trainer): on one core the update
    takes time from rollout; on two cores (one-core jobs) it hides entirely behind it."""
    p = Pipeline(envs=4, horizon=2, steps_per_decision=2, mode="train_async", updates=8)
    c = prod_costs(host_sim_s=(), host_calls_per_decision=0.0, train_update_s=((8, 0.05),))
    one, two = simulate(p, c), simulate(p, dataclasses.replace(c, cores=2.0))
    assert two["trained_env_steps_per_s"] == pytest.approx(16 / 0.08, rel=1e-6)
    assert one["trained_env_steps_per_s"] == pytest.approx(16 / 0.13, rel=1e-6)
    assert two["staleness_max"] == 1


def test_costs_from_a_profile_are_the_statistic_of_its_calls():
    """profile's raw per-call seconds -> Costs: host simulator time taken out of the collect and
    divided per call; the slot path's extra over the update is its preparation; cores from CPU/wall."""
    from research.planner.profile import costs_from_raw

    raw = {"train/update": [0.010, 0.012, 0.011], "train/slots_update": [0.02, 0.02, 0.02],
           "train/prepare": [0.002] * 3, "train/stream_item": [0.003] * 3, "train/stream_finish": [0.001] * 3,
           "sync/publish": [0.0005] * 3, "c/collect": [0.10, 0.11, 0.12], "c/collect_host": [0.032] * 3,
           "c/collect_host_calls": [16.0] * 3, "c/infer": [0.004] * 3, "c/step": [0.006] * 3,
           "c/step_host": [0.001] * 3, "c/step_host_calls": [2.0] * 3}
    for k in list(raw):
        if not k.endswith("_calls") and not k.endswith("_host"):
            raw[k + "@cpu"] = [v * (1.5 if k == "c/infer" else 1.0) for v in raw[k]]
    raw["c/collect@cpu"] = [0.032 + 2 * (v - 0.032) for v in raw["c/collect"]]  # two cores outside the host calls
    c = costs_from_raw(raw, {"envs": 16, "slots": 4, "horizon": 8}, cores=2.0)["c"]
    assert c.collect_seconds(16) == pytest.approx(0.11 - 0.032)
    assert c.host_sim_seconds(16) == pytest.approx(0.002) and c.host_sim_seconds(4) == pytest.approx(0.0005)
    assert c.host_calls_per_decision == 2.0 and c.train_seconds(128) == pytest.approx(0.011)
    assert c.prep_s_per_sample == pytest.approx(0.009 / 128)
    assert dict(c.parallelism)["collect"] == pytest.approx(2.0) and dict(c.parallelism)["infer"] == pytest.approx(1.5)
    assert costs_from_raw(raw, {"envs": 16, "slots": 4, "horizon": 8}, 2.0, "min")["c"].train_seconds(128) == 0.010


def test_capacity_probes_rescale_cores_to_what_the_process_is_offered():
    """On a shared host one busy thread got 0.5 core and four got 0.8: the host offers 1.6 threads'
    worth, a single-threaded call (CPU/wall 0.5) keeps 1 busy and a call that got 0.9 core 1.8 (clipped
    to the capacity); host simulator seconds leave the collect's CPU at one thread's rate."""
    from research.planner.profile import capacity, costs_from_raw

    raw = {"train/update": [0.01] * 3, "train/slots_update": [0.02] * 3, "train/prepare": [0.002] * 3,
           "train/stream_item": [0.003] * 3, "train/stream_finish": [0.001] * 3, "sync/publish": [0.0005] * 3,
           "c/collect": [0.10] * 3, "c/collect_host": [0.04] * 3, "c/collect_host_calls": [16.0] * 3,
           "c/infer": [0.004] * 3, "c/step": [0.006] * 3, "c/step_host": [0.001] * 3, "c/step_host_calls": [2.0] * 3,
           "probe/one_thread": [0.5, 0.45, 0.55], "probe/threads": [0.8, 0.7, 0.9]}
    for k in [k for k in raw if not k.endswith(("_calls", "_host")) and not k.startswith("probe")]:
        raw[k + "@cpu"] = [v * (0.9 if k == "c/infer" else 0.5) for v in raw[k]]
    raw["c/collect@cpu"] = [0.04 * 0.5 + 0.06 * 0.5] * 3
    assert capacity(raw, 2.0) == (pytest.approx(1.6), 0.5)
    c = costs_from_raw(raw, {"envs": 16, "slots": 4, "horizon": 8}, cores=2.0)["c"]
    par = dict(c.parallelism)
    assert c.cores == pytest.approx(1.6) and par["train"] == pytest.approx(1.0) and par["collect"] == pytest.approx(1.0)
    assert par["infer"] == pytest.approx(1.6) and par["host_sim"] == 1.0
    assert capacity({k: v for k, v in raw.items() if not k.startswith("probe")}, 2.0) == (2.0, 1.0)  # older profiles


@pytest.mark.slow
def test_profile_measures_the_production_workload_end_to_end(tmp_path):
    """A tiny production workload through `plan profile` (MJX only) and its costs back through `load`."""
    from research.planner import profile

    r = subprocess.run([sys.executable, "-m", "research.planner", "profile", "--out", str(tmp_path), "--envs", "4",
                        "--slots", "2", "--horizon", "2", "--width", "16", "--physics", "jax", "--repeats", "1",
                        "--concurrency-repeats", "3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    c = profile.load(tmp_path, "jax")
    assert c.collect_seconds(4) > 0 and c.train_seconds(8) > 0 and c.infer_seconds(4) > 0 and c.cores >= 1
    assert c.host_calls_per_decision == 0 and c.stream_item_s > 0
    assert 0 < dict(c.concurrency)["step"] <= 2  # the slot steps from 2 threads vs serially
    raw = json.loads((tmp_path / "profile.json").read_text())["raw"]
    assert len(raw["jax/step"]) == 1 * 2 * 2 and len(raw["jax/steps_serial"]) == len(raw["jax/steps_threads"]) == 3
    # each timed step's dispatch (what it took to return to Python), never longer than the step it is part of
    assert len(raw["jax/step_dispatch"]) == len(raw["jax/step"])
    assert all(0 < d <= s for d, s in zip(raw["jax/step_dispatch"], raw["jax/step"]))
    assert 0 < c.dispatch_seconds("step") <= c.env_compute_seconds(2)


def test_profile_refuses_a_negative_concurrency_repeats(tmp_path):
    """One `error:` line, before anything is built or compiled."""
    r = subprocess.run([sys.executable, "-m", "research.planner", "profile", "--out", str(tmp_path),
                        "--concurrency-repeats", "-1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --concurrency-repeats")
    assert not (tmp_path / "profile.json").exists()


def test_validate_refuses_a_bad_cores_override_and_a_profile_of_another_workload(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[3]
    profile_dir = root / "results/bench/plan_profile_prod"
    rows = str(root / "results/bench/async_production_planval.json")
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--profile-from", str(profile_dir),
                        "--runs", rows, "--override-cores", "cpu-sim"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--override-cores" in r.stderr
    prof = json.loads((profile_dir / "profile.json").read_text())
    prof["workload"]["width"] = 1024
    (tmp_path / "profile.json").write_text(json.dumps(prof))
    with pytest.raises(ValueError, match="workload differs"):
        validate.validate([rows], str(tmp_path), seeds=1)
