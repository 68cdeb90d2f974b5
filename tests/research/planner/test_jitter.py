"""The planner's call variability (`Pipeline.jitter`): slot steps and inference calls drawn from the
profile's timed calls, so slots that start together end apart and a short batcher wait fires part of them."""

import dataclasses
import json

import numpy as np
import pytest

from research.planner.costs import Costs
from research.planner.profile import costs_from_raw
from research.planner.sim import Pipeline, simulate


def _costs(**kw):
    """4 slots of 1 env on a 4-core host: 10 ms steps, 4 ms inference calls, near-free training."""
    base = dict(infer_s=((4, 0.004),), train_update_s=((8, 1e-4),), env_compute_s=((1, 0.010),),
                env_on_device=True, shared_compute=True, cores=4.0, infer_padded=True)
    return Costs(**base | kw)


SPREAD = (("step", (0.8, 0.9, 1.0, 1.1, 1.2)), ("infer", (0.9, 1.0, 1.1)))


def _jax_raw(**extra) -> dict:
    """A profile's raw seconds (MJX only, 3 calls each; infer and step vary) plus `extra` keys."""
    raw = {"train/update": [0.01] * 3, "train/slots_update": [0.02] * 3, "train/prepare": [0.002] * 3,
           "train/stream_item": [0.003] * 3, "train/stream_finish": [0.001] * 3, "sync/publish": [0.0005] * 3,
           "jax/collect": [0.10] * 3, "jax/infer": [0.004, 0.005, 0.006], "jax/step": [0.006, 0.006, 0.009]}
    raw |= {k + "@cpu": v for k, v in list(raw.items())}
    return raw | extra


def _batch(wait_s: float, jitter: bool, costs: Costs) -> float:
    p = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="rollout_async", slots=4, updates=20,
                 max_wait_s=wait_s, jitter=jitter, adaptive=False)  # the fixed wait: what the spread splits
    return simulate(p, costs)["inference_batch_mean"]


def test_without_variability_the_slots_stay_in_lockstep_at_any_wait():
    """Every call the same: the 4 slots end their steps together, so every call gathers all 4 -- with
    jitter off, and with jitter on but no measured factors."""
    for jitter in (False, True):
        assert _batch(0.0005, jitter, _costs()) == 4.0
    assert _batch(0.0005, False, _costs(jitter=SPREAD)) == 4.0


def test_measured_variability_splits_a_short_wait_and_a_long_wait_gathers_them_again():
    """Steps 8-12 ms: with a 0.5 ms wait most calls fire part of the slots; with a 50 ms wait (longer
    than any spread) every call gathers all 4."""
    c = _costs(jitter=SPREAD)
    assert _batch(0.0005, True, c) < 3.0
    assert _batch(0.05, True, c) == 4.0


def test_the_draws_have_their_own_stream_and_keep_the_mean_cost():
    """sync uses no slot calls here (a fused collect): jitter changes nothing; the factors of a profile
    are its calls over their mean."""
    c = _costs(jitter=SPREAD, collect_s=((4, 0.02),))
    s = Pipeline(envs=4, horizon=2, steps_per_decision=1, mode="sync", updates=5)
    assert simulate(dataclasses.replace(s, jitter=True), c) == simulate(s, c)
    got = costs_from_raw(_jax_raw(), {"envs": 16, "slots": 4, "horizon": 8}, cores=2.0)["jax"]
    assert np.mean(got.jitter_factors("step")) == pytest.approx(1.0)
    assert got.jitter_factors("step") == pytest.approx((6 / 7, 6 / 7, 9 / 7))
    assert got.jitter_factors("infer") == pytest.approx((0.8, 1.0, 1.2))
    assert Costs.from_json(json.loads(json.dumps(got.to_json()))) == got
