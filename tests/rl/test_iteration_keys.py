"""`rl.setup.iteration_keys` is one jitted call: the keys must be those of the eager derivation (every run's
collect and update draws, and so resumed == uninterrupted, rest on them)."""

import jax
import numpy as np

from vlajax.rl.setup import ENV_STREAM, UPDATE_STREAM, iteration_keys


def _eager(seed: int, iteration: int):
    key = jax.random.fold_in(jax.random.key(seed), iteration)
    return jax.random.fold_in(key, ENV_STREAM), jax.random.fold_in(key, UPDATE_STREAM)


def test_the_jitted_keys_are_the_eager_ones():
    for seed in (0, 1, 42, 2**31 - 1, 2**40 + 3):
        for it in (0, 1, 7, 10**6, np.int64(12)):
            got, want = iteration_keys(seed, it), _eager(seed, int(it))
            for g, w in zip(got, want):
                assert not g.committed  # placed like an eager result: any jitted caller may take it
                np.testing.assert_array_equal(jax.random.key_data(g), jax.random.key_data(w))
    one, two = (jax.random.key_data(iteration_keys(0, i)[0]) for i in (1, 2))
    assert not np.array_equal(one, two)
