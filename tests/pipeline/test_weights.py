"""Versioned parameter server: non-blocking reads during a slow publish, resharding, donation safety."""

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from vlajax.config.schema import AsyncConfig, MeshConfig
from vlajax.pipeline.lanes import LaneGroup
from vlajax.pipeline.placement import make_placement
from vlajax.pipeline.weights import ParamServer


def _params(v):
    return {"w": jnp.full((8, 4), float(v)), "b": jnp.full((4,), float(v))}


@pytest.mark.timeout(60)
def test_reader_gets_previous_version_immediately_during_a_slow_publish():
    transfer_started = threading.Event()

    def slow_place(params):  # a real device_put plus a slow link
        transfer_started.set()
        out = jax.device_put(params, jax.devices()[1])
        time.sleep(1.0)
        return out

    group = LaneGroup(watchdog_s=30.0)
    server = ParamServer(_params(0), place=slow_place, lifetime=group.lifetime)
    transfer_started.clear()  # the initial placement also went through slow_place
    group.add("weights", server.lane_body)
    group.start()
    try:
        t0 = time.monotonic()
        server.publish(1, _params(1))
        publish_s = time.monotonic() - t0
        assert transfer_started.wait(10.0)
        reads = []
        for _ in range(20):
            t = time.monotonic()
            version, params = server.latest()
            reads.append((time.monotonic() - t, version, float(params["w"][0, 0])))
        assert all(v == 0 and w == 0.0 for _, v, w in reads)  # the previous version, never a partial one
        assert max(dt for dt, _, _ in reads) < 0.05  # no read waited for the 1 s transfer
        assert publish_s < 0.5  # the trainer did not wait either
        version, params = server.wait_version(1, timeout=20.0)
        assert version == 1 and float(params["w"][0, 0]) == 1.0
        assert params["w"].sharding.device_set == {jax.devices()[1]}
        assert server.transfer_s[-1] >= 1.0
    finally:
        group.stop()


@pytest.mark.timeout(60)
def test_publications_are_coalesced_and_monotonic():
    gate = threading.Event()

    def gated_place(params):
        gate.wait(10.0)
        return params

    group = LaneGroup(watchdog_s=30.0)
    gate.set()
    server = ParamServer(_params(0), place=gated_place, lifetime=group.lifetime)
    gate.clear()
    installed = []
    server.on_install(installed.append)
    group.add("weights", server.lane_body)
    group.start()
    try:
        server.publish(1, _params(1))
        time.sleep(0.2)  # version 1 is now in the (gated) transfer
        server.publish(2, _params(2))
        server.publish(3, _params(3))  # supersedes 2 while it is pending
        with pytest.raises(ValueError, match="not newer"):
            server.publish(3, _params(3))
        gate.set()
        version, params = server.wait_version(3, timeout=20.0)
        assert version == 3 and float(params["b"][0]) == 3.0
        assert installed == [1, 3] and server.superseded == 1
    finally:
        group.stop()


@pytest.mark.devices(8)
@pytest.mark.timeout(60)
def test_reshards_from_train_mesh_to_rollout_mesh_and_survives_donation():
    placement = make_placement(AsyncConfig(placement="disaggregated", placement_ratio="1:1"), MeshConfig())
    train_s = NamedSharding(placement.train_mesh, PartitionSpec("dp"))
    rollout_s = NamedSharding(placement.rollout_mesh, PartitionSpec(None, "dp"))
    params = jax.device_put({"w": jnp.arange(32.0).reshape(8, 4)}, train_s)
    group = LaneGroup(watchdog_s=30.0)
    server = ParamServer(params, rollout_s, lifetime=group.lifetime)
    group.add("weights", server.lane_body)
    step = jax.jit(lambda p: jax.tree.map(lambda x: x + 1.0, p), donate_argnums=0)
    group.start()
    try:
        new = step(params)
        server.publish(1, new)
        new2 = step(new)  # donates the published buffers: the server must hold its own snapshot
        assert new["w"].is_deleted()
        version, got = server.wait_version(1, timeout=20.0)
        np.testing.assert_array_equal(np.asarray(got["w"]), np.arange(32.0).reshape(8, 4) + 1.0)
        assert got["w"].sharding == rollout_s
        assert got["w"].sharding.device_set == set(placement.rollout_devices)
        assert not (got["w"].sharding.device_set & set(placement.train_devices))
        np.testing.assert_array_equal(np.asarray(new2["w"]), np.arange(32.0).reshape(8, 4) + 2.0)
    finally:
        group.stop()
