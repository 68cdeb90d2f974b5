"""Every registered task: jitted reset and step, observation shapes/dtypes, no NaN over an episode of
random actions, and no recompilation (one compiled reset/step serves all tasks: the task id is data)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import registry
from vlajax.envs.tabletop import tasks

B, T = 2, 100  # envs per task, steps of random actions (an episode of the RL preset is longer; the
# per-step code path is the same, and 100 steps cover contacts, grasps and gripper motion)
ENV = registry.load(registry.ALL_ENVS[0])  # pixels, 64x64, agentview + wrist (the defaults)


@chex.assert_max_traces(n=1)
def _step(state, action):
    return ENV.step(state, action)


@chex.assert_max_traces(n=1)
def _reset(rng, task_id):
    return ENV.reset_task(rng, task_id)


@jax.jit
def _episode(rng, task_id):
    k_reset, k_act = jax.random.split(rng)
    state = jax.vmap(_reset, in_axes=(0, None))(jax.random.split(k_reset, B), task_id)
    # Random actions, deliberately 50% beyond [-1, 1] to exercise clipping.
    actions = jax.random.uniform(k_act, (T, B, ENV.action_size), minval=-1.5, maxval=1.5)

    def body(s, a):
        s = jax.vmap(_step)(s, a)
        return s, (s.reward, s.done, s.metrics, jnp.isfinite(s.data.qpos).all(-1), s.obs["state"])

    last, outs = jax.lax.scan(body, state, actions)
    return state, last, outs


def test_registry_lists_suites_and_families():
    assert len(registry.ALL_ENVS) >= 12
    assert set(registry.SUITES) == {"spatial", "object", "goal"}
    assert all(len(v) >= 4 for v in registry.SUITES.values())
    assert {t.family for t in tasks.TASKS} == set(tasks.FAMILIES) and len(tasks.FAMILIES) >= 4


@pytest.mark.parametrize("name", registry.ALL_ENVS)
def test_task_reset_step_shapes_no_nan(name):
    env = registry.load(name)
    assert env.task_id == registry.ALL_ENVS.index(name)
    first, last, (reward, done, metrics, finite, proprio) = _episode(jax.random.PRNGKey(7), env.task_id)
    size = ENV.config.image_size
    for state in (first, last):
        assert state.obs["pixels/agentview"].shape == (B, size, size, 3)
        assert state.obs["pixels/wrist"].shape == (B, size, size, 3)
        assert state.obs["pixels/agentview"].dtype == jnp.uint8
        assert state.obs["state"].shape == (B, 8) and state.obs["state"].dtype == jnp.float32
        assert state.obs["instruction_id"].dtype == jnp.int32
        assert state.reward.shape == (B,) and state.reward.dtype == jnp.float32
        assert state.done.shape == (B,) and state.done.dtype == jnp.float32
        assert set(state.metrics) == {"success", *(f"reward/{t}" for t in tasks.TERMS)}
    assert np.all(np.asarray(finite)), "physics went non-finite under random actions"
    assert np.all(np.isfinite(np.asarray(reward))) and np.all(np.isfinite(np.asarray(proprio)))
    for k, v in metrics.items():
        assert np.all(np.isfinite(np.asarray(v))), k
    # Instructions are filled from the episode colours and differ across envs' colour draws.
    texts = ENV.instruction(first)
    assert len(texts) == B and all("{" not in t for t in texts)
    assert all(t == registry.task_spec(name).instructions()[i]
               for t, i in zip(texts, np.asarray(first.info["episode"]["instruction_id"])))
    # The image is not blank: the table, cubes and gripper are in view.
    img = np.asarray(first.obs["pixels/agentview"][0]).astype(np.float32)
    assert img.std() > 10.0


def test_env_reset_is_reset_task_of_its_own_task():
    env = registry.load("goal/press_button", obs_mode="state")
    rng = jax.random.PRNGKey(3)
    a = jax.jit(env.reset)(rng)
    b = jax.jit(env.reset_task)(rng, jnp.int32(env.task_id))
    chex.assert_trees_all_close(a.obs, b.obs)
    assert int(a.info["episode"]["task_id"]) == env.task_id


def test_per_episode_randomization_lives_in_state():
    env = registry.load("goal/stack", obs_mode="state")
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 8))
    ep = states.info["episode"]
    cubes = np.asarray(states.data.qpos[:, env.idx.cube_qpos[0] : env.idx.cube_qpos[0] + 2])
    assert np.unique(cubes.round(4), axis=0).shape[0] == 8  # poses differ
    assert np.unique(np.asarray(ep["colors"]), axis=0).shape[0] > 1  # colours differ
    assert np.asarray(ep["brightness"]).std() > 0  # lighting differs
    lo, hi = env.config.brightness
    assert np.all((np.asarray(ep["brightness"]) >= lo) & (np.asarray(ep["brightness"]) <= hi))


def test_privileged_obs_in_pixel_mode_is_the_state_mode_vector():
    """`privileged_obs=True` adds obs['privileged'] [PRIVILEGED_SIZE]: the very vector state mode returns."""
    from vlajax.envs.tabletop import env as tabletop_env

    pix = registry.load("goal/stack", obs_mode="pixels", image_size=8, cameras=("agentview",), privileged_obs=True)
    state = registry.load("goal/stack", obs_mode="state")
    key = jax.random.key(4)
    a = jax.jit(pix.reset)(key)
    b = jax.jit(state.reset)(key)
    assert a.obs["privileged"].shape == (tabletop_env.PRIVILEGED_SIZE,) == b.obs.shape
    np.testing.assert_array_equal(np.asarray(a.obs["privileged"]), np.asarray(b.obs))
    plain = jax.jit(registry.load("goal/stack", obs_mode="pixels", image_size=8, cameras=("agentview",)).reset)(key)
    assert "privileged" not in plain.obs
