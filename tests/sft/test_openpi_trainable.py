"""model.trainable='expert' (πRL): the VLM frozen, only the action expert, its projections and the
value head change -- through the RL actor's log-prob/value gradients and the SFT optimizer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.sft.test_openpi_inputs import pi_model
from vlajax.config.schema import ConfigError, ModelConfig, SFTConfig, TrainConfig
from vlajax.data.normalize import NormStats
from vlajax.envs.tabletop import tasks
from vlajax.models import build_model, heads, sp_tokenizer
from vlajax.policies.bridge import Bridge
from vlajax.rl import actors
from vlajax.training import trainable


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    tok = sp_tokenizer.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "t.model"), texts)
    m = pi_model(tok, "pi05", value_head="expert", trainable="expert", num_cameras=1)
    ident = NormStats(mean=np.zeros(8, np.float32), std=np.ones(8, np.float32), q01=-np.ones(8, np.float32),
                      q99=np.ones(8, np.float32))
    bridge = Bridge(m, ("agentview",), {"actions": ident, "state": ident}, "quantile", "quantile", 4,
                    (("agentview", "base_0_rgb"),))
    model = build_model(m)
    rng = np.random.default_rng(0)
    obs = {"pixels/agentview": jnp.asarray(rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)),
           "state": jnp.asarray(rng.uniform(-1, 1, (2, 8)), jnp.float32), "instruction_id": jnp.zeros(2, jnp.int32)}
    task_id = jnp.asarray([0, 5])
    params = jax.jit(model.init)(jax.random.key(0), bridge.observation(obs, task_id))["params"]
    params = jax.tree.map(lambda x: x + 0.01 * jax.random.normal(jax.random.key(1), x.shape, x.dtype), params)
    return m, bridge, model, params, obs, task_id


def _split(tree, family):
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    vlm = {jax.tree_util.keystr(p): x for p, x in flat if trainable.is_vlm(family, trainable._names(p))}
    rest = {jax.tree_util.keystr(p): x for p, x in flat if not trainable.is_vlm(family, trainable._names(p))}
    return vlm, rest


def test_vlm_leaves_of_the_pi_tree(setup):
    _, _, _, params, _, _ = setup
    vlm, rest = _split(params, "pi05")
    assert any("vision" in k for k in vlm) and any("e0_" in k for k in vlm) and any("embed" in k for k in vlm)
    assert any("e1_" in k for k in rest) and any("action_in" in k for k in rest)
    assert any("value_out" in k for k in rest) and any("time_mlp" in k for k in rest)
    assert not any("e1_" in k for k in vlm) and not any("vision" in k for k in rest)


def test_rl_gradients_reach_only_the_expert_and_value_head(setup):
    m, bridge, model, params, obs, task_id = setup
    actor = actors.vla_actor(model, bridge, use_value=True)
    _, extra = jax.jit(actor.sample)(params, obs, task_id, jax.random.key(2))
    batch = {"obs": obs, "task_id": task_id, **extra}

    def objective(p):
        logp, ent, val = actor.logp_value(p, batch, None)
        return jnp.sum(logp) + jnp.sum(val)

    grads = jax.jit(jax.grad(objective))(params)
    vlm, rest = _split(grads, "pi05")
    assert all(float(jnp.abs(g).max()) == 0.0 for g in vlm.values())
    moved = [k for k, g in rest.items() if float(jnp.abs(g).max()) > 0]
    assert any("e1_" in k for k in moved) and any("value_out" in k for k in moved) and any("action_out" in k
                                                                                           for k in moved)


def test_sft_update_changes_only_expert_and_value_params(setup):
    from vlajax.policies.run_files import make_optimizer

    m, bridge, model, params, obs, task_id = setup
    cfg = TrainConfig(model=m, sft=SFTConfig(learning_rate=1e-2, warmup_steps=1, weight_decay=0.1))
    tx = make_optimizer(cfg)
    o = bridge.observation(obs, task_id)
    actions = jnp.ones((2, m.action_horizon, m.action_dim)) * 0.3

    @jax.jit
    def step(p, s):
        loss = lambda q: heads.flow_loss(model, {"params": trainable.freeze(q, m)}, o, actions,
                                         jax.random.key(3))[0]
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    new, s = params, tx.init(params)
    for _ in range(2):
        new, s = step(new, s)
    # without the freeze the VLM does get gradients (so the checks below can fail)
    g_all = jax.jit(jax.grad(lambda q: heads.flow_loss(model, {"params": q}, o, actions, jax.random.key(3))[0]))(params)
    assert all(float(jnp.abs(g).max()) > 0 for k, g in _split(g_all, "pi05")[0].items() if "vision" in k)
    before, after = _split(params, "pi05"), _split(new, "pi05")
    assert all(np.array_equal(before[0][k], after[0][k]) for k in before[0])  # bit-identical VLM
    changed = [k for k in before[1] if not np.array_equal(before[1][k], after[1][k])]
    assert any("e1_" in k for k in changed) and any("action_in" in k for k in changed)


def test_lora_is_refused_with_one_line():
    with pytest.raises(ConfigError, match="model.trainable='lora' is not available"):
        ModelConfig(trainable="lora")
