"""Mesh construction, logical->mesh specs, and state built directly on its shards."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from vlajax.config.schema import ConfigError, MeshConfig
from vlajax.training import sharding


def test_resolve_mesh_shape():
    assert sharding.resolve_mesh_shape(MeshConfig(), 8) == (8, 1, 1)
    assert sharding.resolve_mesh_shape(MeshConfig(tp=2, sp=2), 8) == (2, 2, 2)
    with pytest.raises(ConfigError, match=r"tp\*sp=3\*1=3 does not divide the 8"):
        sharding.resolve_mesh_shape(MeshConfig(tp=3), 8)
    with pytest.raises(ConfigError, match=r"=4 does not match the 8 available devices"):
        sharding.resolve_mesh_shape(MeshConfig(dp=2, tp=2), 8)


@pytest.mark.devices(8)
def test_make_mesh_is_auto_and_named():
    mesh = sharding.make_mesh(MeshConfig(dp=2, tp=4))
    assert mesh.axis_names == ("dp", "tp", "sp")
    assert dict(mesh.shape) == {"dp": 2, "tp": 4, "sp": 1}
    assert all(t == AxisType.Auto for t in mesh.axis_types)


@pytest.mark.devices(8)
def test_logical_to_mesh_spec_replicates_what_does_not_divide():
    mesh = sharding.make_mesh(MeshConfig(dp=2, tp=4))
    rules = MeshConfig().logical_rules
    assert sharding.logical_to_mesh_spec(("embed", "mlp"), (16, 32), rules, mesh) == P("dp", "tp")
    # 6 is not divisible by tp=4, and no other free dim takes tp: replicated, not an XLA error.
    assert sharding.logical_to_mesh_spec(("embed", "mlp"), (16, 6), rules, mesh) == P("dp")
    # FSDP fallback: embed=3 does not divide dp=2, so dp moves to the largest free dim it divides.
    assert sharding.logical_to_mesh_spec(("embed", "head_dim"), (3, 8), rules, mesh) == P(None, "dp")
    # ... but activations never move (a batch that does not divide dp stays whole).
    assert sharding.logical_to_mesh_spec(("act_batch", "act_embed"), (3, 8), rules, mesh) == P()
    # An axis is used at most once per array.
    assert sharding.logical_to_mesh_spec(("mlp", "heads"), (8, 8), rules, mesh) == P("tp")
    assert sharding.logical_to_mesh_spec(("unknown",), (8,), rules, mesh) == P()
    assert sharding.logical_to_mesh_spec(None, (8,), rules, mesh) == P()


class _Dense(nn.Module):
    @nn.compact
    def __call__(self, x):
        k = self.param("k", nn.with_logical_partitioning(nn.initializers.normal(), ("embed", "mlp")), (16, 32))
        return nn.with_logical_constraint(x @ k, ("act_batch", "act_mlp"))


@pytest.mark.devices(8)
def test_init_sharded_places_params_and_optimizer_state_on_shards():
    cfg = MeshConfig(dp=2, tp=2, sp=2)
    mesh = sharding.make_mesh(cfg)
    tx = optax.adam(1e-3)

    def init(rng):
        params = _Dense().init(rng, jnp.zeros((4, 16)))["params"]
        return {"params": params, "opt": tx.init(params)}

    state, shardings = sharding.init_sharded(init, mesh, cfg.logical_rules, jax.random.key(0))
    assert state["params"]["k"].sharding.spec == P("dp", "tp")
    assert state["opt"][0].mu["k"].sharding.spec == P("dp", "tp")
    assert state["opt"][0].count.sharding.spec == P()
    # Each device holds a quarter of the kernel: (16/2, 32/2).
    assert state["params"]["k"].addressable_shards[0].data.shape == (8, 16)
    # Values equal an unsharded init with the same key.
    ref = nn.unbox(init(jax.random.key(0)))
    np.testing.assert_array_equal(np.asarray(state["params"]["k"]), np.asarray(ref["params"]["k"]))
    summary = sharding.partition_specs_summary(shardings, jax.eval_shape(init, jax.random.key(0)))
    assert summary["params/k"] == (("dp", "tp"), (16, 32))
    assert sharding.per_device_bytes(jax.eval_shape(init, jax.random.key(0)), shardings) == 3 * 8 * 16 * 4 + 4


@pytest.mark.devices(8)
def test_use_mesh_applies_activation_rules():
    cfg = MeshConfig(dp=4, tp=2)
    mesh = sharding.make_mesh(cfg)
    params = nn.unbox(_Dense().init(jax.random.key(0), jnp.zeros((8, 16)))["params"])
    with sharding.use_mesh(mesh, cfg.logical_rules):
        out = jax.jit(lambda p, x: _Dense().apply({"params": p}, x))(params, jnp.ones((8, 16)))
    assert out.sharding.spec == P("dp", "tp")
