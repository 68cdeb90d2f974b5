"""Sharding: golden partition specs per preset x mesh; sharded == single-device; one compile per step."""

import dataclasses
import json
import os
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from vlajax.config.schema import DP, ConfigError, MeshConfig, ModelConfig, TrainConfig
from vlajax.models import heads, presets
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA
from vlajax.training import sharding

GOLDEN = pathlib.Path(__file__).parent / "golden"
MESHES = [(8, 1, 1), (2, 2, 2), (2, 4, 1), (1, 8, 1)]
RULES = MeshConfig().logical_rules


def _mesh(shape):
    return sharding.make_mesh(MeshConfig(dp=shape[0], tp=shape[1], sp=shape[2]))


def _summary(abstract, mesh):
    shardings = sharding.tree_shardings(abstract, mesh, RULES)
    flat = sharding.partition_specs_summary(shardings, abstract)
    return {k: {"spec": [list(a) if isinstance(a, tuple) else a for a in spec], "shape": list(shape)}
            for k, (spec, shape) in sorted(flat.items())}


# The presets (flow head, no value head) plus the tiny model with the other heads, so every
# parameter kind (action queries, bin head, value MLP, flow_noise std head) has a golden spec.
VARIANTS = {
    **{n: presets.get_model_config(n) for n in presets.PRESETS},
    "tiny+tokens+value": presets.get_model_config("tiny", action_head="tokens", value_head="prefix"),
    "tiny+flow_noise+value": presets.get_model_config("tiny", flow_sampler="flow_noise", value_head="expert"),
    "tiny+conv_stem": presets.get_model_config("tiny", vision_stem="conv"),
}


@pytest.fixture(scope="module")
def abstracts():
    return {n: presets.abstract_variables(cfg) for n, cfg in VARIANTS.items()}


@pytest.mark.devices(8)
@pytest.mark.parametrize("preset", list(VARIANTS))
def test_golden_partition_specs(preset, abstracts):
    """Every parameter's PartitionSpec for each mesh; regenerate with VLAJAX_UPDATE_GOLDEN=1."""
    for shape in MESHES:
        got = _summary(abstracts[preset], _mesh(shape))
        path = GOLDEN / f"{preset}_{'x'.join(map(str, shape))}.json"
        if os.environ.get("VLAJAX_UPDATE_GOLDEN"):
            lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in got.items()]
            path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        want = json.loads(path.read_text())
        assert got.keys() == want.keys(), f"{path.name}: parameter set changed"
        diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        assert not diff, f"{path.name}: {len(diff)} specs changed, e.g. {next(iter(diff.items()))}"


def _loss_fn(model):
    cfg = model.cfg

    def loss(params, obs, actions, target):
        v = {"params": params}
        if cfg.action_head == "flow":
            head, _ = heads.flow_loss(model, v, obs, actions, jax.random.key(3))
        else:
            head, _ = heads.token_loss(model, v, obs, actions)
        value = heads.value(model, v, obs)
        return head + jnp.mean((value - target) ** 2), value

    return loss


CASES = {
    "flow+expert_value": dict(action_head="flow", flow_sampler="flow_sde", value_head="expert"),
    "tokens+prefix_value": dict(action_head="tokens", num_bins=32, value_head="prefix"),
}
TOL = dict(rtol=2e-4, atol=2e-5)  # float32; sharded reductions reorder sums


@pytest.fixture(scope="module", params=list(CASES))
def reference(request):
    cfg = dataclasses.replace(ModelConfig(), **CASES[request.param])
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), 8, cfg)
    actions = jnp.tanh(jax.random.normal(jax.random.key(1), (8, cfg.action_horizon, cfg.action_dim)))
    target = jnp.linspace(-1, 1, 8)
    params = jax.jit(lambda r: model.init(r, obs))(jax.random.key(2))["params"]
    params = jax.tree.map(lambda x: x.unbox() if hasattr(x, "unbox") else x, params,
                          is_leaf=lambda x: hasattr(x, "unbox"))
    (loss, value), grads = jax.jit(jax.value_and_grad(_loss_fn(model), has_aux=True))(params, obs, actions, target)
    return model, obs, actions, target, params, (loss, value, grads)


# (2,2,2) uses every mesh axis and runs by default; the other meshes are `slow` (~15 s each, cold cache).
SHARDED_MESHES = [pytest.param(s, marks=() if s == (2, 2, 2) else pytest.mark.slow) for s in MESHES]


