"""Staleness-paced trajectory buffer: verl's admission rule, under real producer/consumer threads."""

import math
import random
import time

import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.pipeline.buffer import Trajectory, TrajectoryBuffer, window_samples
from vlajax.pipeline.lanes import LaneGroup, PipelineTimeout
from vlajax.pipeline.weights import ParamServer


def _traj(version, n=1):
    return Trajectory(data=np.zeros((2, n)), versions=np.full((2,), version), num_samples=n)


def test_budget_is_verls_formula():
    # W = trigger * require * mini = 2 * 1 * 2 = 4; s = 0.5 -> (1 + s) W = 6 per window.
    w = window_samples(2, 1, 2)
    buf = TrajectoryBuffer(w, 0.5, timeout_s=0.2)
    assert (w, buf.budget, buf.max_staleness) == (4, 6, 1)
    for _ in range(6):
        buf.reserve(1)
        buf.put(_traj(0))
    with pytest.raises(PipelineTimeout, match="pacing admission"):
        buf.reserve(1)  # the window's budget is spent: rollout waits (here: times out), nothing dropped
    for _ in range(4):
        buf.get()
    buf.record_publish(1)
    assert buf.allowance() == 0  # not yet installed on the rollout side
    buf.set_rollout_version(1)
    # num_stale = 6 produced - 4 consumed = 2  ->  (1 + s) W - num_stale = 6 - 2 = 4.
    assert buf.allowance() == 4
    assert len(buf) == 2 and buf.counters()["produced"] == 6


def test_put_needs_a_reservation_and_versions():
    buf = TrajectoryBuffer(4, 0.0)
    with pytest.raises(RuntimeError, match="without a reservation"):
        buf.put(_traj(0))
    with pytest.raises(ValueError, match="policy version"):
        Trajectory(data=None, versions=np.zeros((0,)))


def test_get_times_out_naming_what_it_waits_for():
    buf = TrajectoryBuffer(4, 0.0)
    t0 = time.monotonic()
    with pytest.raises(PipelineTimeout, match="rollout to produce"):
        buf.get(timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("producers", [1, 3])
@pytest.mark.parametrize("threshold", [0.0, 0.5, 1.0, 2.0])
def test_pacing_never_admits_a_sample_older_than_the_threshold(threshold, producers):
    """Fast producers, slow consumer, real weight publication through the ParamServer lane.

    The producers always run as far ahead as pacing allows, so the observed maximum staleness
    must reach ceil(threshold) (pacing is not stricter than verl's rule) and never exceed it.
    With 3 producers one is a straggler (its samples finish out of reservation order).
    """
    trigger, require, mini = 2, 2, 1
    w = window_samples(trigger, require, mini)
    group = LaneGroup(watchdog_s=30.0)
    buf = TrajectoryBuffer(w, threshold, timeout_s=20.0, lifetime=group.lifetime, timeline=group.timeline)
    weights = ParamServer({"w": jnp.zeros((3,))}, lifetime=group.lifetime)
    weights.on_install(buf.set_rollout_version)
    rng = random.Random(0)
    consumed, order, state = [], [], {"updates": 0, "version": 0}
    num_updates = 12

    def producer(k):
        def produce(lane):
            with lane.waiting("pacing"):
                ticket = buf.reserve(1)
            version, params = weights.latest()
            time.sleep(0.03 if k == 2 else rng.uniform(0, 0.002))  # producer 2 is a straggler
            data = {"w": np.asarray(params["w"]), "index": ticket.first_index}
            buf.put(Trajectory(data, np.full((4,), version)), ticket)
        return produce

    def train(lane):
        if state["updates"] == num_updates:
            group.lifetime.stop()
            return False
        for _ in range(require):
            with lane.waiting("samples"):
                item = buf.get()
            consumed.append(buf.trainer_version - item.version_min)
            order.append(item.data["index"])
            assert int(item.data["w"][0]) == item.version_min  # the params really were that version's
        time.sleep(rng.uniform(0.005, 0.015))
        state["updates"] += 1
        if state["updates"] % trigger == 0:
            state["version"] += 1
            buf.record_publish(state["version"])
            weights.publish(state["version"], {"w": jnp.full((3,), float(state["version"]))})
        return True

    for k in range(producers):
        group.add(f"rollouter/{k}", producer(k))
    group.add("trainer", train)
    group.add("weights", weights.lane_body)
    assert group.run(timeout=50) == "done"
    assert len(consumed) == num_updates * require
    assert max(consumed) <= math.ceil(threshold)
    assert max(consumed) == math.ceil(threshold)  # reached: pacing is not stricter than the rule
    assert buf.max_seen_staleness == max(consumed)
    c = buf.counters()
    assert c["produced"] == c["consumed"] + c["depth"]  # nothing discarded
    assert c["stale_consumed"] == sum(1 for s in consumed if s > 0)
    # Every sample was consumed in the window it was reserved for ...
    assert [i // w for i in order] == [k // w for k in range(len(order))]
    if producers == 1:
        assert order == sorted(order) and c["deferred"] == 0  # ... in plain FIFO order with one producer,
    else:
        assert order != sorted(order)  # ... and out of reservation order when a straggler finished late
