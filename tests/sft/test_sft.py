"""SFT: the packed step equals the padded one, exact resume, bad data is one line, config files."""

from __future__ import annotations

import dataclasses
import os
import shutil

import grain
import jax
import numpy as np
import pytest

from tests.sft.conftest import tiny_config
from vlajax import train as train_cli
from vlajax.data.build import make_source, make_transform
from vlajax.data.normalize import load_norm_stats
from vlajax.data.packing import PackedBatchDataset, PrefixSpec
from vlajax.data.transforms import Compose
from vlajax.models.vla import VLA
from vlajax.policies.run_files import config_from_dict, config_to_dict, init_fn
from vlajax.sft.loop import loss_fn, train


def _batches(cfg, n=6):
    src = make_source(cfg)
    stats = load_norm_stats(src.data.root, (src.action_key, src.state_key))
    norm = {"actions": stats[src.action_key], "state": stats[src.state_key]}
    cams = tuple(sorted(src.cameras))
    transform = Compose(make_transform(cfg, cams, norm).inputs)
    # Mixed lengths: drop the wrist camera from every other sample.
    samples = []
    for i in range(n):
        s = transform(src[i * 7])
        if i % 2:
            s = {**s, "images": {"agentview": s["images"]["agentview"]}}
        samples.append(s)
    spec = PrefixSpec.from_model(cfg.model, cams)
    ds = grain.MapDataset.source(samples).to_iter_dataset()
    (fixed,) = list(PackedBatchDataset(ds, spec, "fixed", n))
    (packed,) = list(PackedBatchDataset(ds, spec, "packed", n, rows=3, row_len=2 * spec.length))
    (dyn,) = list(PackedBatchDataset(ds, spec, "dynamic", n))
    return cams, fixed, packed, dyn


def test_packed_and_dynamic_loss_and_grads_equal_padded(synthetic_dataset, tmp_path):
    cfg = tiny_config(synthetic_dataset, str(tmp_path))
    cams, fixed, packed, dyn = _batches(cfg)
    assert packed["segment_ids"].shape[0] == 3 and int(packed["sample_mask"].sum()) == 6
    assert np.max(np.bincount(packed["sample_row"])) >= 2
    state = jax.jit(init_fn(cfg, cams))(jax.random.key(0))
    params = jax.tree.map(lambda x: getattr(x, "value", x), state.params,
                          is_leaf=lambda x: hasattr(x, "value"))
    model = VLA(cfg.model)
    grad = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(p, model, b, jax.random.key(3))[0]))
    ref_loss, ref_g = grad(params, fixed)
    for b in (packed, dyn):
        loss, g = grad(params, b)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
        for a, r in zip(jax.tree.leaves(g), jax.tree.leaves(ref_g)):
            np.testing.assert_allclose(a, r, rtol=1e-3, atol=2e-5)


def test_resume_is_exact(synthetic_dataset, tmp_path):
    """4 steps in one go == 2 steps, stop, resume, 2 more: same losses and parameters."""
    straight = train(tiny_config(synthetic_dataset, str(tmp_path / "a")), return_state=True)
    first = train(tiny_config(synthetic_dataset, str(tmp_path / "b")), stop_at=2)
    second = train(tiny_config(synthetic_dataset, str(tmp_path / "b")), return_state=True)
    assert first["start_step"] == 0 and second["start_step"] == 2
    assert first["losses"] + second["losses"] == straight["losses"]
    for a, b in zip(jax.tree.leaves(straight["state"]), jax.tree.leaves(second["state"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert os.path.isfile(tmp_path / "a" / "checkpoints" / "policy.json")
    assert any(f.startswith("events") for f in os.listdir(tmp_path / "a" / "tb"))


def test_time_limit_stops_with_a_checkpoint_of_the_last_step(synthetic_dataset, tmp_path):
    """sft.time_limit_minutes: once training has run that long, the run stops after the current step and saves
    it (status 'done', steps < num_steps); a later run with the limit off resumes from it."""
    cfg = tiny_config(synthetic_dataset, str(tmp_path / "a"), num_steps=40, time_limit_minutes=1e-5)
    out = train(cfg)
    ckpt = tmp_path / "a" / "checkpoints"
    saved = sorted(int(d) for d in os.listdir(ckpt) if d.isdigit())
    assert out["status"] == "done" and 1 <= out["steps"] < 40 and saved[-1] == out["steps"]
    resumed = train(tiny_config(synthetic_dataset, str(tmp_path / "a"), num_steps=out["steps"] + 2))
    assert resumed["start_step"] == out["steps"] and resumed["steps"] == out["steps"] + 2


def test_config_json_round_trip():
    from vlajax.config.schema import get_config

    cfg = get_config("sft-small")
    assert config_from_dict(config_to_dict(cfg)) == cfg


def _corrupt(root: str, what: str) -> str:
    if what == "missing_stats":
        os.remove(os.path.join(root, "meta", "stats.json"))
        return "stats.json"
    if what == "corrupt_parquet":
        path = os.path.join(root, "data", "chunk-000", "file-000.parquet")
        with open(path, "r+b") as f:
            f.seek(100)
            f.write(b"\0" * 64)
        return "file-000.parquet"
    if what == "missing_file":
        shutil.rmtree(os.path.join(root, "data"))
        return "data"
    if what == "feature_shape":
        import json

        path = os.path.join(root, "meta", "info.json")
        with open(path) as f:
            info = json.load(f)
        info["features"]["action"]["shape"] = [5]
        with open(path, "w") as f:
            json.dump(info, f)
        return "file-000.parquet"
    raise ValueError(what)


@pytest.mark.parametrize("what", ["missing_stats", "corrupt_parquet", "missing_file", "feature_shape"])
def test_bad_data_is_one_clear_line(synthetic_dataset, tmp_path, capsys, what):
    root = str(tmp_path / "demos")
    shutil.copytree(synthetic_dataset, root)
    name = _corrupt(root, what)
    code = train_cli.main(["sft", "--preset", "sft-tiny", "--data.dataset-dir", root,
                           "--output-dir", str(tmp_path / "run"), "--logging.progress", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and name in err[0], err
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_missing_dataset_is_one_clear_line(tmp_path, capsys):
    code = train_cli.main(["sft", "--preset", "sft-tiny", "--data.dataset-dir", str(tmp_path / "nope"),
                           "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "nope" in err[0], err


def test_aliases_map_to_config_fields():
    cfg = train_cli.parse("demos", ["--preset", "sft-tiny", "--suite", "object", "--episodes-per-task", "3",
                                    "--out", "/tmp/x"])
    assert (cfg.env.suite, cfg.data.episodes_per_task, cfg.data.dataset_dir) == ("object", 3, "/tmp/x")
    cfg = train_cli.parse("eval", ["--preset", "sft-tiny", "--checkpoint=/tmp/c", "--suite", "goal"])
    assert cfg.checkpoint.dir == "/tmp/c" and cfg.env.suite == "goal"
    assert dataclasses.replace(cfg.sft) == cfg.sft
