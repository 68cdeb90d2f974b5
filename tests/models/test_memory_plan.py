"""The memory planner (vlajax.policies.memory) against XLA, and golden partition specs for pi05.

Compiled check: the SFT train step (`sft.make_train_step`: loss, grads, AdamW, EMA) of a reduced
π0.5 (pi05-dummy widths, 1 SigLIP block, remat on and EMA on as the full `pi05` preset) compiled
on mesh (8, 1, 1) with global batch 16. Compared per device: XLA's argument + temp bytes
(`compiled.memory_analysis()`: the train state and batch passed in, plus everything the step
allocates: gradients, activations kept for the backward pass, optimizer temporaries) against the
planner's params + optimizer + EMA + grads + activations (activations include the batch).
"""

import dataclasses
import json
import os
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from vlajax.bench import memory as bench_memory
from vlajax.config.schema import GEMMA_VARIANTS, MeshConfig, get_config
from vlajax.data.openpi import model_slots
from vlajax.models import build_model
from vlajax.models.observation import fake_observation
from vlajax.policies import memory
from vlajax.sft import loop as sft
from vlajax.training import sharding

GOLDEN = pathlib.Path(__file__).parent / "golden"
MESHES = [(8, 1, 1), (2, 2, 2), (2, 4, 1), (1, 8, 1)]
RULES = MeshConfig().logical_rules


def _unbox(tree):
    box = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    return jax.tree.map(lambda x: x.value if box(x) else x, tree, is_leaf=box)


def _batch(m, b: int) -> dict:
    """The abstract loader batch of a π model (fixed batching)."""
    s = jax.ShapeDtypeStruct
    cams, h, n = model_slots(m), m.action_horizon, m.image_size
    return {"images": {c: s((b, n, n, 3), jnp.uint8) for c in cams},
            "image_masks": {c: s((b,), jnp.bool_) for c in cams},
            "tokens": s((b, m.max_text_len), jnp.int32), "token_mask": s((b, m.max_text_len), jnp.bool_),
            "state": s((b, m.state_dim), jnp.float32), "actions": s((b, h, m.action_dim), jnp.float32),
            "action_mask": s((b, h), jnp.bool_), "sample_mask": s((b,), jnp.bool_),
            "segment_ids": s((b, 1), jnp.int32)}


@pytest.mark.devices(8)
def test_planner_matches_compiled_sft_step_within_20_percent():
    cfg = get_config("pi05-dummy")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, siglip_depth=1, remat=True),
                              sft=dataclasses.replace(cfg.sft, ema_decay=0.999),
                              data=dataclasses.replace(cfg.data, batch_size=16), mesh=MeshConfig(dp=8))
    batch = cfg.data.batch_size
    mesh = sharding.make_mesh(cfg.mesh)
    state = memory.abstract_state(cfg)
    shardings = sharding.tree_shardings(state, mesh, RULES)
    step = sft.make_train_step(build_model(cfg.model), 1, cfg.sft.ema_decay, shardings, mesh)
    with sharding.use_mesh(mesh, RULES):
        compiled = step.lower(_unbox(state), _batch(cfg.model, batch)).compile()
    ma = compiled.memory_analysis()
    measured = ma.argument_size_in_bytes + ma.temp_size_in_bytes
    plan = memory.plan(cfg, 8, batch, state)
    print(f"\nplanner {plan['total']:,} B (activations {plan['activations']:,}) vs XLA argument + temp "
          f"{measured:,} B ({ma.argument_size_in_bytes:,} + {ma.temp_size_in_bytes:,}): "
          f"ratio {plan['total'] / measured:.3f}")
    assert plan["mesh"] == (8, 1, 1) and plan["ema"] == plan["params"] > 0
    assert plan["activations"] > plan["params"]  # the check is about activations, not a state-dominated total
    assert abs(plan["total"] - measured) <= 0.2 * measured, (plan, measured)


@pytest.mark.parametrize(("family", "batch", "depth"), [
    ("pi0", 4, 2), ("pi05", 4, 2),
    *(pytest.param(*c, marks=pytest.mark.slow) for c in [("pi0", 8, 2), ("pi0", 16, 2), ("pi0", 4, 4)]),
])
def test_activation_estimate_matches_xla_at_openpi_widths_within_10_percent(family, batch, depth):
    """openpi's real widths (PaliGemma gemma_2b 2048 + gemma_300m expert 1024, SigLIP So400m/14, 257,152-piece
    vocabulary, bf16 compute, remat as the preset) at depth 2 (`memory.reduced_depth`), global batch 4 on one
    device (slow: batch 8, 16, depth 4): the gradient of the SFT loss (`sft.loss_fn`) compiled; XLA's temp
    bytes (what the backward pass keeps plus its scratch; params and batch are arguments, grads the output)
    against the planner's activations less the batch."""
    cfg = memory.reduced_depth(get_config(family), depth)
    cfg = cfg.replace(mesh=MeshConfig(dp=1), data=dataclasses.replace(cfg.data, batch_size=batch))
    m = cfg.model
    assert (GEMMA_VARIANTS[m.paligemma_variant]["width"], GEMMA_VARIANTS[m.action_expert_variant]["width"]) == \
        (2048, 1024) and m.siglip["width"] == 1152 and m.siglip["depth"] == depth and m.vocab_size == 257_152
    state = memory.abstract_state(cfg)
    model = build_model(m)
    grad = jax.jit(jax.value_and_grad(lambda p, b: sft.loss_fn(p, model, b, jax.random.key(0))[0]))
    ma = grad.lower(_unbox(state.params), _batch(m, batch)).compile().memory_analysis()
    act = memory.activation_bytes(cfg, batch, (1, 1, 1))
    estimate = act["total"] - act["batch"]
    error = estimate / ma.temp_size_in_bytes - 1
    print(f"\n{family} depth {depth} batch {batch}: planner activations {estimate:,} B "
          f"({', '.join(f'{k} {v:,}' for k, v in act.items() if k not in ('batch', 'total'))}) vs XLA temp "
          f"{ma.temp_size_in_bytes:,} B: {100 * error:+.1f}%")
    assert act["gemma prefix"] > act["siglip"] > 0  # the check is about the real-width towers
    assert abs(error) <= 0.10, (estimate, ma.temp_size_in_bytes)


