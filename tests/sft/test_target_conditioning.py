"""`model.target_conditioning` in SFT: the action head is teacher-forced with the demo's own
target (+ `sft.target_noise`), the aux head is trained only by its own loss; refusals are one `error:` line."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from tests.sft.test_aux_target import _aux_config, grasp_dataset  # noqa: F401 (fixture)
from tests.sft.test_sft import _batches
from vlajax import train as train_cli
from vlajax.models.vla import VLA
from vlajax.policies.run_files import init_fn
from vlajax.sft.loop import loss_fn


def _params(cfg, cams):
    params = jax.jit(init_fn(cfg, cams))(jax.random.key(0)).params
    return jax.tree.map(lambda x: getattr(x, "value", x), params, is_leaf=lambda x: hasattr(x, "value"))


@pytest.mark.slow  # 208 s on 2 shared cores at load 6 (compiles)
def test_teacher_forcing_uses_the_demo_target(grasp_dataset, tmp_path):  # noqa: F811
    cfg = _aux_config(grasp_dataset[0], str(tmp_path))
    cfg = cfg.replace(model=dataclasses.replace(cfg.model, target_conditioning=True))
    cams, fixed, packed, _ = _batches(cfg)
    params = _params(cfg, cams)
    assert "target_in" in params
    model = VLA(cfg.model)
    f = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3)))
    (ref, m_ref), (got, _) = f(params, fixed), f(params, packed)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)  # packed = padded with the condition
    assert float(m_ref["target_pred_mse"]) > 0
    # the action loss depends on the batch's target (teacher forcing), and on the noise
    _, m_shift = f(params, {**fixed, "aux_target": fixed["aux_target"] + 1.0})
    assert abs(float(m_shift["flow_mse"]) - float(m_ref["flow_mse"])) > 1e-6
    assert float(m_shift["aux_target_mse"]) != float(m_ref["aux_target_mse"])
    _, m_noise = jax.jit(lambda p, b: loss_fn(p, model, b, jax.random.key(3), target_noise=0.5))(params, fixed)
    assert float(m_noise["flow_mse"]) != float(m_ref["flow_mse"])
    # the action loss trains target_in and not the aux head (the condition is the demo's, not the prediction)
    g = jax.grad(lambda p: loss_fn(p, model, fixed, jax.random.key(3))[1]["flow_mse"])(params)
    assert max(float(np.abs(x).max()) for x in jax.tree.leaves(g["target_in"])) > 0
    assert all(float(np.abs(x).max()) == 0 for x in jax.tree.leaves(g["aux_out"]))


@pytest.mark.slow  # 151 s on 2 shared cores at load 6 (compiles)
def test_off_loss_is_unchanged(grasp_dataset, tmp_path):  # noqa: F811
    cfg = _aux_config(grasp_dataset[0], str(tmp_path))
    cams, fixed, _, _ = _batches(cfg)
    params = _params(cfg, cams)
    model = VLA(cfg.model)
    a = jax.jit(lambda p: loss_fn(p, model, fixed, jax.random.key(3)))(params)
    b = jax.jit(lambda p: loss_fn(p, model, fixed, jax.random.key(3), aux_weight=1.0, target_noise=0.0))(params)
    np.testing.assert_array_equal(a[0], b[0])
    assert "target_pred_mse" not in a[1]


def test_refusals_are_one_error_line(grasp_dataset, tmp_path, capsys):  # noqa: F811
    root = grasp_dataset[0]
    base = ["sft", "--preset", "sft-tiny", "--data.dataset-dir", root, "--logging.progress", "none"]
    code = train_cli.main(base + ["--output-dir", str(tmp_path / "a"), "--model.target-conditioning"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: model.target_conditioning needs"), err
    code = train_cli.main(base + ["--output-dir", str(tmp_path / "b"), "--model.aux-target", "grasp_place",
                                  "--sft.target-noise", "0.1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: sft.target_noise=0.1 needs"), err
