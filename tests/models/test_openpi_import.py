"""`vlajax.policies.import_openpi`: the shared openpi-layout trees become vlajax run directories;
renamed, missing, reshaped and LoRA leaves are refused by name; openpi's norm stats are carried."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, TrainConfig

from .test_openpi_parity import FIXTURES, fixture_config, load_fixture

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"openpi reference data not present ({FIXTURES})")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from vlajax.models import sp_tokenizer  # noqa: PLC0415

    return sp_tokenizer.train_tiny_model(str(tmp_path_factory.mktemp("sp") / "t.model"),
                                         ["pick up the red cube", "press the button"])


def _cfg(meta, tokenizer) -> TrainConfig:
    return TrainConfig(model=dataclasses.replace(fixture_config(meta), tokenizer_path=tokenizer))


def _flat(tree) -> dict:
    from vlajax.models.openpi.openpi_params import flatten  # noqa: PLC0415

    return flatten(tree)


def _write_tree(tmp_path, flat: dict) -> str:
    """An openpi-style checkpoint dir holding `{"params": tree}` at <dir>/params."""
    import flax  # noqa: PLC0415
    import orbax.checkpoint as ocp  # noqa: PLC0415

    d = tmp_path / "openpi_ckpt"
    tree = {"params": flax.traverse_util.unflatten_dict({tuple(k.split("/")): np.asarray(v) for k, v in flat.items()})}
    ocp.PyTreeCheckpointer().save(str(d / "params"), tree)
    return str(d)


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_fixture_trees_import(family, tokenizer, tmp_path):
    """pi0 through the command line with the pi0-dummy preset, pi05 through the function with the
    fixture's own config; both read back with `vlajax.policies.run_files.load_policy`."""
    from vlajax.config.schema import get_config  # noqa: PLC0415
    from vlajax.models.openpi import Pi0  # noqa: PLC0415
    from vlajax.models.openpi.openpi_params import path_table  # noqa: PLC0415
    from vlajax.policies.import_openpi import import_checkpoint, main  # noqa: PLC0415
    from vlajax.policies.run_files import load_policy  # noqa: PLC0415

    meta, _, tree = load_fixture(family)
    theirs = _flat(tree)
    ckpt_dir = _write_tree(tmp_path, theirs)
    dims = {"state": 8, "actions": 7}  # openpi stores stats at the robot's widths
    stats = {k: {"mean": list(np.arange(n) * 0.1), "std": [2.0] * n, "q01": [-3.0] * n, "q99": [3.0] * n}
             for k, n in dims.items()}
    os.makedirs(os.path.join(ckpt_dir, "assets", "my_robot"))
    with open(os.path.join(ckpt_dir, "assets", "my_robot", "norm_stats.json"), "w") as f:
        json.dump({"norm_stats": stats}, f)

    out = str(tmp_path / "imported")
    if family == "pi0":
        cfg = get_config("pi0-dummy")
        cfg = cfg.replace(model=dataclasses.replace(cfg.model, tokenizer_path=tokenizer))
        assert main(["--checkpoint", ckpt_dir, "--config", "pi0-dummy", "--out", out, "--tokenizer", tokenizer]) == 0
    else:
        cfg = _cfg(meta, tokenizer)
        summary = import_checkpoint(ckpt_dir, cfg, out)
        assert summary["openpi_leaves"] == len(theirs) == len(meta["param_leaves"])
        assert summary["norm_stats"].endswith("my_robot/norm_stats.json") and summary["fresh_leaves"] == []
    bridge, model, params, train_cfg, step = load_policy(out, cfg)
    assert train_cfg.model == cfg.model and step == 0 and isinstance(model, Pi0)
    assert bridge.model.family == family
    np.testing.assert_allclose(bridge.norm["state"].mean, np.arange(8) * 0.1, rtol=1e-6)
    np.testing.assert_allclose(bridge.norm["actions"].q99, [3.0] * 7)
    ours = _flat(params)
    for p, q in path_table(cfg.model).items():
        np.testing.assert_array_equal(np.asarray(ours[q]), np.asarray(theirs[p]), err_msg=p)
    with pytest.raises(ConfigError, match="not empty"):
        import_checkpoint(ckpt_dir, cfg, out)


def _import_modified(tmp_path, tokenizer, edit):
    from vlajax.policies.import_openpi import import_checkpoint  # noqa: PLC0415

    meta, _, tree = load_fixture("pi0")
    flat = _flat(tree)
    edit(flat)
    ckpt_dir = _write_tree(tmp_path, flat)
    out = tmp_path / "out"
    with pytest.raises(ValueError) as e:
        import_checkpoint(ckpt_dir, _cfg(meta, tokenizer), str(out))
    assert not out.exists() or not os.listdir(out)  # refused before writing anything
    return str(e.value)


