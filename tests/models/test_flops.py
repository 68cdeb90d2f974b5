"""`vlajax.models.flops` against XLA's own count (HloCostAnalysis) of the functions the SFT step and the
sampler run, within 10%: sft-small, the π0 dummy, and π0 at openpi's widths (gemma_2b + gemma_300m,
SigLIP So400m/14) at one layer.

The π layers are one `nn.scan` and XLA counts a loop's body once, so the π configs are checked at one
layer (the count is linear in depth). The default tests read `Lowered.cost_analysis()` (the same
analysis on the module before XLA's optimizations: no compile, seconds); the slow test reads the compiled
module's, `lower(...).compile().cost_analysis()`."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import pytest
from flax import linen as nn

import vlajax.config.presets  # noqa: F401  (registers the presets)
from vlajax.bench.gpu_check_rows import synthetic_batch
from vlajax.config.schema import get_config
from vlajax.data.openpi import is_pi, model_slots
from vlajax.models import build_model, flops
from vlajax.policies.memory import reduced_depth
from vlajax.policies.run_files import init_fn
from vlajax.sft import loop as sft

B = 2


def _config(name: str):
    """The preset; π configs at one layer, without rematerialization (its recomputed forward is not a model
    FLOP: XLA counts it, +23% on π0's training step at one layer)."""
    cfg = get_config("pi0" if name == "pi0@1" else name)
    if not is_pi(cfg.model):
        return cfg
    cfg = reduced_depth(cfg, 1)
    return cfg.replace(model=dataclasses.replace(cfg.model, remat=False))


@functools.cache
def _setup(name: str):
    cfg = _config(name)
    m = cfg.model
    cams = model_slots(m) if is_pi(m) else tuple(sorted(cfg.env.cameras))
    params = nn.unbox(jax.eval_shape(init_fn(cfg, cams), jax.random.key(0)).params)  # shapes only
    batch = jax.tree.map(jnp.asarray, synthetic_batch(m, cams, B, 0))
    return m, build_model(m), params, batch, len(cams)


def _xla(fn, *args, compiled: bool = False) -> float:
    lowered = jax.jit(fn).lower(*args)
    return float((lowered.compile() if compiled else lowered).cost_analysis()["flops"])


def _train(model, params, batch):
    return jax.value_and_grad(lambda p: sft.loss_fn(p, model, batch, jax.random.key(1))[0])(params)


@pytest.mark.parametrize("name", ["sft-small", "pi0-dummy", "pi0@1"])
def test_training_flops_per_sample_match_xla(name):
    m, model, params, batch, cams = _setup(name)
    xla = _xla(lambda p, b: _train(model, p, b), params, batch) / B
    assert flops.train_sample(m, cams) == pytest.approx(xla, rel=0.10), (flops.train_sample(m, cams), xla)


@pytest.mark.parametrize("name", ["sft-small", "pi0@1"])
def test_decision_parts_match_xla(name):
    """A decision is the prefix once and the head per denoise step: each part against XLA's count."""
    m, model, params, batch, cams = _setup(name)
    obs = sft.batch_observation(batch)
    f = flops.forward(m, cams, prefix_hidden=False)
    prefix = _xla(lambda p, o: model.apply({"params": p}, o, method="prefix")[1], params, obs) / B
    assert f["vision"] + f["prefix"] == pytest.approx(prefix, rel=0.10), (f, prefix)
    cache = jax.eval_shape(lambda p, o: model.apply({"params": p}, o, method="prefix")[1], params, obs)
    x = jnp.zeros((B, m.action_horizon, m.action_dim))
    head = _xla(lambda p, c, x: model.apply({"params": p}, c, x, jnp.ones((B,)), method="velocity")[0],
                params, cache, x) / B
    assert f["head"] == pytest.approx(head, rel=0.10), (f, head)
    steps = m.num_denoise_steps
    assert flops.decision(m, cams) == pytest.approx(f["vision"] + f["prefix"] + steps * f["head"] + f["value"])


def test_peak_table_and_mfu():
    assert flops.peak_flops("NVIDIA H200") == 989e12 and flops.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.peak_flops("NVIDIA H100 PCIe") == 756e12 and flops.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert flops.peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None and flops.peak_flops("cpu") is None
    assert flops.mfu(494.5e12, "NVIDIA H200") == pytest.approx(0.5) and flops.mfu(1e12, "TFRT_CPU_0") is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sft-small", "pi0-dummy", "pi0@1"])
def test_training_flops_match_the_compiled_module(name):
    m, model, params, batch, cams = _setup(name)
    xla = _xla(lambda p, b: _train(model, p, b), params, batch, compiled=True) / B
    assert flops.train_sample(m, cams) == pytest.approx(xla, rel=0.10), (flops.train_sample(m, cams), xla)