def test_remat_plans_fewer_activation_bytes_and_scales_with_devices():
    cfg = get_config("pi05")
    no_remat = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, remat=False))
    a = memory.activation_bytes(cfg, 256, (8, 1, 1))["total"]
    b = memory.activation_bytes(no_remat, 256, (8, 1, 1))["total"]
    assert a < b / 4
    assert memory.activation_bytes(cfg, 256, (64, 1, 1))["total"] * 8 == pytest.approx(a, rel=0.01)


def test_pi05_vit_unsplit_at_256_flat_but_split_with_tp2():
    """SigLIP So400m has no dim divisible by 256: the plan names it; the (128, 2, 1) mesh splits everything."""
    cfg = get_config("pi05")
    state = memory.abstract_state(cfg)
    flat = memory.plan(cfg, 256, 256, state)
    assert flat["mesh"] == (256, 1, 1) and any(m.startswith("vision/") for m in flat["unsplit_modules"])
    assert memory.plan(cfg, 64, 256, state)["unsplit_modules"] == []
    tp2 = dataclasses.replace(cfg, mesh=MeshConfig(tp=2))
    split = memory.plan(tp2, 256, 256, state)
    assert split["mesh"] == (128, 2, 1) and split["unsplit_modules"] == []
    assert split["params"] < flat["params"] / 10


def test_siglip_shards_at_64_devices_and_more():
    """docs/sharding.md: dp splits SigLIP So400m's width while dp divides 1152 (64, 128); past that tp takes the rest
    ((128, 2), (128, 4), (128, 8)); (256, 2) / (512, 2) / (256, 8) leave it replicated over dp."""
    cfg = get_config("pi05")
    state = memory.abstract_state(cfg)
    vision = lambda p: [m for m in p["unsplit_modules"] if m.startswith("vision/")]  # noqa: E731
    for devices, tp, split in [(64, 1, True), (128, 1, True), (256, 2, True), (512, 4, True), (1024, 8, True),
                               (512, 2, False), (1024, 4, False), (2048, 8, False)]:
        p = memory.plan(dataclasses.replace(cfg, mesh=MeshConfig(tp=tp)), devices, devices, state)
        assert p["mesh"] == (devices // tp, tp, 1)
        assert (vision(p) == []) == split, (devices, tp, vision(p))


def test_cli_refuses_before_building():
    assert bench_memory.main(["--preset", "pi05", "--devices", "8", "--batch", "3"]) == 2
    assert bench_memory.main(["--batch", "8"]) == 2
    assert bench_memory.main(["--preset", "pi06"]) == 2


def _pi05_params():
    m = get_config("pi05").model
    model = build_model(m)
    return jax.eval_shape(lambda r: model.init(r, fake_observation(r, 1, m, cameras=model_slots(m))),
                          jax.random.key(0))


@pytest.mark.devices(8)
def test_pi05_golden_partition_specs():
    """Every pi05 parameter's PartitionSpec on the four 8-device meshes; VLAJAX_UPDATE_GOLDEN=1 rewrites."""
    abstract = _pi05_params()
    for shape in MESHES:
        mesh = sharding.make_mesh(MeshConfig(dp=shape[0], tp=shape[1], sp=shape[2]))
        flat = sharding.partition_specs_summary(sharding.tree_shardings(abstract, mesh, RULES), abstract)
        got = {k: {"spec": [list(a) if isinstance(a, tuple) else a for a in spec], "shape": list(shp)}
               for k, (spec, shp) in sorted(flat.items())}
        path = GOLDEN / f"pi05_{'x'.join(map(str, shape))}.json"
        if os.environ.get("VLAJAX_UPDATE_GOLDEN"):
            lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in got.items()]
            path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        want = json.loads(path.read_text())
        assert got.keys() == want.keys(), f"{path.name}: parameter set changed"
        diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        assert not diff, f"{path.name}: {len(diff)} specs changed, e.g. {next(iter(diff.items()))}"
