"""experiments/physics_default.py: the pre-registered test of the physics default, on synthetic
per-episode records -- the same episodes pass, a 10-point shift fails, an MJX arm that does not reproduce the
quickstart's update-0 evaluation voids it, and a missing seed leaves it incomplete."""

import importlib
import json
import os
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _mod():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("experiments.physics_default")


def _write(tmp_path, seeds, success, quickstart_before=None):
    """success: {(physics, seed): [80] 0/1}; the quickstart JSONs' update-0 mean = the MJX arm's unless given."""
    out, qs = tmp_path / "out", tmp_path / "qs"
    out.mkdir(parents=True, exist_ok=True), qs.mkdir(parents=True, exist_ok=True)
    tasks = ["goal/put_in_square", "goal/push_to_square", "goal/stack", "goal/press_button"]
    for (physics, seed), s in success.items():
        s = np.asarray(s, int).reshape(4, 20)
        ev = {"per_task": {t: float(s[i].mean()) for i, t in enumerate(tasks)}, "mean_success": float(s.mean()),
              "episode_success": {t: s[i].tolist() for i, t in enumerate(tasks)}}
        (out / f"{physics}-seed{seed}.json").write_text(json.dumps({"physics": physics, "seed": seed, "eval": ev,
                                                                    "wall_seconds": 1.0}))
        if physics == "jax":
            before = float(s.mean()) if quickstart_before is None else quickstart_before
            (qs / f"async-seed{seed}.json").write_text(json.dumps({"before": {"mean": before}}))
    m = _mod()
    return m, m.Args(mode="report", seeds=tuple(seeds), out=str(out), quickstart=str(qs))


def test_the_same_episodes_pass_and_a_shift_of_ten_points_fails(tmp_path):
    rng = np.random.default_rng(0)
    base = {s: (rng.random(80) < 0.5).astype(int) for s in (1, 2, 3)}
    flip = lambda x, k: np.where(np.arange(80) < k, 1 - x, x)  # noqa: E731 -- k episodes end otherwise
    m, a = _write(tmp_path, base, {**{("jax", s): x for s, x in base.items()},
                                   **{("c", s): flip(x, 4) for s, x in base.items()}})
    r = m.summarize(a)
    assert r["verdict"].startswith("SAME") and r["episodes"] == 240
    assert r["diff"]["low"] >= -0.05 and r["diff"]["high"] <= 0.05 and 0.9 < r["agreement"] < 1
    assert "SAME" in m.markdown(r)
    # C succeeds on 8 more episodes of 80 in every checkpoint: +10 points, outside the margin
    up = {s: np.where((x == 0) & (np.cumsum(x == 0) <= 8), 1, x) for s, x in base.items()}
    m, a = _write(tmp_path / "b", base, {**{("jax", s): x for s, x in base.items()},
                                         **{("c", s): up[s] for s in base}})
    r = m.summarize(a)
    assert r["verdict"].startswith("NOT SHOWN") and r["diff"]["mean"] == pytest.approx(0.10)


def test_an_mjx_arm_off_the_quickstart_protocol_voids_it_and_a_missing_seed_leaves_it_incomplete(tmp_path):
    x = np.tile([0, 1], 40)
    m, a = _write(tmp_path, (1,), {("jax", 1): x, ("c", 1): x}, quickstart_before=0.3875)
    assert m.summarize(a)["verdict"].startswith("VOID")
    m, a = _write(tmp_path / "b", (1, 2), {("jax", 1): x, ("c", 1): x})
    assert m.summarize(a)["verdict"].startswith("INCOMPLETE")
    m, a = _write(tmp_path / "c", (1,), {("jax", 1): x})
    with pytest.raises(ValueError, match="no seed with both"):
        m.summarize(a)


def test_the_stratified_bootstrap_keeps_each_group_and_its_interval_narrows_with_episodes():
    m = _mod()
    one = [np.array([1.0, -1.0] * 10)]
    mean, lo, hi = m.stratified_bootstrap(one)
    assert mean == 0 and lo < 0 < hi
    _, lo4, hi4 = m.stratified_bootstrap(one * 4)
    assert hi4 - lo4 < (hi - lo) * 0.6  # 4x the episodes: about half as wide
    assert m.stratified_bootstrap([np.zeros(5), np.ones(5)])[1:] == (0.5, 0.5)  # each group keeps its own
    assert os.path.basename(m.__file__) == "physics_default.py"
