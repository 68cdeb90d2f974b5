"""The long-tail simulator latency model and its step wrapper."""

import time

import numpy as np
import pytest

from vlajax.pipeline.latency import LatencyModel, with_latency


def test_batch_time_is_the_slowest_env_and_grows_with_the_batch():
    m = LatencyModel(median_s=0.01, sigma=0.25, tail_prob=0.05, tail_scale=6.0)
    rng = np.random.default_rng(0)
    lat = m.env_seconds(rng, 20000)
    assert np.median(lat) == pytest.approx(0.01, rel=0.05)
    assert np.mean(lat > 0.03) == pytest.approx(0.05, abs=0.01)  # the stragglers (6x median, beyond 3x)
    e1, e8, e32 = (m.expected_batch_seconds(n, draws=2000) for n in (1, 8, 32))
    assert e1 < e8 < e32  # a bigger synchronous batch waits for a worse straggler
    no_tail = LatencyModel(median_s=0.01, sigma=0.0, tail_prob=0.0)
    assert no_tail.batch_seconds(rng, 32) == pytest.approx(0.01)
    assert no_tail.batch_seconds(rng, 32, steps=4) == pytest.approx(0.04)  # a chunk of 4 control steps per env
    # the sum over a chunk's steps averages the tail out per env: 4 steps take less than 4 single-step maxima
    assert m.expected_batch_seconds(8, draws=2000, steps=4) < 4 * e8
    with pytest.raises(ValueError):
        LatencyModel(tail_prob=2.0)


@pytest.mark.timeout(30)
def test_with_latency_takes_the_drawn_wall_time_per_slot():
    m = LatencyModel(median_s=0.02, sigma=0.0, tail_prob=0.0)
    calls = []
    step = with_latency(lambda slot, s, a: calls.append(slot) or (s + a), m, envs_per_slot=4, seed=1)
    t0 = time.monotonic()
    assert step(0, 1, 2) == 3
    assert time.monotonic() - t0 >= 0.02
    chunk = with_latency(lambda slot, s, a: s + a, m, envs_per_slot=4, seed=1, steps_per_call=3)
    t0 = time.monotonic()
    assert chunk(1, 1, 2) == 3
    assert time.monotonic() - t0 >= 0.06
    assert calls == [0]


def test_reset_latency_is_added_per_env_call_with_its_probability():
    rng = np.random.default_rng(0)
    plain = LatencyModel(median_s=0.01, sigma=0.0, tail_prob=0.0)
    always = LatencyModel(median_s=0.01, sigma=0.0, tail_prob=0.0, reset_prob=1.0, reset_s=0.1)
    assert always.batch_seconds(rng, 4, steps=2) == pytest.approx(0.12)  # 2 steps + one reset per call
    assert plain.batch_seconds(rng, 4, steps=2) == pytest.approx(0.02)
    some = LatencyModel(median_s=0.01, sigma=0.0, tail_prob=0.0, reset_prob=0.05, reset_s=0.1)
    # the batch waits for a reset when any of its n envs resets: probability 1 - 0.95^n
    for n in (1, 4, 16):
        expected = 0.02 + 0.1 * (1 - 0.95**n)
        assert some.expected_batch_seconds(n, draws=4000, steps=2) == pytest.approx(expected, rel=0.08)
    with pytest.raises(ValueError):
        LatencyModel(reset_prob=1.5)
    with pytest.raises(ValueError):
        LatencyModel(reset_s=-1.0)
