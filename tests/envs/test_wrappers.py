"""Episode length / truncation, auto-reset (cached and full), action chunks, vmap composition."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import registry, wrappers
from vlajax.envs.tabletop import scene

ENV = registry.load("goal/press_button", obs_mode="state")
H = 5
# one episode wrapper of 3 steps, jitted once: the chunk test's reference and the counting test share
# its compiled reset and step (an MJX step compile is most of each test's time)
INNER = wrappers.EpisodeWrapper(ENV, episode_length=3)
INNER_RESET, INNER_STEP = jax.jit(INNER.reset), jax.jit(INNER.step)


def _zeros(*shape):
    return jnp.zeros(shape, jnp.float32)


def test_chunk_with_episode_end_inside():
    # Episode of 3 steps, chunk of 5: the 3rd step ends it, the last 2 are not executed.
    env = wrappers.ActionChunkWrapper(wrappers.EpisodeWrapper(ENV, episode_length=3), H)
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    assert state.info["chunk_rewards"].shape == (H,)
    nxt = jax.jit(env.step)(state, _zeros(H, 4))
    np.testing.assert_array_equal(np.asarray(nxt.info["chunk_dones"]), [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(np.asarray(nxt.info["chunk_valid"]), [1, 1, 1, 0, 0])
    r = np.asarray(nxt.info["chunk_rewards"])
    assert r[3:].sum() == 0 and np.isclose(float(nxt.reward), r.sum())
    assert float(nxt.done) == 1.0 and float(nxt.info["truncation"]) == 1.0
    assert float(nxt.info["steps"]) == 3.0  # frozen at the terminal step
    # The observation is the terminal state's (computed once after the chunk), not a stale one.
    np.testing.assert_array_equal(np.asarray(nxt.obs), np.asarray(jax.jit(ENV.observe)(nxt).obs))
    assert not np.array_equal(np.asarray(nxt.obs), np.asarray(state.obs))
    # The per-step rewards equal stepping the inner env one action at a time.
    s = INNER_RESET(jax.random.PRNGKey(0))
    manual = []
    for _ in range(3):
        s = INNER_STEP(s, _zeros(4))
        manual.append(float(s.reward))
    np.testing.assert_allclose(r[:3], manual, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("full", [True, False])
def test_batched_autoreset(full):
    env = wrappers.wrap(ENV, episode_length=3, num_envs=2, action_horizon=H, full_reset=full)
    state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(1), 2))
    step = jax.jit(env.step)
    nxt = step(state, _zeros(2, H, 4))
    assert nxt.info["chunk_rewards"].shape == (2, H)
    np.testing.assert_array_equal(np.asarray(nxt.done), [1, 1])
    # Done envs come back as a first state: gripper at home, no velocity.
    grip = np.asarray(nxt.data.qpos[:, np.asarray(ENV.idx.gripper_qpos)])
    np.testing.assert_allclose(grip, np.tile(scene.HOME, (2, 1)), atol=1e-6)
    np.testing.assert_allclose(np.asarray(nxt.data.qvel), 0.0)
    same = np.allclose(np.asarray(nxt.data.qpos), np.asarray(state.data.qpos))
    assert same != full  # cached: identical first state; full: a newly randomized one
    ep0, ep1 = state.info["episode"], nxt.info["episode"]
    assert np.array_equal(np.asarray(ep0["brightness"]), np.asarray(ep1["brightness"])) != full
    # Observations were computed once, for the returned (reset) states.
    np.testing.assert_array_equal(np.asarray(nxt.obs), np.asarray(jax.jit(env.observe)(nxt).obs))
    # Step counter restarts on the next step.
    again = step(nxt, _zeros(2, H, 4))  # the same compiled step
    np.testing.assert_array_equal(np.asarray(again.info["steps"]), [3, 3])


def test_episode_wrapper_counts_and_truncates():
    s = INNER_RESET(jax.random.PRNGKey(0))  # episode_length=3
    for t in (1, 2):
        s = INNER_STEP(s, _zeros(4))
        assert float(s.done) == 0 and float(s.info["steps"]) == t and float(s.info["truncation"]) == 0
    s = INNER_STEP(s, _zeros(4))
    assert float(s.done) == 1 and float(s.info["truncation"]) == 1 and float(s.info["steps"]) == 3
