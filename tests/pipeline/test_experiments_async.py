"""The async-pipeline experiments (RL-VLA3 ablation, D-VLA ratios, verl staleness): configs and a debug run."""

import importlib
import json
import math
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES = ("rlvla3_async_ablation", "dvla_placement_ratio", "verl_staleness")


def _module(name):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"experiments.{name}")


@pytest.mark.parametrize("name", NAMES)
def test_experiment_configs_are_well_formed(name):
    from research.bench.async_ import MODES

    for debug in (False, True):
        sweep = _module(name).get_config(debug)
        labels = [c[0] for c in sweep.cells]
        assert len(labels) == len(set(labels)) and labels
        for _, regime, placement, mode, ratio, overrides in sweep.cells:
            assert regime in ("cpu_longtail", "mjx") and placement in ("colocated", "disaggregated")
            assert mode in MODES and ratio in ("1:1", "3:1")
            assert all(k == "staleness_threshold" for k, _ in overrides)
        assert sweep.envs % sweep.slots == 0
    full = _module(name).get_config(False)
    assert full.repeats >= 3
    if name == "verl_staleness":
        assert [dict(c[5])["staleness_threshold"] for c in full.cells] == [0.0, 0.1, 0.3, 0.5]
    if name == "dvla_placement_ratio":
        assert {c[4] for c in full.cells if c[2] == "disaggregated"} == {"1:1", "3:1"}


@pytest.mark.slow
@pytest.mark.devices(8)
@pytest.mark.timeout(1500)
def test_verl_staleness_debug_run_respects_the_thresholds(tmp_path):
    mod = _module("verl_staleness")
    common = _module("async_common")
    out = tmp_path / "staleness.json"
    rows = common.run_sweep(mod.get_config(True), str(out))
    assert len(rows) == 4 and (tmp_path / "staleness.md").read_text().count("\n") == 6
    for r in rows:
        assert r["staleness_max"] <= math.ceil(r["staleness_threshold"]) and r["env_steps_per_s"] > 0
    assert json.loads(out.read_text())["workload"]["envs"] == 8
