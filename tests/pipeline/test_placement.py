"""Placements on 8 virtual CPU devices: colocated, disaggregated 1:1 and 3:1, hybrid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from vlajax.config.schema import AsyncConfig, ConfigError, MeshConfig
from vlajax.pipeline.placement import make_placement, parse_ratio, rollout_share

pytestmark = pytest.mark.devices(8)


def _ids(devs):
    return sorted(d.id for d in devs)


@pytest.mark.parametrize(
    "placement, ratio, n_rollout, n_train, n_shared",
    [("colocated", "1:1", 8, 8, 8), ("disaggregated", "1:1", 4, 4, 0), ("disaggregated", "3:1", 6, 2, 0),
     ("hybrid", "1:1", 4, 8, 4), ("hybrid", "1:3", 2, 8, 2)],
)
def test_sub_meshes(placement, ratio, n_rollout, n_train, n_shared):
    p = make_placement(AsyncConfig(placement=placement, placement_ratio=ratio), MeshConfig())
    assert (len(p.rollout_devices), len(p.train_devices), len(p.shared)) == (n_rollout, n_train, n_shared)
    assert p.rollout_mesh.axis_names == ("dp", "tp", "sp")
    assert dict(p.train_mesh.shape) == {"dp": n_train, "tp": 1, "sp": 1}
    assert set(_ids(p.rollout_devices) + _ids(p.train_devices)) == set(range(8))  # every device has a role
    # Both roles run a sharded computation on their own sub-mesh.
    for mesh in (p.rollout_mesh, p.train_mesh):
        x = jax.device_put(jnp.arange(mesh.size * 2.0), NamedSharding(mesh, PartitionSpec("dp")))
        assert float(jax.jit(jnp.sum)(x)) == float(np.arange(mesh.size * 2.0).sum())
        assert x.sharding.device_set == set(mesh.devices.flat)
    assert placement in p.describe()


def test_tensor_parallel_sub_meshes():
    p = make_placement(AsyncConfig(placement="disaggregated", placement_ratio="3:1"), MeshConfig(tp=2))
    assert dict(p.rollout_mesh.shape) == {"dp": 3, "tp": 2, "sp": 1}
    assert dict(p.train_mesh.shape) == {"dp": 1, "tp": 2, "sp": 1}
    with pytest.raises(ConfigError, match="not divisible by mesh tp"):
        make_placement(AsyncConfig(placement="disaggregated", placement_ratio="3:1"), MeshConfig(tp=4))


def test_bad_ratios_fail_loudly():
    assert parse_ratio("3:1") == (3, 1) and rollout_share(8, "3:1") == 6
    with pytest.raises(ConfigError, match="does not split 8 devices"):
        rollout_share(8, "1:2")
    with pytest.raises(ConfigError, match="rollout:train"):
        parse_ratio("3")
