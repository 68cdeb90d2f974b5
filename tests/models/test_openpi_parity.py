"""pi0 / pi0.5 compute what openpi's `Pi0` computes: the shared reference data (fp32, max abs err <= 1e-4).

The fixtures (`<repo>/../shared/fixtures/openpi/{pi0,pi05}`, see its README) hold an openpi-layout
params tree and, for fixed inputs, openpi's outputs. Each test maps the tree to our layout with
`openpi_params.from_openpi` and compares every output.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ModelConfig
from vlajax.models import Observation, build_model

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "openpi"
TOL = 1e-4


def fixture_config(meta: dict, **kw) -> ModelConfig:
    """The ModelConfig of a fixture's meta.json."""
    sig = meta["siglip"]
    return ModelConfig(
        name=f"{meta['family']}-fixture", family=meta["family"], paligemma_variant=meta["paligemma_variant"],
        action_expert_variant=meta["action_expert_variant"], siglip_variant=sig["variant"],
        siglip_depth=sig["depth"], vocab_size=meta["vocab_size"], max_text_len=meta["max_token_len"],
        action_dim=meta["action_dim"], action_horizon=meta["action_horizon"],
        image_size=meta["image_resolution"][0], num_cameras=len(meta["image_keys"]),
        num_denoise_steps=meta["sample_actions"]["num_steps"], **kw)


def fixture_observation(io, keys) -> Observation:
    """openpi's inputs as our Observation (images back to [0, 1])."""
    return Observation(
        images={k: jnp.asarray((io[f"obs/image/{k}"] + 1.0) / 2.0) for k in keys},
        image_masks={k: jnp.asarray(io[f"obs/image_mask/{k}"]) for k in keys},
        tokens=jnp.asarray(io["obs/tokenized_prompt"]), token_mask=jnp.asarray(io["obs/tokenized_prompt_mask"]),
        state=jnp.asarray(io["obs/state"]))


def load_fixture(family: str):
    """-> (meta, io, openpi params tree as host arrays) of one fixture folder."""
    from vlajax.policies.import_openpi import read_params  # noqa: PLC0415

    d = FIXTURES / family
    meta = json.loads((d / "meta.json").read_text())
    io = dict(np.load(d / "io.npz"))
    return meta, io, read_params(str(d.resolve()))


def _err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"openpi reference data not present ({FIXTURES})")
@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_parity_with_openpi(family):
    from vlajax.models.openpi import openpi_params  # noqa: PLC0415

    if not (FIXTURES / family).is_dir():  # a partial copy (the GPU check carries openpi/policies alone)
        pytest.skip(f"openpi reference data for {family} not present ({FIXTURES / family})")
    meta, io, tree = load_fixture(family)
    cfg = fixture_config(meta)
    model = build_model(cfg)
    obs = fixture_observation(io, meta["image_keys"])
    fresh = jax.eval_shape(model.init, jax.random.key(0), obs)["params"]
    variables = {"params": openpi_params.from_openpi(tree, cfg, fresh)}
    x_t, t, noise = jnp.asarray(io["x_t"]), jnp.asarray(io["t"]), jnp.asarray(io["noise"])
    h, k_steps = cfg.action_horizon, cfg.num_denoise_steps

    def run(v, obs, x_t, t, noise):
        emb, mask = model.apply(v, obs, method="embed_prefix")
        _, cache = model.apply(v, obs, method="prefix")
        suffix, _, _ = model.apply(v, cache, x_t, t, method="embed_suffix")
        prefix_hidden, suffix_hidden, v_joint = model.apply(v, obs, x_t, t, method="joint")
        v_cached = model.apply(v, cache, x_t, t, method="velocity")[0]

        def euler(k, x):  # openpi's sampler: x <- x + dt v(x, t), t from 1 down to 1/K
            tt = jnp.full((x.shape[0],), 1.0 - k / k_steps)
            return x - model.apply(v, cache, x, tt, method="velocity")[0] / k_steps

        actions = jax.lax.fori_loop(0, k_steps, euler, noise)
        return dict(prefix_tokens=emb, prefix_mask=mask, suffix_tokens=suffix, prefix_hidden=prefix_hidden,
                    suffix_hidden=suffix_hidden, v_joint=v_joint, v_cached=v_cached, actions=actions)

    with jax.default_matmul_precision("highest"):
        out = jax.jit(run)(variables, obs, x_t, t, noise)
    p = io["out/prefix_tokens"].shape[1]
    assert cfg.prefix_len >= p and not np.asarray(out["prefix_mask"][:, p:]).any()  # padding only
    np.testing.assert_array_equal(np.asarray(out["prefix_mask"][:, :p]), io["out/prefix_mask"])
    errs = {
        "prefix_tokens": _err(out["prefix_tokens"][:, :p], io["out/prefix_tokens"]),
        "suffix_tokens": _err(out["suffix_tokens"], io["out/suffix_tokens"]),
        "prefix_hidden": _err(out["prefix_hidden"][:, :p], io["out/prefix_hidden"]),
        "suffix_hidden": _err(out["suffix_hidden"], io["out/suffix_hidden"]),
        "v_t (joint pass)": _err(out["v_joint"], io["out/v_t"]),
        "v_t (prefix KV cache)": _err(out["v_cached"], io["out/v_t"]),
        "actions_10_steps": _err(out["actions"], io["out/actions_10_steps"]),
    }
    assert out["v_cached"].shape == (io["x_t"].shape[0], h, cfg.action_dim)  # the batch the reference data has
    print(f"{family} max abs error vs openpi:", {k: f"{v:.1e}" for k, v in errs.items()})  # pytest -s shows it
    assert max(errs.values()) <= TOL, errs
