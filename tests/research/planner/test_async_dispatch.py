"""Issue 44.5, tenth try (`plan validate --async-dispatch`): JAX returns from a slot's step once it is dispatched,
and the slot posts its next request then (`rl.async_workload`'s step, `pipeline.slots`); the dispatch is Python,
one thread at a time under the GIL, the rest of the step computes after it and the batch's inference waits for
it. The model's option follows that (`Pipeline.async_dispatch`, `Costs.dispatch_s`)."""

import subprocess
import sys

import pytest

from research.planner.profile import costs_from_raw
from research.planner.sim import Pipeline, simulate
from tests.research.planner.test_jitter import _costs, _jax_raw
from tests.research.planner.test_threaded_steps import ROOT


def _run(costs, slots: int = 4, wait_s: float = 0.001, **kw) -> dict:
    p = Pipeline(envs=slots, horizon=2, steps_per_decision=1, mode="rollout_async", slots=slots, updates=20,
                 max_wait_s=wait_s, **{"adaptive": False, **kw})  # the fixed wait: what a dispatch order splits
    return simulate(p, costs)


def test_dispatches_one_at_a_time_post_the_requests_apart():
    """Every call the same, 4 slots on 4 cores: posted after their whole steps, the 4 requests arrive together
    (4 per call); posted after dispatches of 3 ms taken one at a time, they arrive 3 ms apart, so a 1 ms wait
    fires part of them -- and a 50 ms wait gathers all 4 again."""
    c = _costs(dispatch_s=(("step", 0.003),))
    assert _run(c)["inference_batch_mean"] == 4.0
    assert _run(c, async_dispatch=True)["inference_batch_mean"] < 3.0
    assert _run(c, wait_s=0.05, async_dispatch=True)["inference_batch_mean"] == 4.0


def test_the_dispatch_is_part_of_the_step_not_added_to_it():
    """One slot (nothing to overlap, every call fires at once): dispatch + the rest of the step is the step, so
    the run's rate is the same with and without the option; a dispatch counted twice would slow it."""
    c = _costs(dispatch_s=(("step", 0.003),))
    plain, dispatched = _run(c, slots=1), _run(c, slots=1, async_dispatch=True)
    assert dispatched["env_steps_per_s"] == pytest.approx(plain["env_steps_per_s"], rel=1e-9)
    assert plain["inference_batch_mean"] == dispatched["inference_batch_mean"] == 1.0


def test_a_dispatch_that_covers_the_host_calls_is_not_counted_twice():
    """C MuJoCo's steps run inline within their dispatch, host calls included (profiled: 4.7 of a 4.9 ms step): a
    dispatch of 9 ms of a 10 ms step with 2 host calls of 2 ms leaves 1 ms to hold after it, not the 4 ms of host
    calls -- one slot runs at the same rate with and without the option."""
    c = _costs(dispatch_s=(("step", 0.009),), host_sim_s=((1, 0.002),), host_calls_per_decision=2.0)
    plain, dispatched = _run(c, slots=1), _run(c, slots=1, async_dispatch=True)
    assert dispatched["env_steps_per_s"] == pytest.approx(plain["env_steps_per_s"], rel=1e-9)


def test_the_profile_s_dispatch_timings_become_the_costs_and_their_spread():
    wl = {"envs": 16, "slots": 4, "horizon": 8}
    c = costs_from_raw(_jax_raw(**{"jax/step_dispatch": [0.002, 0.002, 0.005]}), wl, cores=2.0)["jax"]
    assert c.dispatch_seconds("step") == 0.002  # the median, as every cost
    assert c.jitter_factors("step_dispatch") == pytest.approx((2 / 3, 2 / 3, 5 / 3))
    assert costs_from_raw(_jax_raw(), wl, cores=2.0)["jax"].dispatch_s == ()  # older profiles: not timed


def test_the_option_needs_the_dispatch_seconds():
    with pytest.raises(ValueError, match="dispatch"):
        _run(_costs(), async_dispatch=True)


def test_validate_refuses_async_dispatch_for_profiles_without_the_timings():
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--profile-from",
                        str(ROOT / "results/bench/plan_profile_prod11/p0"), "--runs",
                        str(ROOT / "results/bench/async_production_planval11.json"), "--async-dispatch"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-500:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: --async-dispatch: the profiles do not time")
