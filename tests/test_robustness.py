"""`eval --robustness`: the per-axis/level table from one compiled closed loop, its files, the RL
hook's numbers, and the CLI's refusals (before anything compiles)."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax import train
from vlajax.config.schema import ConfigError, get_config
from vlajax.data.normalize import NormStats
from vlajax.envs import perturb
from vlajax.evaluation import robustness
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge


def _stats(d):
    return NormStats(mean=np.zeros(d, np.float32), std=np.ones(d, np.float32),
                     q01=np.full(d, -1.0, np.float32), q99=np.full(d, 1.0, np.float32))


def test_plan_and_cli_refusals(capsys):
    assert robustness.plan("camera=2:3,language") == [("none", 0), ("camera", 2), ("camera", 3),
                                                      ("language", 1), ("language", 2)]
    assert len(robustness.plan("all")) == 1 + sum(a.max_level for a in perturb.AXES)
    with pytest.raises(ConfigError):
        robustness.plan("camera=0")  # level 0 is the baseline row, always run
    # a bare --robustness means every axis; a bad spec is one error: line, exit 2, before any load
    assert train.parse("eval", ["--robustness", "--suite", "goal"]).env.robustness == "all"
    assert train.parse("eval", ["--robustness", "camera,noise"]).env.robustness == "camera,noise"
    assert train.main(["eval", "--robustness", "cam=1", "--checkpoint", "/nonexistent"]) == 2
    assert "error:" in capsys.readouterr().err
    assert train.main(["eval", "--robustness", "dynamics", "--env.physics-impl", "c"]) == 2


@pytest.mark.slow  # ~1-2 min of compiles on an idle 2-core CPU (12 min under this session's load)
def test_one_compile_for_every_axis_and_level(tmp_path):
    cfg = get_config("sft-tiny")
    model_cfg = dataclasses.replace(cfg.model, action_dim=4)
    cfg = cfg.replace(output_dir=str(tmp_path), compilation_cache_dir="", model=model_cfg,
                      env=dataclasses.replace(cfg.env, suite="goal", task="goal/press_button", image_size=16,
                                              episode_length=4, robustness="camera=3,language=2"))
    bridge = Bridge(model_cfg, ("agentview", "wrist"), {"actions": _stats(4), "state": _stats(8)})
    model = VLA(model_cfg)
    obs = {"pixels/agentview": np.zeros((1, 16, 16, 3), np.uint8), "pixels/wrist": np.zeros((1, 16, 16, 3), np.uint8),
           "state": np.zeros((1, 8), np.float32), "instruction_id": np.zeros((1,), np.int32)}
    params = jax.jit(model.init)(jax.random.key(0), bridge.observation(obs, 11))["params"]
    out = tmp_path / "rob"
    res = robustness.evaluate_robustness(cfg, bridge, model, params, episodes_per_task=2, out_dir=str(out))
    (run,) = robustness._RUNNERS.values()
    assert run._cache_size() == 1  # the baseline and all levels: one compiled closed loop
    assert set(res["success"]) == {"none", "camera", "language"}
    assert set(res["success"]["camera"]) == {3} and res["episodes"] == 3 * 2
    assert set(res["summary"]) == {"camera", "language"}
    assert res["summary"]["camera"]["drop_at_max"] == pytest.approx(res["baseline"] - res["mean"]["camera"][3])
    md = (out / "robustness.md").read_text()
    assert "| camera | 3 |" in md and "| language | 2 |" in md and "Success drop per axis" in md
    saved = json.loads((out / "robustness.json").read_text())
    assert saved["spec"] == "camera=3,language=2"
    assert saved["replan_steps"] == (cfg.sft.eval_replan_steps or model_cfg.action_horizon)
    assert saved["physics"] == "jax"
    assert (out / "robustness.png").stat().st_size > 0
    # 4 control steps cannot press the button: every episode fails, so each axis has its failure GIF
    assert sorted(os.listdir(out)) == ["failure__camera.gif", "failure__language.gif", "robustness.json",
                                       "robustness.md", "robustness.png"]  # no temporary files left
    assert saved["failure_gifs"]["camera"]["file"] == "failure__camera.gif"  # the saved JSON names its GIFs


def test_the_dynamics_axis_changes_what_env_step_does():
    """The dynamics axis through `env.step` itself (fast: state observations, one compile for both levels):
    from the same reset and the same actions, level 3 (friction x0.4, mass x2.5, servo gain scaled) moves
    the gripper differently from level 0. An env whose step ignored the axis (stepped the unscaled model)
    would give identical states and fail here; the reset states are identical (the axis acts per step)."""
    from vlajax.envs import registry

    env = registry.load("goal/press_button", obs_mode="state", physics_impl="jax")
    actions = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (2, 4)), jnp.float32)

    @jax.jit
    def run(levels):
        s0 = env.reset(jax.random.key(3), levels=levels)
        s = jax.lax.scan(lambda s, a: (env.step(s, a), None), s0, actions)[0]
        return s0.data.qpos, s.data.qpos

    g = list(env.idx.gripper_qpos)
    (q0_base, q_base), (q0_top, q_top) = (jax.device_get(run(jnp.asarray(perturb.levels(dynamics=lv))))
                                          for lv in (0, 3))
    np.testing.assert_array_equal(q0_top, q0_base)  # the same start
    assert np.abs(q_top[g] - q_base[g]).max() > 1e-4  # the same actions, another model