def test_renamed_leaf_is_named(tmp_path, tokenizer):
    def rename(flat):
        flat["PaliGemma/llm/layers/mlp_1/linear_v2"] = flat.pop("PaliGemma/llm/layers/mlp_1/linear")

    msg = _import_modified(tmp_path, tokenizer, rename)
    assert "PaliGemma/llm/layers/mlp_1/linear_v2 [4, 128, 64]" in msg  # left over, with its shape
    assert "missing from the checkpoint: PaliGemma/llm/layers/mlp_1/linear [4, 128, 64]" in msg


def test_missing_leaf_is_named(tmp_path, tokenizer):
    msg = _import_modified(tmp_path, tokenizer, lambda flat: flat.pop("state_proj/kernel"))
    assert "missing from the checkpoint: state_proj/kernel [32, 64]" in msg
    assert "not in a pi0 model" not in msg


def test_shape_mismatch_names_both_shapes(tmp_path, tokenizer):
    def reshape(flat):
        flat["action_out_proj/kernel"] = np.zeros((64, 16), np.float32)

    msg = _import_modified(tmp_path, tokenizer, reshape)
    assert "action_out_proj/kernel [64, 16] vs action_out/kernel [64, 32]" in msg


def test_lora_leaves_are_refused_by_name(tmp_path, tokenizer):
    def add_lora(flat):
        flat["PaliGemma/llm/layers/attn/q_einsum/lora_a"] = np.zeros((4, 8, 64, 16), np.float32)

    msg = _import_modified(tmp_path, tokenizer, add_lora)
    assert "LoRA" in msg and "PaliGemma/llm/layers/attn/q_einsum/lora_a [4, 8, 64, 16]" in msg


def test_cli_errors_are_one_line(tmp_path, capsys):
    from vlajax.policies.import_openpi import main  # noqa: PLC0415

    assert main(["--checkpoint", str(tmp_path), "--config", "no-such-preset", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: --config 'no-such-preset' is neither an openpi train config")
    shutil.rmtree(tmp_path / "o", ignore_errors=True)
    assert main(["--checkpoint", str(tmp_path), "--config", "debug", "--out", str(tmp_path / "o")]) == 2
    assert "nor a vlajax π preset" in capsys.readouterr().err


def test_openpi_lora_leaves_map_when_the_ranks_are_set():
    from vlajax.models import build_model, fake_observation  # noqa: PLC0415
    from vlajax.models.openpi import openpi_params  # noqa: PLC0415

    meta, _, tree = load_fixture("pi0")
    flat = _flat(tree)
    llm, rng = "PaliGemma/llm/layers/", np.random.default_rng(0)
    lora = {  # openpi's LoRA factor shapes for the VLM (expert 0) at rank 2
        "attn/q_einsum/lora_a": (4, 8, 64, 2), "attn/q_einsum/lora_b": (4, 8, 2, 16),
        "attn/kv_einsum/lora_a": (4, 2, 1, 64, 2), "attn/kv_einsum/lora_b": (4, 2, 1, 2, 16),
        "attn/attn_vec_einsum/lora_a": (4, 8, 16, 2), "attn/attn_vec_einsum/lora_b": (4, 8, 2, 64),
        "mlp/gating_einsum_lora_a": (4, 2, 64, 2), "mlp/gating_einsum_lora_b": (4, 2, 2, 128),
        "mlp/linear_lora_a": (4, 128, 2), "mlp/linear_lora_b": (4, 2, 64),
    }
    flat.update({llm + k: rng.normal(size=s).astype(np.float32) for k, s in lora.items()})
    cfg = dataclasses.replace(fixture_config(meta), lora_rank=2, expert_lora_rank=3)
    obs = fake_observation(jax.random.key(0), 1, cfg, cameras=tuple(meta["image_keys"]))
    fresh = jax.eval_shape(build_model(cfg).init, jax.random.key(0), obs)["params"]
    ours = _flat(openpi_params.from_openpi(flat, cfg, fresh))
    np.testing.assert_array_equal(ours["llm/layers/e0_in/q_lora_a"], flat[llm + "attn/q_einsum/lora_a"])
    np.testing.assert_array_equal(ours["llm/layers/e0_out/down_lora_b"], flat[llm + "mlp/linear_lora_b"])
    # the expert's factors are not in this checkpoint: they keep their initialisation
    assert openpi_params.fresh_only(cfg, fresh, flat) == sorted(
        f"llm/layers/e1_{io}/{n}_lora_{f}" for io, names in (("in", ("q", "kv")), ("out", ("o", "gate_up", "down")))
        for n in names for f in "ab")
    bad = dataclasses.replace(cfg, lora_rank=4)
    with pytest.raises(ValueError, match=r"attn/q_einsum/lora_a \[4, 8, 64, 2\] vs llm/layers/e0_in/q_lora_a "
                                         r"\[4, 8, 64, 4\]"):
        openpi_params.check(flat, bad, jax.eval_shape(build_model(bad).init, jax.random.key(0), obs)["params"])
