"""Invalid input fails clearly; out-of-range actions are clipped; registry errors list names."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import registry, wrappers

ENV = registry.load("goal/put_in_square", obs_mode="state")


@pytest.fixture(scope="module")
def state():
    return jax.jit(ENV.reset)(jax.random.PRNGKey(0))


def test_wrong_action_shape_fails_at_trace_time(state):
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        jax.eval_shape(ENV.step, state, jnp.zeros((3,)))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        jax.eval_shape(ENV.step, state, jnp.zeros((1, 4)))


def test_wrong_action_dtype_fails_at_trace_time(state):
    with pytest.raises(TypeError, match="float"):
        jax.eval_shape(ENV.step, state, jnp.zeros((4,), jnp.int32))


def test_batched_and_chunked_shapes_are_checked():
    batched = wrappers.VmapWrapper(ENV, num_envs=2)
    s = jax.eval_shape(batched.reset, jax.random.split(jax.random.PRNGKey(0), 2))
    with pytest.raises(ValueError, match="num_envs=2"):
        jax.eval_shape(batched.step, s, jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"num_envs=2"):
        batched.reset(jax.random.split(jax.random.PRNGKey(0), 3))
    chunked = wrappers.ActionChunkWrapper(ENV, action_horizon=4)
    s1 = jax.eval_shape(chunked.reset, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"\(4, 4\)"):
        jax.eval_shape(chunked.step, s1, jnp.zeros((3, 4)))


def test_out_of_range_actions_are_clipped(state):
    step = jax.jit(ENV.step)
    big = step(state, jnp.array([5.0, -7.0, 3.0, 9.0]))
    unit = step(state, jnp.array([1.0, -1.0, 1.0, 1.0]))
    np.testing.assert_array_equal(np.asarray(big.data.ctrl), np.asarray(unit.data.ctrl))
    np.testing.assert_allclose(np.asarray(big.obs), np.asarray(unit.obs))
    # ...and a unit action moves the target by exactly max_delta from the current position.
    ee = np.asarray(state.data.qpos[np.asarray(ENV.idx.gripper_qpos)])
    np.testing.assert_allclose(np.asarray(unit.data.ctrl[:3]), ee + ENV.config.max_delta * np.array([1, -1, 1]),
                               atol=1e-6)


def test_unknown_names_list_available():
    with pytest.raises(KeyError, match="goal/stack") as e:
        registry.load("goal/stak")
    assert "Did you mean goal/stack" in str(e.value) and "object/pick_red" in str(e.value)
    with pytest.raises(KeyError, match="spatial, object, goal"):
        registry.suite("libero_90")
    with pytest.raises(TypeError, match="image_size"):
        registry.load("goal/stack", image_sise=32)


def test_config_contradictions_fail():
    with pytest.raises(ValueError, match="physics_impl='warp'"):
        registry.load("goal/stack", render_backend="warp")
    with pytest.raises(ValueError, match="obs_mode"):
        registry.load("goal/stack", obs_mode="rgbd")
    with pytest.raises(ValueError, match="reward_scales lacks"):
        registry.load("goal/stack", reward_scales={"success": 1.0})
