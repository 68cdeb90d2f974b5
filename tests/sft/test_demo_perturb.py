"""DART-style demo perturbations (`data.demo_perturb_prob`): executed actions perturbed, labels the expert's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import ConfigError, DataConfig
from vlajax.data.demos import expert_rollout, perturbed_actions


def test_perturbed_actions_start_run_and_stop():
    n = 256
    expert = jnp.tile(jnp.array([[0.3, -0.2, 0.1, 1.0]]), (n, 1))
    left, move = jnp.zeros((n,), jnp.int32), jnp.zeros((n, 3))
    same, left0, _ = perturbed_actions(jax.random.key(0), expert, left, move, 0.0, 6)
    assert np.array_equal(same, expert) and not np.any(left0)  # prob 0: the expert's actions
    blocked, left1, _ = perturbed_actions(jax.random.key(0), expert, left, move, 0.99, 6, jnp.zeros((n,), bool))
    assert np.array_equal(blocked, expert) and not np.any(left1)  # not allowed: nothing starts
    out, left, move = perturbed_actions(jax.random.key(1), expert, left, move, 0.5, 6)
    on = np.asarray(np.any(out != expert, axis=1))
    assert 0.35 < on.mean() < 0.65  # about half started
    np.testing.assert_allclose(np.linalg.norm(np.asarray(out)[on, :2], axis=1), 1.0, atol=1e-5)  # full speed xy
    assert np.all(np.abs(np.asarray(out)[on, 2]) <= 0.3)
    np.testing.assert_array_equal(np.asarray(out)[:, 3], 1.0)  # the gripper command is kept
    assert np.all((np.asarray(left)[on] >= 0) & (np.asarray(left)[on] <= 5)) and not np.any(np.asarray(left)[~on])
    # a running perturbation keeps its direction until it ends, and none starts meanwhile (prob 0)
    run_left, run_move = left, move
    for _ in range(6):
        out2, run_left, run_move = perturbed_actions(jax.random.key(2), expert, run_left, run_move, 0.0, 6)
        still = np.asarray(np.any(out2 != expert, axis=1))
        np.testing.assert_array_equal(np.asarray(out2)[still, :3], np.asarray(move)[still])
    assert not np.any(run_left)


@pytest.mark.slow  # two MJX rollouts to compile (~2 min on 2 shared cores)
def test_rollout_records_expert_labels_on_perturbed_states():
    from vlajax.envs import registry

    env = registry.load("object/pick_red", obs_mode="state")
    tid = jnp.int32(registry.ALL_ENVS.index("object/pick_red"))
    clean = jax.jit(lambda k: expert_rollout(env, k, tid, 4, 30))
    noisy = jax.jit(lambda k: expert_rollout(env, k, tid, 4, 30, perturb_prob=0.5, perturb_steps=4))
    obs0, act0, _ = clean(jax.random.key(3))
    obs1, act1, _ = noisy(jax.random.key(3))
    np.testing.assert_array_equal(obs0[0], obs1[0])  # same episodes
    np.testing.assert_array_equal(act0[0], act1[0])  # first label: the expert's action in the same state
    assert not np.allclose(obs0[-1], obs1[-1])  # the perturbations moved the gripper elsewhere
    # labels stay the expert's: saturated reaching moves and binary gripper commands, never a
    # perturbation's unit-norm xy direction with its random z
    np.testing.assert_array_equal(np.abs(np.asarray(act1)[..., 3]), 1.0)


def test_config_checks_the_range():
    with pytest.raises(ConfigError):
        DataConfig(demo_perturb_prob=1.0)
    with pytest.raises(ConfigError):
        DataConfig(demo_perturb_steps=0)
