"""Orbax checkpoints: resharding on restore, extra items, grain iterator state, kill-safety."""

import os
import signal
import subprocess
import sys
import textwrap

import flax.linen as nn
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vlajax.config.schema import MeshConfig
from vlajax.training import checkpoint, sharding
from vlajax.training.train_state import TrainState


class _Block(nn.Module):
    """A tiny attention-shaped block whose params carry every common logical axis."""

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.normal(0.5)
        qkv = self.param("qkv", nn.with_logical_partitioning(init, ("embed", "heads", "head_dim")), (16, 4, 8))
        out = self.param("out", nn.with_logical_partitioning(init, ("heads", "head_dim", "embed")), (4, 8, 16))
        up = self.param("up", nn.with_logical_partitioning(init, ("embed", "mlp")), (16, 32))
        down = self.param("down", nn.with_logical_partitioning(init, ("mlp", "embed")), (32, 16))
        h = jnp.einsum("bd,dhk->bhk", x, qkv)
        x = x + jnp.einsum("bhk,hkd->bd", h, out)
        return x + jax.nn.gelu(x @ up) @ down


def _init_fn():
    tx = optax.adamw(1e-2)

    def init(rng):
        params = _Block().init(rng, jnp.zeros((2, 16)))["params"]
        return TrainState.create(params, tx, rng)

    return init


def _trained_state(mesh_cfg):
    """A state on `mesh_cfg` after 3 real updates (so optimizer moments are non-trivial)."""
    init = _init_fn()
    mesh = sharding.make_mesh(mesh_cfg)
    state, shardings = sharding.init_sharded(init, mesh, mesh_cfg.logical_rules, jax.random.key(1))

    def step(state, x):
        grads = jax.grad(lambda p: jnp.mean(_Block().apply({"params": p}, x) ** 2))(state.params)
        return state.apply_gradients(grads)

    step = jax.jit(step, out_shardings=shardings)
    for i in range(3):
        state = step(state, jax.random.normal(jax.random.key(i), (8, 16)))
    return state


def _restore_on(directory, mesh_cfg):
    init = _init_fn()
    mesh = sharding.make_mesh(mesh_cfg)
    abstract = jax.eval_shape(init, jax.random.key(0))
    target = checkpoint.abstract_state(
        nn.unbox(abstract), sharding.tree_shardings(abstract, mesh, mesh_cfg.logical_rules)
    )
    with checkpoint.Checkpointer(directory) as ckpt:
        return ckpt.restore(target)


@pytest.mark.devices(8)
@pytest.mark.parametrize("target_mesh", [MeshConfig(dp=2, tp=2, sp=2), MeshConfig(dp=2, tp=4, sp=1)])
def test_save_on_8x1x1_restore_on_other_meshes(tmp_path, target_mesh):
    state = _trained_state(MeshConfig(dp=8, tp=1, sp=1))
    assert state.params["up"].sharding.spec == jax.sharding.PartitionSpec("dp")
    with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
        ckpt.save(3, state, extra={"step": 3, "policy_version": 7})
    restored, extra = _restore_on(str(tmp_path), target_mesh)
    assert extra == {"step": 3, "policy_version": 7}
    tp = target_mesh.tp
    # The restored arrays live on the new mesh with the new layout ...
    assert restored.params["up"].sharding.spec == jax.sharding.PartitionSpec("dp", "tp")
    assert restored.params["up"].addressable_shards[0].data.shape == (16 // 2, 32 // tp)
    assert restored.opt_state[0].mu["qkv"].sharding.mesh.shape["tp"] == tp
    # ... with identical values, optimizer moments, step and RNG included.
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(restored.step) == 3


def test_keeps_newest_and_restores_a_chosen_step(tmp_path):
    state = {"w": jnp.arange(4.0)}
    with checkpoint.Checkpointer(str(tmp_path), max_to_keep=2, async_save=False) as ckpt:
        for step in (1, 2, 3):
            ckpt.save(step, {"w": state["w"] * step}, extra={"step": step})
        assert ckpt.all_steps() == [2, 3]
        restored, extra = ckpt.restore(state, step=2)
    np.testing.assert_array_equal(restored["w"], np.arange(4.0) * 2)
    assert extra == {"step": 2}


def test_restore_without_checkpoint_is_a_clear_error(tmp_path):
    with (
        checkpoint.Checkpointer(str(tmp_path)) as ckpt,
        pytest.raises(FileNotFoundError, match="no complete checkpoint"),
    ):
        ckpt.restore({"w": jnp.zeros(2)})


def test_grain_iterator_resumes_at_the_next_batch(tmp_path):
    def make_iter():
        ds = grain.MapDataset.range(100).seed(0).shuffle().map(lambda i: np.int64(i)).to_iter_dataset().batch(4)
        return iter(ds)

    it = make_iter()
    for _ in range(3):
        next(it)
    with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
        ckpt.save(3, {"w": jnp.zeros(1)}, data_iter=it)
    expected = [next(it) for _ in range(2)]
    fresh = make_iter()
    with checkpoint.Checkpointer(str(tmp_path)) as ckpt:
        ckpt.restore({"w": jnp.zeros(1)}, data_iter=fresh)
    got = [next(fresh) for _ in range(2)]
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(e, g)


_KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import jax, jax.numpy as jnp
    from vlajax.training import checkpoint
    d = sys.argv[1]
    ckpt = checkpoint.Checkpointer(d, async_save=True)
    ckpt.save(1, {"w": jnp.full((1024, 1024), 1.0)}, extra={"step": 1})
    ckpt.wait()
    # A large second save (~400 MB); the process is killed while its background write runs, once the
    # write's temporary directory exists (on a loaded machine it can appear after save() returns).
    big = {"w": jnp.full((1024, 1024), 2.0), "big": jnp.ones((100, 1024, 1024), jnp.float32)}
    ckpt.save(2, big, extra={"step": 2})
    deadline = time.monotonic() + 120
    while not any("tmp" in n for n in os.listdir(d)) and "2" not in os.listdir(d) and time.monotonic() < deadline:
        time.sleep(0.001)
    print("SAVE_STARTED", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_sigkill_during_async_save_keeps_last_complete_checkpoint(tmp_path):
    script = tmp_path / "kill_during_save.py"
    script.write_text(_KILL_SCRIPT)
    d = str(tmp_path / "ckpt")
    proc = subprocess.run(
        [sys.executable, str(script), d],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "SAVE_STARTED" in proc.stdout
    leftovers = sorted(os.listdir(d))
    # The interrupted save left only a temporary directory, never a finished step 2.
    assert "1" in leftovers and "2" not in leftovers, leftovers
    assert any("tmp" in name for name in leftovers), leftovers
    with checkpoint.Checkpointer(d) as ckpt:
        assert ckpt.latest_step() == 1
        restored, extra = ckpt.restore({"w": jnp.zeros((1024, 1024))})
        assert extra == {"step": 1}
        np.testing.assert_array_equal(np.asarray(restored["w"]), 1.0)
        # The directory stays usable: the same step can be saved again and read back.
        ckpt.save(2, {"w": jnp.full((1024, 1024), 3.0)}, extra={"step": 2}, force=True)
        ckpt.wait()
        assert ckpt.latest_step() == 2
