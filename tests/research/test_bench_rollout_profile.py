"""`research.bench.rollout_profile`: its flag check, and the trace attribution on a small real program
(a profiler trace of a jitted function whose ops sit in the scopes the profile looks for)."""

import jax
import jax.numpy as jnp

from research.bench import rollout_profile


def test_refuses_nonpositive_counts(capsys):
    assert rollout_profile.main(["--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_trace_shares_attribute_thunks_to_scopes(tmp_path):
    def fn(x):
        with jax.named_scope("forward"), jax.named_scope("solve"):
            for _ in range(3):
                x = jnp.tanh(x @ x)
        with jax.named_scope("tabletop_render"):
            y = jnp.sin(x).sum()
        return x, y

    shares = rollout_profile.trace_shares(jax.jit(fn), (jnp.ones((256, 256)) / 256,), 2, tmp_path)
    assert abs(sum(shares.values()) - 1.0) < 0.01
    assert shares.get("physics.solver", 0) > 0.5, shares  # the three matmuls
    assert "render" in shares, shares
