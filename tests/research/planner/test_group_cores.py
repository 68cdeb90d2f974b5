"""Issue 44.5, fifth try (`group_cores`): concurrent jobs of a capped group demand at most capacity / cap
cores per solo-speed unit, so the group alone on the host reaches the concurrency it was measured at."""

import dataclasses

import pytest

from research.planner.costs import Costs
from research.planner.sim import Pipeline, simulate
from tests.research.planner.test_concurrency import _finish_times

MJX_LIKE = {f"s{i}": (1.0, 1.4, "step") for i in range(4)}  # 4 steps of 1.4 solo cores, cap 1.9, 2 cores


def test_the_group_reaches_its_measured_concurrency():
    """Without it the cores are water-filled first: 4 x 1.4 cores on 2 give 2 / 1.4 = 1.43 units
    together (done at 4 / 1.43 = 2.8); with it each demands 2 / 1.9 cores per unit: 1.9 units
    together, the measured cap (done at 4 / 1.9)."""
    before = _finish_times(2.0, {"step": 1.9}, MJX_LIKE, group_cores=False)
    after = _finish_times(2.0, {"step": 1.9}, MJX_LIKE, group_cores=True)
    assert before == {k: pytest.approx(4 * 1.4 / 2.0) for k in MJX_LIKE}
    assert after == {k: pytest.approx(4 / 1.9) for k in MJX_LIKE}


def test_a_lone_job_and_a_gil_bound_group_are_untouched():
    """One job alone keeps its solo cores (done at its work); C-MuJoCo-like steps (1.02 cores, cap
    1.15: 2 / 1.15 > 1.02) and ungrouped jobs finish as without the option."""
    for gc in (False, True):
        assert _finish_times(2.0, {"step": 1.9}, {"a": (1.0, 1.4, "step")}, group_cores=gc) == {"a": pytest.approx(1.0)}
    c_like = {f"s{i}": (1.0, 1.02, "step") for i in range(4)} | {"t": (2.0, 1.0, None)}
    assert _finish_times(2.0, {"step": 1.15}, c_like, group_cores=True) == _finish_times(
        2.0, {"step": 1.15}, c_like, group_cores=False)


def test_the_cores_left_go_to_the_other_jobs_and_never_exceed_the_host():
    """4 MJX-like steps beside a one-core trainer job on 2 cores: 5 jobs, 0.4 cores each (every demand
    is above it), so the trainer runs at 0.4 either way while the steps hold 1.6 cores; with the option
    those 1.6 cores buy the steps 1.6 / (2 / 1.9) = 1.52 units together instead of 1.6 / 1.4 = 1.14."""
    jobs = MJX_LIKE | {"t": (0.4, 1.0, None)}
    for gc, units in ((False, 1.6 / 1.4), (True, 1.6 / (2 / 1.9))):
        done = _finish_times(2.0, {"step": 1.9}, jobs, group_cores=gc)
        assert done["t"] == pytest.approx(1.0)
        left = 4.0 - units * 1.0  # step work left when the trainer ends
        rest = left / min(1.9, 2.0 / (1.4 if not gc else 2 / 1.9))  # then the group alone on the host
        assert done["s0"] == pytest.approx(1.0 + rest)


def test_the_slot_modes_speed_up_and_sync_does_not_move():
    """rollout_async, 4 slots of 1 env on 2 cores, steps of 1.4 cores capped at 1.9: the option raises
    env steps/s; sync (a fused collect, no slot steps) is the same with and without it."""
    c = Costs(infer_s=((4, 1e-4),), train_update_s=((4, 1e-4),), env_compute_s=((1, 0.01),), env_on_device=True,
              shared_compute=True, cores=2.0, parallelism=(("step", 1.4),), concurrency=(("step", 1.9),),
              collect_s=((4, 0.02),))
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="rollout_async", slots=4, updates=6)
    slow = simulate(p, c)["env_steps_per_s"]
    fast = simulate(dataclasses.replace(p, group_cores=True), c)["env_steps_per_s"]
    assert fast > 1.15 * slow
    s = dataclasses.replace(p, mode="sync")
    assert simulate(s, c) == simulate(dataclasses.replace(s, group_cores=True), c)
