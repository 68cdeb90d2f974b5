"""After issue 44.5's ninth try (`plan validate --threaded-step-jitter`): the profile times each slot step of its
concurrency rounds as it ran beside the other slots' steps (`step_threaded`), and the model can draw the slot
steps' spread from those instead of the steps timed one after another (`Costs.threaded_steps`)."""

import pathlib
import subprocess
import sys
import time

import jax.numpy as jnp
import numpy as np
import pytest

from research.planner.profile import costs_from_raw, step_concurrency
from tests.research.planner.test_jitter import _batch, _costs, _jax_raw

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_threaded_steps_replace_only_the_step_factors_and_only_when_asked():
    wl = {"envs": 16, "slots": 4, "horizon": 8}
    plain = costs_from_raw(_jax_raw(), wl, cores=2.0)["jax"]
    with_threaded = costs_from_raw(_jax_raw(**{"jax/step_threaded": [0.01, 0.02, 0.03, 0.02]}), wl, cores=2.0)["jax"]
    # recorded, but the draws are the serial steps' until asked: the same factors for step and infer
    assert with_threaded.jitter_factors("step") == plain.jitter_factors("step")
    assert with_threaded.jitter_factors("infer") == plain.jitter_factors("infer")
    t = with_threaded.threaded_steps()
    assert t.jitter_factors("step") == pytest.approx((0.5, 1.0, 1.5, 1.0))
    assert t.jitter_factors("infer") == plain.jitter_factors("infer")
    with pytest.raises(ValueError, match="step_threaded"):
        plain.threaded_steps()


def test_a_wider_threaded_spread_splits_the_slots_more():
    """Serial steps within +-2%, threaded within +-40% (contention): with a 1 ms wait the serial spread keeps
    the 4 slots nearly together, the threaded one fires smaller batches."""
    c = _costs(jitter=(("step", (0.98, 1.0, 1.02) * 4), ("step_threaded", (0.6, 1.0, 1.4) * 4)))
    serial, threaded = _batch(0.001, True, c), _batch(0.001, True, c.threaded_steps())
    assert threaded < serial - 0.5, (serial, threaded)


def test_the_profile_times_every_step_of_its_threaded_rounds():
    """Real threads, a stand-in step of ~2 ms (the rounds' bookkeeping is what is under test): repeats x slots x
    horizon timings, each about the step's length; the compiling round is left out."""

    def step(s, env_state, out):
        time.sleep(0.002)
        return env_state + 1, out, jnp.zeros(())

    slots, horizon, repeats = 3, 2, 4
    envs_of = {s: (jnp.zeros(()), jnp.zeros(())) for s in range(slots)}
    raw: dict = {}
    step_concurrency(raw, "jax", step, envs_of, {s: jnp.zeros(()) for s in range(slots)}, slots, horizon, repeats)
    assert len(raw["jax/steps_serial"]) == len(raw["jax/steps_threads"]) == repeats
    t = np.array(raw["jax/step_threaded"])
    assert t.size == repeats * slots * horizon and t.min() >= 0.002 and t.max() < 1.0
    assert int(envs_of[0][0]) == 2 * (1 + repeats) * horizon  # every round stepped the slot's env (serial + threaded)


def test_validate_refuses_threaded_steps_without_jitter_or_without_the_timings(tmp_path):
    """One `error:` line each, before anything is simulated."""
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--runs", "x.json", "--profile-from",
                        str(tmp_path), "--threaded-step-jitter"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --threaded-step-jitter")
    r = subprocess.run([sys.executable, "-m", "research.planner", "validate", "--profile-from",
                        str(ROOT / "results/bench/plan_profile_prod11/p0"), "--runs",
                        str(ROOT / "results/bench/async_production_planval11.json"),
                        "--jitter", "--threaded-step-jitter"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-500:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: --threaded-step-jitter: the profiles have no")
