"""pi0 / pi0.5 modules at a tiny size: the VLA interface (heads run unchanged), cache vs joint pass,
masked vs absent cameras, config refusals, bf16."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, ModelConfig
from vlajax.models import build_model, fake_observation, heads
from vlajax.models.openpi import Pi0

B = 2


def tiny(family: str, **kw) -> ModelConfig:
    base = dict(name=f"{family}-tiny", family=family, paligemma_variant="dummy", action_expert_variant="dummy",
                siglip_variant="mu/14", siglip_depth=1, image_size=28, num_cameras=2, vocab_size=128,
                max_text_len=8, action_dim=6, action_horizon=3, state_dim=5, num_denoise_steps=2)
    return ModelConfig(**{**base, **kw})


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def setup(request):
    cfg = tiny(request.param, flow_sampler="flow_sde", value_head="expert")
    model = build_model(cfg)
    obs = fake_observation(jax.random.key(0), B, cfg)
    variables = jax.jit(model.init)(jax.random.key(1), obs)
    # openpi zero-initialises the adaRMS modulation: randomise every leaf so no pathway is hidden
    leaves, tree = jax.tree.flatten(variables)
    keys = jax.random.split(jax.random.key(2), len(leaves))
    variables = jax.tree.unflatten(tree, [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    return cfg, model, obs, variables


def test_build_model_family():
    assert isinstance(build_model(tiny("pi0")), Pi0)
    assert type(build_model(dataclasses.replace(ModelConfig()))).__name__ == "VLA"


def test_heads_run_on_pi(setup):
    cfg, model, obs, variables = setup
    actions = jax.random.uniform(jax.random.key(3), (B, cfg.action_horizon, cfg.action_dim), minval=-1, maxval=1)

    if cfg.family == "pi0":  # the families differ only in the suffix: each runs half of the head API

        def grads(v):
            loss, g = jax.value_and_grad(lambda v: heads.flow_loss(model, v, obs, actions, jax.random.key(4))[0])(v)
            return loss, {k: sum(jnp.sum(x ** 2) for x in jax.tree.leaves(sub)) for k, sub in g["params"].items()}

        loss, gnorm = jax.jit(grads)(variables)
        assert np.isfinite(float(loss))
        trained = ("vision", "llm", "action_in", "state_proj", "action_time_mlp_in")
        assert all(float(gnorm[k]) > 0 for k in trained), gnorm
        return

    def run(v):  # one compile: sampler, recomputed log-prob, value
        sample = heads.flow_sample(model, v, obs, jax.random.key(5))
        lp = heads.flow_chain_log_prob(model, v, obs, sample.chain, sample.sde_step)
        return sample, lp["log_prob"], heads.value(model, v, obs)

    sample, lp, val = jax.jit(run)(variables)
    assert sample.actions.shape == (B, cfg.action_horizon, cfg.action_dim)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(sample.log_prob), rtol=1e-4, atol=1e-3)
    assert val.shape == (B,) and np.isfinite(np.asarray(val)).all()


def test_cached_velocity_equals_joint_pass(setup):
    cfg, model, obs, variables = setup
    x = jax.random.normal(jax.random.key(6), (B, cfg.action_horizon, cfg.action_dim))
    t = jnp.array([0.3, 0.9])

    def both(v):
        _, cache = model.apply(v, obs, method="prefix")
        return model.apply(v, cache, x, t, method="velocity")[0], model.apply(v, obs, x, t, method="joint")[2]

    with jax.default_matmul_precision("highest"):
        cached, joint = jax.jit(both)(variables)
    np.testing.assert_allclose(np.asarray(cached), np.asarray(joint), atol=1e-5)
    assert float(jnp.std(cached)) > 1e-3


def test_absent_camera_equals_masked_camera(setup):
    cfg, model, obs, variables = setup
    masked = dataclasses.replace(obs, image_masks={**obs.image_masks, "cam1": jnp.zeros((B,), bool)})
    absent = dataclasses.replace(obs, images={"cam0": obs.images["cam0"]},
                                 image_masks={"cam0": obs.image_masks["cam0"]})
    x = jax.random.normal(jax.random.key(7), (B, cfg.action_horizon, cfg.action_dim))
    t = jnp.array([0.5, 0.7])

    def vel(v, o):
        _, cache = model.apply(v, o, method="prefix")
        return model.apply(v, cache, x, t, method="velocity")[0]

    f = jax.jit(vel)
    with jax.default_matmul_precision("highest"):
        a, b, full = f(variables, masked), f(variables, absent), f(variables, obs)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    assert float(jnp.max(jnp.abs(a - full))) > 1e-4  # the camera mattered


def test_pi05_has_no_state_token_and_pi0_reads_state(setup):
    cfg, model, obs, variables = setup
    other = dataclasses.replace(obs, state=obs.state + 1.0)
    x = jnp.zeros((B, cfg.action_horizon, cfg.action_dim))
    f = jax.jit(lambda o: model.apply(variables, o, x, jnp.ones((B,)), method="joint")[2])
    diff = float(jnp.max(jnp.abs(f(obs) - f(other))))
    assert (diff > 1e-4) if cfg.family == "pi0" else (diff == 0.0)


def test_bf16_runs_close_to_f32(setup):
    cfg, model, obs, variables = setup
    model16 = build_model(dataclasses.replace(cfg, dtype="bfloat16"))
    x, t = jnp.zeros((B, cfg.action_horizon, cfg.action_dim)), jnp.full((B,), 0.5)

    def run(v):
        return model.apply(v, obs, x, t, method="joint")[2], model16.apply(v, obs, x, t, method="joint")[2]

    v32, v16 = jax.jit(run)(variables)
    assert v16.dtype == jnp.float32
    err = float(jnp.max(jnp.abs(v16 - v32)))
    assert 0 < err < 0.05 * float(jnp.max(jnp.abs(v32))), err  # bf16 really ran, and stayed close


@pytest.mark.parametrize("kw, field", [
    (dict(action_head="tokens"), "model.action_head"),
    (dict(fp8="flax"), "model.fp8"),
    (dict(attention="cudnn"), "model.attention"),
    (dict(siglip_variant="Huge/14"), "model.siglip_variant"),
    (dict(image_size=30), "model.siglip_variant"),
    (dict(paligemma_variant="gemma_2b"), "model.paligemma_variant"),
])
def test_config_refusals(kw, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        tiny("pi0", **kw)


def test_param_logical_names_are_in_the_rules(setup):
    from vlajax.config.schema import LOGICAL_RULES  # noqa: PLC0415

    cfg, model, obs, _ = setup
    boxed = jax.eval_shape(model.init, jax.random.key(0), obs)["params"]
    known = {name for name, _ in LOGICAL_RULES["fsdp_tp_sp"]}
    leaves = jax.tree.leaves(boxed, is_leaf=lambda x: hasattr(x, "names"))
    assert leaves and all(hasattr(x, "names") for x in leaves)  # every leaf is named
    for x in leaves:
        assert len(x.names) == len(x.value.shape) and set(x.names) - {None} <= known, x.names


def test_lora_equals_merged_weights():
    """LoRA factors (openpi's shapes and equations) act as W + A B; the attention output's B is summed
    over heads, as openpi's einsum equations do."""
    cfg = tiny("pi05", lora_rank=2, expert_lora_rank=3)
    base_cfg = tiny("pi05")
    obs = fake_observation(jax.random.key(0), B, cfg)
    model, base = build_model(cfg), build_model(base_cfg)
    x, t = jax.random.normal(jax.random.key(1), (B, cfg.action_horizon, cfg.action_dim)), jnp.full((B,), 0.4)

    def run(key):
        v = jax.tree.map(lambda a: a + 0.05 * jax.random.normal(key, a.shape), nn.unbox(model.init(key, obs)))
        layers = dict(v["params"]["llm"]["layers"])
        merged = {}
        for e, r in (("e0", 2), ("e1", 3)):
            i, o = dict(layers[f"{e}_in"]), dict(layers[f"{e}_out"])
            assert i["q_lora_a"].shape[-1] == r and i["q_lora_b"].shape[-2] == r
            i["q"] = i["q"] + jnp.einsum("lnwr,lnrh->lnwh", i.pop("q_lora_a"), i.pop("q_lora_b"))
            i["kv"] = i["kv"] + jnp.einsum("lckwr,lckrh->lckwh", i.pop("kv_lora_a"), i.pop("kv_lora_b"))
            o["o"] = o["o"] + jnp.einsum("lnhr,lrd->lnhd", o.pop("o_lora_a"), o.pop("o_lora_b").sum(1))
            o["gate_up"] = o["gate_up"] + jnp.einsum("lcwr,lcrm->lcwm", o.pop("gate_up_lora_a"),
                                                     o.pop("gate_up_lora_b"))
            o["down"] = o["down"] + jnp.einsum("lmr,lrw->lmw", o.pop("down_lora_a"), o.pop("down_lora_b"))
            merged[f"{e}_in"], merged[f"{e}_out"] = i, o
        params = {**v["params"], "llm": {**v["params"]["llm"], "layers": merged}}
        return (model.apply(v, obs, x, t, method="joint")[2],
                base.apply({"params": params}, obs, x, t, method="joint")[2],
                base.apply({"params": {**v["params"], "llm": {**v["params"]["llm"], "layers": {
                    k: {n: w for n, w in d.items() if "lora" not in n} for k, d in layers.items()}}}},
                    obs, x, t, method="joint")[2])

    with jax.default_matmul_precision("highest"):
        lora, merged, without = jax.jit(run)(jax.random.key(2))
    np.testing.assert_allclose(np.asarray(lora), np.asarray(merged), atol=2e-5)
    assert float(jnp.max(jnp.abs(lora - without))) > 1e-3  # the factors mattered


def test_lora_ranks_refused_for_vla():
    with pytest.raises(ConfigError, match="model.lora_rank"):
        ModelConfig(lora_rank=4)


def test_full_size_layout_matches_openpi():
    """openpi's full pi0.5 (PaliGemma gemma_2b + gemma_300m expert, SigLIP So400m/14 at 224): every
    one of our leaves is an openpi leaf (none fresh) with openpi's shape (eval_shape only)."""
    from vlajax.models.openpi import openpi_params  # noqa: PLC0415

    cfg = ModelConfig(name="pi05-full", family="pi05", image_size=224, num_cameras=3, vocab_size=257_152,
                      max_text_len=200, action_dim=32, action_horizon=10, dtype="bfloat16")
    obs = jax.eval_shape(lambda k: fake_observation(k, 1, cfg), jax.random.key(0))
    shapes = jax.eval_shape(build_model(cfg).init, jax.random.key(0), obs)["params"]
    assert openpi_params.fresh_only(cfg, shapes) == []
    ours = {k: tuple(v.shape) for k, v in openpi_params.flatten(shapes).items()}
    openpi = {  # from openpi's gemma.get_config / siglip.decode_variant sizes and its param shapes
        "PaliGemma/llm/embedder/input_embedding": (257_152, 2048),
        "PaliGemma/llm/layers/attn/q_einsum/w": (18, 8, 2048, 256),
        "PaliGemma/llm/layers/attn/kv_einsum_1/w": (18, 2, 1, 1024, 256),
        "PaliGemma/llm/layers/mlp/gating_einsum": (18, 2, 2048, 16_384),
        "PaliGemma/llm/layers/mlp_1/linear": (18, 4096, 1024),
        "PaliGemma/llm/layers/pre_ffw_norm_1/Dense_0/kernel": (18, 1024, 3072),
        "PaliGemma/img/embedding/kernel": (14, 14, 3, 1152),
        "PaliGemma/img/pos_embedding": (1, 256, 1152),
        "PaliGemma/img/Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel": (27, 1152, 16, 72),
        "PaliGemma/img/Transformer/encoderblock/MlpBlock_0/Dense_0/kernel": (27, 1152, 4304),
        "PaliGemma/img/head/kernel": (1152, 2048),
        "time_mlp_in/kernel": (1024, 1024),
        "action_out_proj/kernel": (1024, 32),
    }
    table = openpi_params.path_table(cfg)
    for p, shape in openpi.items():
        assert ours[table[p]] == shape, (p, ours[table[p]], shape)
    assert 3.3e9 < sum(int(np.prod(s)) for s in ours.values()) < 3.4e9  # PaliGemma 3B + the 0.3B expert


def test_remat_and_lora_gradients_trace():
    """cfg.remat wraps the scanned blocks (SigLIP and Gemma) in jax.checkpoint; with LoRA the
    factors get gradients of their own shapes (traced with eval_shape: nothing compiles)."""
    cfg = tiny("pi0", remat=True, lora_rank=2, expert_lora_rank=2)
    model = build_model(cfg)
    obs = fake_observation(jax.random.key(0), B, cfg)
    shapes = jax.eval_shape(model.init, jax.random.key(1), obs)
    actions = jnp.zeros((B, cfg.action_horizon, cfg.action_dim))
    grads = jax.eval_shape(jax.grad(lambda v: heads.flow_loss(model, v, obs, actions, jax.random.key(2))[0]),
                           nn.unbox(shapes))
    g = grads["params"]["llm"]["layers"]
    assert g["e1_out"]["down_lora_b"].shape == (4, 2, 64) and g["e0_in"]["q_lora_a"].shape == (4, 8, 64, 2)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda v: heads.flow_loss(model, v, obs, actions, jax.random.key(2))[0]))(
        jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), nn.unbox(shapes))))
    assert "remat" in jaxpr  # (absent from the same jaxpr with cfg.remat=False)


