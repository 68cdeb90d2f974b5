"""The physics lever: the RL rollout runs on MJX or C MuJoCo (`env.physics_impl` 'jax' / 'c')
through the same jitted `rl.rollout.rollout`, and `bench rollout --physics` times both side by side."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import EnvConfig
from vlajax.rl import actors, mlp_policy
from vlajax.rl import rollout as ro

B, H, T = 2, 2, 3


def _collect(physics_impl: str):
    env = ro.make_env(EnvConfig(task="goal/stack", obs_mode="state", num_envs=B, episode_length=8,
                                physics_impl=physics_impl), H)
    state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, B)))(jax.random.key(0))
    model = mlp_policy.MLPActorCritic(action_horizon=H, action_dim=4, hidden=(16,), value_hidden=(16,))
    params = model.init(jax.random.key(1), jnp.zeros((1, state.obs.shape[-1])))["params"]
    fn = jax.jit(functools.partial(ro.rollout, actors.mlp_actor(model, True), env, length=T, auto_reset=True))
    _, traj = fn(params, state, jax.random.key(2), version=0)
    return jax.device_get(traj)


def test_rl_rollout_runs_on_c_physics_and_follows_mjx():
    mjx, c = _collect("jax"), _collect("c")
    assert jax.tree.structure(mjx) == jax.tree.structure(c)
    for a, b in zip(jax.tree.leaves(mjx), jax.tree.leaves(c)):
        assert a.shape == b.shape and a.dtype == b.dtype
    # the same keys draw the same actions from the same first observation (resets are pose-only, identical)
    np.testing.assert_allclose(mjx["obs"][0], c["obs"][0], atol=1e-5)
    np.testing.assert_allclose(mjx["actions"][0], c["actions"][0], atol=1e-5)
    # after stepping, C MuJoCo (float64, its own solver) follows MJX closely but not bit for bit
    assert np.max(np.abs(mjx["obs"][1] - c["obs"][1])) < 0.05
    assert not np.array_equal(mjx["obs"][1], c["obs"][1]) or np.array_equal(mjx["obs"][0], mjx["obs"][1])


def test_bench_rollout_refuses_bad_physics_flags():
    from vlajax.bench.rollout import main

    assert main(["--physics", "mjx", "mjx"]) == 2
    assert main(["--physics", "c", "--num-envs", "0"]) == 2


def _base(env):
    while not hasattr(env, "c_physics"):
        env = env.env
    return env


def test_auto_physics_is_c_on_a_one_device_cpu_host_unless_mjx_is_needed(monkeypatch):
    auto = EnvConfig(task="goal/stack", obs_mode="state", num_envs=2, physics_impl="auto")
    assert jax.default_backend() == "cpu"
    if jax.device_count() > 1:  # the suite's process has several CPU devices: a sharded rollout would use MJX
        assert ro.rollout_physics(auto) == "jax"
    monkeypatch.setattr(jax, "device_count", lambda *a: 1)  # a one-device CPU host, as `rl` runs by default
    assert ro.rollout_physics(auto) == "c" and _base(ro.make_env(auto, H)).c_physics is not None
    assert ro.rollout_physics(EnvConfig(physics_impl="auto", randomize="dynamics=0:1")) == "jax"
    assert ro.rollout_physics(EnvConfig(physics_impl="auto", robustness="all")) == "jax"  # all has dynamics
    # the default is 'auto' (experiments/physics-default/README.md): C here, MJX when asked for
    assert EnvConfig().physics_impl == "auto"
    assert _base(ro.make_env(EnvConfig(task="goal/stack", obs_mode="state", num_envs=2), H)).c_physics is not None
    mjx = EnvConfig(task="goal/stack", obs_mode="state", num_envs=2, physics_impl="jax")
    assert _base(ro.make_env(mjx, H)).c_physics is None
    from vlajax.envs import registry  # outside the RL rollout (demos, SFT eval), auto is MJX
    assert registry.config_from_env_config(auto)["physics_impl"] == "jax"


def test_rl_says_which_simulator_its_rollout_steps(monkeypatch, caplog):
    """The default picks a simulator by device, so `rl` logs the one it steps (a state-MLP set-up: no compile)."""
    import dataclasses
    import logging

    from vlajax.config.schema import get_config
    from vlajax.rl import setup

    cfg = get_config("rl-debug")
    cfg = cfg.replace(env=dataclasses.replace(cfg.env, num_envs=2))
    monkeypatch.setattr(jax, "device_count", lambda *a: 1)
    with caplog.at_level(logging.INFO, logger="vlajax.rl.setup"):
        assert setup.build(cfg).env is not None
        setup.build(cfg.replace(env=dataclasses.replace(cfg.env, physics_impl="jax")))
    lines = [r.getMessage() for r in caplog.records if "the rollout steps" in r.getMessage()]
    assert lines == ["rl: the rollout steps C MuJoCo on the host (env.physics_impl='auto'; docs/envs.md)",
                     "rl: the rollout steps MJX (env.physics_impl='jax'; docs/envs.md)"], lines


@pytest.mark.slow
def test_bench_rollout_times_both_simulators_side_by_side(tmp_path):
    import json

    from vlajax.bench.rollout import main

    out = tmp_path / "rollout.json"
    assert main(["--physics", "mjx", "c", "--heads", "tokens", "--model", "default", "--num-envs", "2",
                 "--decisions", "1", "--repeats", "2", "--episode-length", "16", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [(r["head"], r["physics"], r["physics_impl"]) for r in res["rows"]] == [("tokens", "mjx", "jax"),
                                                                                    ("tokens", "c", "c")]
    assert all(r["decisions_per_s"] > 0 and len(r["seconds"]) == 2 for r in res["rows"])
    ratio = res["paired_ratios"]["tokens"]["c_over_mjx"]
    assert ratio["min"] <= ratio["median"] <= ratio["max"] and res["command"].startswith("python -m vlajax.bench")
