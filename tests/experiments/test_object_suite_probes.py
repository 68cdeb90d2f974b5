"""experiments/object_suite_probes.py: the instruction-length probe from the packaged tokenizer (fast)
and the command's argument check; the probes of a checkpoint run in docs/results.md's commands."""

import importlib
import pathlib
import sys

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