def test_flow_noise_sampler_and_prefix_value_trace():
    """flow_sampler='flow_noise' (a learned per-step std on the expert) and value_head='prefix'
    build and trace for a pi family (eval_shape: nothing compiles)."""
    cfg = tiny("pi05", flow_sampler="flow_noise", value_head="prefix")
    model = build_model(cfg)
    obs = fake_observation(jax.random.key(0), B, cfg)
    variables = nn.unbox(jax.eval_shape(model.init, jax.random.key(1), obs))
    assert {"noise_std", "value_hidden", "value_out"} <= set(variables["params"])
    sample = jax.eval_shape(lambda v: heads.flow_sample(model, v, obs, jax.random.key(2)), variables)
    lp = jax.eval_shape(lambda v, c: heads.flow_chain_log_prob(model, v, obs, c), variables, sample.chain)
    assert sample.chain.shape == (B, cfg.num_denoise_steps + 1, cfg.action_horizon, cfg.action_dim)
    assert lp["log_prob"].shape == (B,) and sample.value.shape == (B,)


@pytest.mark.parametrize("ranks", [(2, 0), (0, 3)])
def test_trainable_lora_freezes_the_adapted_experts_gemma_weights(ranks):
    """model.trainable='lora' (openpi's LoRA freeze filter): the Gemma weights of an expert with LoRA
    factors are frozen, its factors train, everything else trains."""
    from vlajax.models.openpi.openpi_params import flatten  # noqa: PLC0415
    from vlajax.training.trainable import trainable_mask  # noqa: PLC0415

    cfg = tiny("pi05", lora_rank=ranks[0], expert_lora_rank=ranks[1], trainable="lora")
    obs = fake_observation(jax.random.key(0), B, cfg)
    params = nn.unbox(jax.eval_shape(build_model(cfg).init, jax.random.key(1), obs))["params"]
    mask = flatten(trainable_mask(params, cfg.family, cfg.trainable))
    adapted = "e0" if ranks[0] else "e1"
    other = "e1" if ranks[0] else "e0"
    assert not mask[f"llm/layers/{adapted}_in/q"] and not mask[f"llm/layers/{adapted}_out/down"]
    assert mask[f"llm/layers/{adapted}_in/q_lora_a"] and mask[f"llm/layers/{adapted}_out/down_lora_b"]
    assert mask[f"llm/layers/{other}_in/q"] and mask[f"llm/layers/{other}_out/gate_up"]
    assert mask["llm/embed"] == (adapted == "e1") and mask["llm/final_norms_0/scale"] == (adapted == "e1")
    assert mask["vision/patch/kernel"] and mask["action_in/kernel"] and mask["time_mlp_in/kernel"]


def test_trainable_lora_needs_lora_factors():
    with pytest.raises(ConfigError, match="model.trainable='lora' is not available without LoRA factors"):
        tiny("pi0", trainable="lora")
    with pytest.raises(ConfigError, match="model.trainable='lora' is not available"):
        ModelConfig(trainable="lora")
