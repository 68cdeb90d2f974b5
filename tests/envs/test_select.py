"""`wrappers.select` / `select_data`: per-env merge of two env states, the physics data by `mjx.Data.where`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.envs import registry, wrappers

ENV = registry.load("goal/press_button", obs_mode="state")


@pytest.fixture(scope="module")
def two_states():
    reset = jax.jit(jax.vmap(ENV.reset))
    a = reset(jax.random.split(jax.random.PRNGKey(0), 3))
    b = reset(jax.random.split(jax.random.PRNGKey(1), 3))
    return a, b


def _rows_equal(got, want_rows):
    for g, *ws in zip(jax.tree.leaves(got), *[jax.tree.leaves(w) for w in want_rows]):
        np.testing.assert_array_equal(np.asarray(g), np.stack([np.asarray(w) for w in ws]))


def test_batched_select_takes_x_where_done_per_env(two_states):
    a, b = two_states
    done = jnp.asarray([True, False, True])
    got = jax.jit(wrappers.select)(done, a, b)
    row = lambda s, i: jax.tree.map(lambda x: x[i], s)  # noqa: E731
    _rows_equal(got, [row(a, 0), row(b, 1), row(a, 2)])
    assert not np.array_equal(np.asarray(a.data.qpos), np.asarray(b.data.qpos))  # the two batches differ
    # a float done (the env's own `done` field) selects where it is > 0
    got_f = jax.jit(wrappers.select)(jnp.asarray([1.0, 0.0, 1.0]), a, b)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), got_f, got)


def test_select_inside_vmap_equals_the_batched_select(two_states):
    a, b = two_states
    done = jnp.asarray([0.0, 1.0, 0.0])
    inside = jax.jit(jax.vmap(wrappers.select))(done, a, b)
    outside = jax.jit(wrappers.select)(done, a, b)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), inside, outside)
    data = jax.jit(wrappers.select_data)(done > 0, a.data, b.data)
    np.testing.assert_array_equal(np.asarray(data.qpos), np.asarray(outside.data.qpos))
    np.testing.assert_array_equal(np.asarray(data.qpos[1]), np.asarray(a.data.qpos[1]))
    np.testing.assert_array_equal(np.asarray(data.qpos[0]), np.asarray(b.data.qpos[0]))
