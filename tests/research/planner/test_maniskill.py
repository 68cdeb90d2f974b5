"""The pi0 ManiSkill pod-scale preset (experiments/planner/README.md, "Pod scale: pi0 on ManiSkill")."""

from __future__ import annotations

import dataclasses

import pytest

from research.planner import presets, presets_maniskill
from research.planner.comm import Comm
from research.planner.sim import simulate


def test_pi0_maniskill_reproduces_its_two_calibration_cells():
    """The stored calibration gives seed 000 Table 3's two 8-GPU synchronous ManiSkill + pi0 cells within 3%."""
    p = presets_maniskill.get("pi0-maniskill")
    assert p.costs.env_on_device and p.costs.comm.publish_overhead_s == presets_maniskill.CALIBRATED[1] > 0
    for placement, target in presets_maniskill._CALIBRATION.items():
        got = simulate(p.pipeline(8, "sync", placement), p.costs)["env_steps_per_s"]
        assert got == pytest.approx(target, rel=0.03), placement


def test_pi0_maniskill_constants_are_the_documented_ones():
    p = presets_maniskill.get("pi0-maniskill")
    c = p.costs
    assert (p.envs_per_device, p.horizon, p.slots, p.max_batch) == (256, 64, 4, 1)  # RL-VLA3 Table 2
    assert c.infer_seconds(640) == pytest.approx(9.0) and c.env_compute_seconds(640) == pytest.approx(22.0)
    # the fixed cost per simulator call, from RL-VLA3 Table 2's sync baselines with 1 and 4 batches per GPU
    assert c.env_compute_seconds(0) == pytest.approx(0.2542, abs=1e-4)
    assert 4 * c.env_compute_seconds(64) - c.env_compute_seconds(256) == pytest.approx(3 * 0.2542, abs=1e-3)
    assert (c.comm.params, c.comm.global_batch, c.comm.update_epochs, c.comm.inter_gbs) == (3.3e9, 2048, 2, 50.0)


def test_handoff_is_paid_only_by_publications_outside_the_train_group():
    c = Comm(params=1e9)
    h = dataclasses.replace(c, publish_overhead_s=7.0)
    assert h.broadcast_seconds((4, 5), (0, 1)) == pytest.approx(c.broadcast_seconds((4, 5), (0, 1)) + 7.0)
    assert h.broadcast_seconds((0, 1, 2, 3), (0, 1)) == 0.0  # colocated / hybrid: nothing to hand off
    assert presets.PI05_COMM.publish_overhead_s == 0.0  # the LIBERO presets are unchanged
    with pytest.raises(ValueError):
        Comm(params=1e9, publish_overhead_s=-1.0)