@pytest.mark.devices(8)
@pytest.mark.parametrize("shape", SHARDED_MESHES, ids=lambda s: "x".join(map(str, s)))
def test_sharded_forward_and_grads_equal_single_device(reference, shape):
    model, obs, actions, target, params, (loss0, value0, grads0) = reference
    mesh = _mesh(shape)
    TrainConfig(mesh=MeshConfig(dp=shape[0], tp=shape[1], sp=shape[2]), model=model.cfg)  # passes the checks
    abstract = jax.eval_shape(lambda r: model.init(r, obs), jax.random.key(2))
    p_shard = sharding.tree_shardings(abstract, mesh, RULES)["params"]
    batch = NamedSharding(mesh, PartitionSpec(DP))
    repl = NamedSharding(mesh, PartitionSpec())
    grad_fn = jax.value_and_grad(_loss_fn(model), has_aux=True)

    @chex.assert_max_traces(n=1)
    def step(params, obs, actions, target):
        return grad_fn(params, obs, actions, target)

    with sharding.use_mesh(mesh, RULES):
        jstep = jax.jit(step, in_shardings=(p_shard, batch, batch, batch),
                        out_shardings=((repl, batch), p_shard))
        sp = jax.device_put(params, p_shard)
        args = (jax.device_put(obs, batch), jax.device_put(actions, batch), jax.device_put(target, batch))
        (loss, value), grads = jstep(sp, *args)
        (loss2, _), _ = jstep(sp, *args)  # second call: no retrace (assert_max_traces)
    chex.clear_trace_counter()
    np.testing.assert_allclose(loss, loss0, **TOL)
    np.testing.assert_allclose(loss2, loss0, **TOL)
    np.testing.assert_allclose(value, value0, **TOL)
    flat0, _ = jax.tree_util.tree_flatten_with_path(grads0)
    for (path, g0), g in zip(flat0, jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(g, g0, err_msg=jax.tree_util.keystr(path), rtol=2e-3, atol=2e-5)
    # FSDP really splits: some parameter is sharded over dp when dp > 1.
    if shape[0] > 1:
        assert any(DP in str(s.spec) for s in jax.tree.leaves(p_shard))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: TrainConfig(mesh=MeshConfig(tp=3)), r"num_heads=8 is not divisible by mesh.tp=3"),
        (lambda: TrainConfig(mesh=MeshConfig(sp=3)), r"prefix length 56 is not divisible by mesh.sp=3"),
        (lambda: TrainConfig(mesh=MeshConfig(sp=4), model=ModelConfig(action_horizon=6)),
         r"action length 6 .* mesh.sp=4"),
        (lambda: ModelConfig(num_heads=6, num_kv_heads=4), r"num_kv_heads=4 must divide"),
        (lambda: ModelConfig(image_size=30), r"patch_size=8 must divide"),
        (lambda: presets.get_model_config("pi0_3b"), r"unknown model preset 'pi0_3b'; did you mean 'pi0-3b'"),
    ],
)
def test_config_errors_are_one_line_and_early(make, match):
    """Raised while building the config, i.e. before anything is traced or compiled."""
    with pytest.raises(ConfigError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


@pytest.mark.devices(8)
@pytest.mark.parametrize("shape", SHARDED_MESHES, ids=lambda s: "x".join(map(str, s)))
def test_sharded_sampling_equals_single_device(reference, shape):
    """The rollout forward pass (sampler: actions, log-probs, values) matches single-device, one trace."""
    model, obs, _, _, params, _ = reference
    cfg = model.cfg

    @chex.assert_max_traces(n=1)
    def sample(params, obs, rng):
        v = {"params": params}
        if cfg.action_head == "flow":
            s = heads.flow_sample(model, v, obs, rng)
        else:
            s = heads.token_sample(model, v, obs, rng, temperature=0.8)
        return s.actions, s.log_prob, s.value

    rng = jax.random.key(4)
    ref = jax.jit(sample)(params, obs, rng)
    chex.clear_trace_counter()
    mesh = _mesh(shape)
    abstract = jax.eval_shape(lambda r: model.init(r, obs), jax.random.key(2))
    p_shard = sharding.tree_shardings(abstract, mesh, RULES)["params"]
    batch = NamedSharding(mesh, PartitionSpec(DP))
    with sharding.use_mesh(mesh, RULES):
        jsample = jax.jit(sample, in_shardings=(p_shard, batch, None), out_shardings=(batch, batch, batch))
        args = (jax.device_put(params, p_shard), jax.device_put(obs, batch), rng)
        out = jsample(*args)
        jsample(*args)
    chex.clear_trace_counter()
    for name, a, b in zip(("actions", "log_prob", "value"), out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.devices(8)
def test_init_sharded_builds_params_on_their_shards():
    """`sharding.init_sharded(model.init)` gives the single-device values, laid out by the golden specs."""
    cfg = ModelConfig()
    model = VLA(cfg)
    obs = fake_observation(jax.random.key(0), 8, cfg)
    mesh = _mesh((2, 2, 2))
    state, shardings = sharding.init_sharded(lambda r: model.init(r, obs), mesh, RULES, jax.random.key(1))
    ref = jax.jit(lambda r: model.init(r, obs))(jax.random.key(1))
    ref = jax.tree.map(lambda x: x.unbox() if hasattr(x, "unbox") else x, ref, is_leaf=lambda x: hasattr(x, "unbox"))
    for a, b, s in zip(jax.tree.leaves(state), jax.tree.leaves(ref), jax.tree.leaves(shardings), strict=True):
        assert a.sharding == s
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    golden = json.loads((GOLDEN / "tiny_2x2x2.json").read_text())
    q = state["params"]["llm"]["block_0"]["attn"]["q"]["kernel"]
    assert [list(x) if isinstance(x, tuple) else x for x in q.sharding.spec] == \
        golden["params/llm/block_0/attn/q/kernel"]["spec"]
