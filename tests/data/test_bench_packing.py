"""`python -m vlajax.bench packing`: the declared data choices and MLP ratio, the padding
accounting, and (slow) a tiny run on generated demos and the two-camera-count mixture."""

import dataclasses
import math
from unittest import mock

import numpy as np
import pytest

from vlajax.bench import packing as bench
from vlajax.config.schema import GEMMA_VARIANTS

TINY = dict(width=32, depth=1, num_heads=2, num_kv_heads=1, head_dim=16, mlp_dim=64, expert_width=16,
            expert_mlp_dim=32)


@pytest.fixture
def tiny():
    base = bench._model_config
    with (mock.patch.object(bench, "_model_config", lambda: dataclasses.replace(base(), **TINY)),
          mock.patch.object(bench, "BATCH", 8)):
        yield


def test_mlp_ratio_is_gemma_2b_and_declared():
    g = GEMMA_VARIANTS["gemma_2b"]
    assert bench.GEMMA_2B_MLP_RATIO == g["mlp_dim"] / g["width"] == 8.0
    assert bench._model(8.0).mlp_dim == 8 * bench._model_config().width
    assert bench._model(0).mlp_dim == bench._model_config().mlp_dim == 3072  # the earlier figure's model
    assert bench.Args().mlp_ratio == 8.0 and bench.Args().data == ("demos", "mixture")


@pytest.mark.parametrize("argv", [["--mlp-ratio", "0"], ["--batches", "0"], ["--data", "nope"]])
def test_cli_refuses(argv):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2


def test_synthetic_padding_split_accounts_for_all_padding(tiny, tmp_path):
    batches, spec, decl = bench._data_batches("synthetic", bench._model(0), 2, str(tmp_path), 1)
    assert decl["data"] == "synthetic" and decl["pack_row_len"] == 2 * spec.length
    fixed = batches["fixed"]
    slots = sum(b["segment_ids"].size for b in fixed)
    pad = 1 - sum(int((b["segment_ids"] > 0).sum()) for b in fixed) / slots
    split = bench.padding_split(fixed, spec)
    assert math.isclose(sum(split.values()), pad, rel_tol=1e-9)
    assert split["camera_slots"] > 0 and split["text_slots"] > 0  # the synthetic mix drops cameras
    tok = bench._sample_tokens(fixed, spec)
    assert tok.sum() == sum(int((b["segment_ids"] > 0).sum()) for b in fixed)
    # packed batches carry the same kind of samples in fewer token slots
    assert all(b["segment_ids"].shape == (decl["pack_rows"], decl["pack_row_len"]) for b in batches["packed"])


@pytest.mark.slow
def test_demos_and_mixture_rows_are_declared(tiny):
    out = bench.run_all(("demos", "mixture"), 1, 1, 8.0, 1)
    rows = out["rows"]
    assert [(r["data"], r["mode"]) for r in rows] == [(d, m) for d in ("demos", "mixture") for m in bench.MODES]
    for r in rows:
        assert r["model"]["mlp_ratio"] == 8.0 and r["model"]["mlp_dim"] == 8 * TINY["width"]
        assert r["tokens_per_s"] > 0 and r["datasets"]
    demos, mix = out["runs"]["demos"], out["runs"]["mixture"]
    (d,) = demos["setup"]["datasets"]
    assert d["cameras"] == ["agentview", "wrist"] and d["suite"] == "goal" and d["episodes"] == 4
    assert [x["cameras"] for x in mix["setup"]["datasets"]] == [["agentview", "wrist"], ["agentview"]]
    assert mix["packed_padding_fraction"] < mix["fixed_padding_fraction"]
    # demos: both cameras on every sample, so fixed padding is text slots and the layout's tail only
    assert demos["prefix_tokens"]["share_without_a_camera"] == 0 and demos["fixed_padding_split"]["camera_slots"] == 0
    assert 0 < mix["prefix_tokens"]["share_without_a_camera"] < 1 and mix["fixed_padding_split"]["camera_slots"] > 0
    for run in (demos, mix):
        split = run["fixed_padding_split"]
        assert math.isclose(sum(split.values()), run["fixed_padding_fraction"], rel_tol=1e-9)
        # fixed and dynamic time the same samples: same useful tokens per pass
        assert run["fixed_tokens_per_pass"] == run["dynamic_tokens_per_pass"]
        assert all(run[f"{m}_nonfinite_losses"] == 0 for m in bench.MODES)
        assert len(run["packed_speedup_per_pass"]) == 1
        assert np.isclose(run["packed_speedup_per_pass"][0], run["packed_speedup_vs_fixed"])
