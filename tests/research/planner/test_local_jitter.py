"""Issue 44.5, seventh (`Costs.local_jitter`, `plan validate --local-jitter`): the jitter factors keep only how a
call differs from the calls timed beside it; a drift all calls share does not spread concurrent slots apart."""

import subprocess
import sys

import numpy as np
import pytest

from tests.research.planner.test_jitter import _batch, _costs


def test_a_shared_drift_is_no_spread_and_a_local_one_is_kept():
    """Blocks of 5 calls at 0.5x then 1.5x (the machine slowed between them): each call equals its neighbours,
    so no local spread (all factors 1); alternating 0.8 / 1.2 calls keep their spread, mean 1."""
    drift = _costs(jitter=(("step", (0.5,) * 5 + (1.5,) * 5),)).local_jitter()
    assert drift.jitter_factors("step") == pytest.approx((1.0,) * 10)
    alt = _costs(jitter=(("step", (0.8, 1.2) * 6), ("infer", (1.0, 1.0, 1.0)))).local_jitter()
    f = np.array(alt.jitter_factors("step"))
    assert np.mean(f) == pytest.approx(1.0) and f.max() / f.min() == pytest.approx(1.5)
    assert alt.jitter_factors("infer") == pytest.approx((1.0,) * 3)


def test_a_drift_keeps_the_slots_together_only_with_local_jitter():
    """Steps drifting between 0.5x and 1.5x in blocks: drawn as they are, a 0.5 ms wait splits the 4 slots; their
    local part is nil, so the slots stay in lockstep and every call gathers all 4."""
    c = _costs(jitter=(("step", (0.5,) * 5 + (1.5,) * 5),))
    assert _batch(0.0005, True, c) < 3.0
    assert _batch(0.0005, True, c.local_jitter()) == 4.0


def test_validate_refuses_local_jitter_without_jitter(tmp_path):
    """One `error:` line, before any profile or run is read."""
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--runs", "x.json", "--profile-from",
                        str(tmp_path), "--local-jitter"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: --local-jitter")
