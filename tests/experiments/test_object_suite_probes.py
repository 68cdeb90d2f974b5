"""experiments/object_suite_probes.py: the instruction-length probe from the packaged tokenizer (fast)
and the command's argument check; the probes of a checkpoint run in experiments/object-suite/README.md's study."""

import importlib
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _module():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("experiments.object_suite_probes")


def test_text_probe_object_instructions_fit_spatial_ones_are_cut():
    out = _module().text_probe(16)["tasks"]
    for name in ("object/pick_red", "object/pick_yellow"):
        assert (out[name]["tokens_min"], out[name]["tokens_max"], out[name]["cut_at_max_len"]) == (14, 14, False)
        assert out[name]["example_at_16"] == out[name]["example"]  # nothing lost
    assert out["spatial/pick_left_place"]["tokens_max"] == 23 and out["spatial/pick_left_place"]["cut_at_max_len"]
    assert "square" not in out["spatial/pick_left_place"]["example_at_16"]


def test_checkpoint_probes_need_a_checkpoint_and_a_dataset():
    with pytest.raises(SystemExit):
        _module().main(["--probes", "inputs"])


def test_input_probe_reports_the_aux_error_per_dim_of_an_aux_checkpoint(tmp_path):
    """The input probe on a (2-step) SFT checkpoint with `model.aux_target='grasp_place'`: every swap variant has
    a loss and an aux error, and the per-dim aux errors of the real batch average to its aux MSE."""
    from tests.sft.test_aux_target import _aux_config, _write
    from vlajax.sft.loop import train

    root, _, _ = _write(str(tmp_path / "demos"), [3, 5, 2, 7, 4, 6, 1, 8])
    train(_aux_config(root, str(tmp_path / "run"), num_steps=2))
    probes = _module()
    out = probes.input_probe(str(tmp_path / "run" / "checkpoints"), root, batches=1)
    variants = {"real", "images_swapped", "agentview_swapped", "wrist_swapped", "text_swapped", "state_swapped",
                *(f"state_{name}_swapped" for name in probes.STATE_GROUPS)}  # sft-tiny has a state token
    assert out["step"] == 2 and set(out["loss"]) == variants == set(out["aux_target_mse"])
    per_dim = out["aux_target_mse_per_dim"]["real"]
    assert len(per_dim) == 4 and all(np.isfinite(per_dim)) and min(per_dim) > 0
    assert np.mean(per_dim) == pytest.approx(out["aux_target_mse"]["real"], abs=2e-4)
