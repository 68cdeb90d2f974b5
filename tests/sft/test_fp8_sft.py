"""`--model.fp8 flax` trains: the train state carries Flax's FP8 collections (scales and amax
histories, updated by overwrite-with-gradient) through steps, checkpoints and resume.

The quick test trains a two-layer FP8 MLP with `TrainState` (the same collection handling as
`sft.train_step`); the slow one runs the real CLI on the tiny VLA (30 steps, loss decreases,
f8 dots in the compiled step, then a resume)."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

from tests.sft.conftest import write_dataset
from vlajax.models.fp8 import OWG
from vlajax.training.train_state import TrainState

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Fp8MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(32, dot_general_cls=nn.Fp8DirectDotGeneralOp)(x))
        return nn.Dense(4, dot_general_cls=nn.Fp8DirectDotGeneralOp)(h)


def test_train_state_carries_fp8_collections_through_steps():
    model = _Fp8MLP()
    x = jax.random.normal(jax.random.key(0), (64, 8))
    y = x[:, :4] * 2.0
    params, cols = TrainState.split(model.init(jax.random.key(1), x))
    assert cols is not None and OWG in cols
    state = TrainState.create(params, optax.adam(1e-2), jax.random.key(2), collections=cols)

    def loss(p, c):
        return jnp.mean((model.apply({"params": p, **c}, x) - y) ** 2)

    @jax.jit
    def step(s):
        value, (g, gc) = jax.value_and_grad(loss, argnums=(0, 1))(s.params, s.collections)
        return s.apply_gradients(g, collections=gc), value

    hlo = step.lower(state).compile().as_text()
    assert "f8e4m3fn" in hlo  # the dots run in FP8
    first = jax.tree.map(jnp.copy, state.collections)
    losses = []
    for _ in range(30):
        state, value = step(state)
        losses.append(float(value))
    assert losses[-1] < 0.5 * losses[0]
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), first, state.collections)
    assert any(jax.tree.leaves(moved))  # the amax histories / scales were overwritten, not frozen
    assert int(state.step) == 30


def _summary(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    assert lines, stdout[-3000:]
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fp8_flax_sft_through_the_cli_trains_checkpoints_and_resumes(tmp_path):
    data = write_dataset(str(tmp_path / "demos"))
    out, dump = str(tmp_path / "run"), str(tmp_path / "hlo")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
           "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text"}

    def sft(steps: int) -> dict:
        p = subprocess.run([sys.executable, "-m", "vlajax.train", "sft", "--preset", "sft-tiny",
                            "--data.dataset-dir", data, "--output-dir", out, "--model.fp8", "flax",
                            "--sft.num-steps", str(steps), "--sft.eval-every", "-1", "--logging.progress", "none"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
        assert p.returncode == 0, p.stderr[-3000:]
        return _summary(p.stdout)

    first = sft(30)
    assert first["start_step"] == 0 and first["steps"] == 30
    assert first["final_loss"] < first["first_loss"]
    compiled = glob.glob(os.path.join(dump, "*after_optimizations.txt"))
    assert any("f8e4m3fn" in pathlib.Path(f).read_text() for f in compiled), "no f8 dot in any compiled module"
    resumed = sft(32)  # the checkpoint of step 30 (FP8 collections included) restores and trains on
    assert resumed["start_step"] == 30 and resumed["steps"] == 32


@pytest.mark.gpu
@pytest.mark.timeout(1800)
def test_fp8_te_sft_runs_inside_autocast_with_the_mesh_resource(tmp_path):
    """GPU + Transformer Engine only: SFT with `model.fp8='te'` (init and steps inside TE's
    autocast with our mesh's dp/tp axes) trains a few steps."""
    import dataclasses

    from tests.sft.conftest import tiny_config
    from vlajax.models.attention import te_available
    from vlajax.sft.loop import train

    if not te_available():
        pytest.skip("needs Transformer Engine and a GPU")
    cfg = tiny_config(write_dataset(str(tmp_path / "demos")), str(tmp_path / "run"), num_steps=5, eval_every=-1)
    out = train(cfg.replace(model=dataclasses.replace(cfg.model, fp8="te")))
    assert out["steps"] == 5 and all(v == v for v in out["losses"])
