"""The planner's concurrency caps: concurrent calls of a group advance together at most at a measured rate."""

import dataclasses
import json
import pathlib

import pytest
import simpy

from research.planner.costs import Costs
from research.planner.profile import _concurrency, costs_from_raw, load
from research.planner.sim import Pipeline, _Shared, simulate

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _finish_times(capacity, caps, jobs, fifo=False, group_cores=False):
    """jobs: name -> (work, cores, group); -> name -> finish time."""
    env = simpy.Environment()
    dev = _Shared(env, capacity, caps, fifo=fifo, group_cores=group_cores)
    done = {}

    def job(name, work, cores, group):
        yield dev.run(work, cores, group)
        done[name] = env.now

    for name, spec in jobs.items():
        env.process(job(name, *spec))
    env.run()
    return done


def test_a_capped_group_serializes_and_leaves_its_cores_to_the_others():
    """Two one-core jobs of a group capped at 1 on a two-core host advance at 1/2 each (1 solo
    speed together); the third job gets the core they leave and ends at 1.0, then the two go on
    at 1/2 each: done at 2.0. Without the cap all three share 2 cores: 2/3 each, done at 1.5."""
    jobs = {"a": (1.0, 1.0, "step"), "b": (1.0, 1.0, "step"), "c": (1.0, 1.0, None)}
    assert _finish_times(2.0, {"step": 1.0}, jobs) == {"a": pytest.approx(2.0), "b": pytest.approx(2.0),
                                                       "c": pytest.approx(1.0)}
    assert _finish_times(2.0, None, jobs) == {k: pytest.approx(1.5) for k in jobs}
    # a cap above what the cores give changes nothing
    assert _finish_times(2.0, {"step": 3.0}, jobs) == {k: pytest.approx(1.5) for k in jobs}


def test_one_job_of_a_group_is_not_capped_and_the_group_shares_its_cap():
    """A lone job of a capped group runs at its solo speed; two share the cap, and when one ends
    the other, alone, runs at its solo speed again."""
    assert _finish_times(2.0, {"step": 0.5}, {"a": (1.0, 1.0, "step")}) == {"a": pytest.approx(1.0)}
    # capacity 1.5, cap 1.2: the cores give each of two one-core jobs 0.75 (sum 1.5 > 1.2): 0.6 each
    done = _finish_times(1.5, {"step": 1.2}, {"a": (0.6, 1.0, "step"), "b": (1.2, 1.0, "step")})
    assert done["a"] == pytest.approx(1.0) and done["b"] == pytest.approx(1.0 + 0.6 / 1.0)


def slot_costs(**kw):
    base = dict(infer_s=((4, 1e-4),), train_update_s=((4, 1e-4),), env_compute_s=((1, 0.01),), env_on_device=True,
                shared_compute=True, cores=4.0)
    return Costs(**base | kw)


def test_capped_slot_steps_run_as_if_one_after_the_other():
    """rollout_async, 4 slots of 1 env each, 10 ms steps on a 4-core host: the steps overlap fully
    without a cap; capped at 1 solo-speed step, a round takes the four steps' serial sum -- what one
    core gives them without a cap."""
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="rollout_async", slots=4, updates=6)
    free = simulate(p, slot_costs())["env_steps_per_s"]
    capped = simulate(p, slot_costs(concurrency=(("step", 1.0),)))["env_steps_per_s"]
    one_core = simulate(p, slot_costs(cores=1.0))["env_steps_per_s"]
    assert free / capped == pytest.approx(4.0, rel=0.05)
    assert capped == pytest.approx(one_core, rel=0.02)
    # sync steps one call of all envs at a time: a cap on concurrent steps does not touch it
    s = dataclasses.replace(p, mode="sync")
    assert simulate(s, slot_costs(concurrency=(("step", 1.0),))) == simulate(s, slot_costs())


def _raw(serial, threads):
    raw = {"train/update": [0.01] * 3, "train/slots_update": [0.02] * 3, "train/prepare": [0.002] * 3,
           "train/stream_item": [0.003] * 3, "train/stream_finish": [0.001] * 3, "sync/publish": [0.0005] * 3,
           "jax/collect": [0.10] * 3, "jax/infer": [0.004] * 3, "jax/step": [0.006] * 3}
    for k in list(raw):
        raw[k + "@cpu"] = raw[k]
    if serial is not None:
        raw["jax/steps_serial"], raw["jax/steps_threads"] = serial, threads
    return raw


def test_the_profile_measures_the_cap_as_serial_over_threaded_wall():
    """`concurrency` 'step' = median serial wall / median threaded wall of the same slot steps,
    clipped to [1/slots, slots]; a profile without that measurement has no cap."""
    wl = {"envs": 16, "slots": 4, "horizon": 8}
    c = costs_from_raw(_raw([0.08, 0.09, 0.10], [0.06, 0.05, 0.07]), wl, cores=2.0)["jax"]
    assert dict(c.concurrency)["step"] == pytest.approx(0.09 / 0.06)
    assert _concurrency(_raw([0.01], [1.0]), "jax", 4) == 0.25 and _concurrency(_raw([1.0], [0.01]), "jax", 4) == 4
    assert costs_from_raw(_raw(None, None), wl, cores=2.0)["jax"].concurrency == ()
    back = Costs.from_json(json.loads(json.dumps(c.to_json())))
    assert back == c


def test_an_older_profile_without_the_measurement_loads_and_predicts_as_before():
    """results/bench/plan_profile_prod3 (no slot-step concurrency measured): no cap, the same prediction
    as its costs with the field absent from the JSON."""
    c = load(ROOT / "results/bench/plan_profile_prod3", "c")
    assert c.concurrency == ()
    d = c.to_json()
    d.pop("concurrency")
    p = Pipeline(envs=16, horizon=8, steps_per_decision=2, mode="rollout_async", slots=4, updates=3)
    assert simulate(p, Costs.from_json(d)) == simulate(p, c)


def test_fifo_steps_finish_one_after_another_with_the_same_total_work():
    """Issue 44.5's model option: a group's share handed out first come, first served. Two one-core
    steps capped at 1 together: equal shares finish both at 2.0; first come, first served finishes
    the first at 1.0 and the second at 2.0 -- the same work done by 2.0, arrivals spread; the
    ungrouped job is untouched (1.0 either way)."""
    jobs = {"a": (1.0, 1.0, "step"), "b": (1.0, 1.0, "step"), "c": (1.0, 1.0, None)}
    assert _finish_times(2.0, {"step": 1.0}, jobs, fifo=True) == {
        "a": pytest.approx(1.0), "b": pytest.approx(2.0), "c": pytest.approx(1.0)}
    # without a cap: three one-core jobs on 2 cores get 2/3 each; the group's 4/3 cores go to a first (1 core,
    # done at 1.0), b runs at 1/3 and c at 2/3 until then, and a core each after: b at 1 + 2/3, c at 1 + 1/3
    assert _finish_times(2.0, None, jobs, fifo=True) == {
        "a": pytest.approx(1.0), "b": pytest.approx(5 / 3), "c": pytest.approx(4 / 3)}
    assert _finish_times(2.0, None, jobs) == {k: pytest.approx(1.5) for k in jobs}
