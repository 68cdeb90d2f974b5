"""The synchronous RL loop: exact resume, non-finite stop with the last good checkpoint intact,
learning on a toy task, and (slow) the CLI on the real tabletop env."""

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.rl import rollout_toy as toy
from vlajax.config.schema import (
    CheckpointConfig,
    ConfigError,
    EnvConfig,
    LoggingConfig,
    ModelConfig,
    RLConfig,
    TrainConfig,
    get_config,
)
from vlajax.rl import actors, command, learner, loop, mlp_policy
from vlajax.rl import rollout as ro
from vlajax.rl import setup as rl_setup
from vlajax.training import checkpoint

B, H, EP = 8, 2, 12


def toy_setup(cfg, poison_from=None):
    """A loop Setup over the toy env. `poison_from=v`: log-probs become NaN for policy version >= v."""
    env = toy.make_env(B, H, EP)
    model = mlp_policy.MLPActorCritic(action_horizon=H, action_dim=4, hidden=(16, 16), value_hidden=(16, 16))
    actor = actors.mlp_actor(model, use_value=cfg.rl.algo == "ppo")
    if poison_from is not None:
        base = actor.logp_value

        def poisoned(params, batch, rng):
            logp, ent, val = base(params, batch, rng)
            if "version" not in batch:  # the rollout's own scoring: stays finite
                return logp, ent, val
            return jnp.where(batch["version"] >= poison_from, jnp.nan, logp), ent, val

        actor = dataclasses.replace(actor, logp_value=poisoned)
    eval_env = toy.make_env(2 * 4, H, EP)
    run_eval = jax.jit(lambda p, k: ro.evaluate(actor, eval_env, p, k, jnp.repeat(jnp.arange(2), 4), EP // H))

    def evaluate(params, iteration):
        s = np.asarray(run_eval(params, jax.random.key(7))["success"])
        return {"mean_success": float(s.mean()), "per_task": {"t0": float(s[:4].mean()), "t1": float(s[4:].mean())}}

    return rl_setup.Setup(actor, env, lambda k: model.init(k, jnp.zeros((1, toy.OBS_DIM)))["params"], evaluate, H,
                      ro.decisions_per_episode(EP, H))


def toy_config(tmp_path, algo="ppo", iterations=4, **rl):
    rl_cfg = RLConfig(algo=algo, num_iterations=iterations, rollout_length=4, group_size=4, num_minibatches=2,
                      update_epochs=2, learning_rate=3e-3, eval_every=2, **rl)
    return TrainConfig(
        output_dir=str(tmp_path), compilation_cache_dir="",
        env=EnvConfig(num_envs=B, episode_length=EP, obs_mode="state"), rl=rl_cfg,
        checkpoint=CheckpointConfig(every_steps=1, async_save=False, max_to_keep=10),
        logging=LoggingConfig(every_steps=1, progress="none", tensorboard=False),
    )


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_resume_continues_identically(tmp_path, algo):
    full_cfg = toy_config(tmp_path / "full", algo)
    full = loop.train(full_cfg, toy_setup(full_cfg))
    cut_cfg = toy_config(tmp_path / "cut", algo)
    first = loop.train(cut_cfg, toy_setup(cut_cfg), stop_at=2)
    assert first["start_iteration"] == 0 and len(first["history"]) == 2
    resumed = loop.train(cut_cfg, toy_setup(cut_cfg))
    assert resumed["start_iteration"] == 2 and len(resumed["history"]) == 2
    for a, b in zip(jax.tree.leaves(full["state"]), jax.tree.leaves(resumed["state"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    strip = lambda hs: [{k: v for k, v in h.items() if k != "env_steps_per_s"} for h in hs]
    assert strip(full["history"][2:]) == strip(resumed["history"])
    assert full["env_steps"] == resumed["env_steps"]
    assert [e["iteration"] for e in full["evals"]] == [0, 2, 4]  # the starting policy, then every 2
    assert [e["mean_success"] for e in full["evals"]] == [e["mean_success"] for e in first["evals"] + resumed["evals"]]


def test_nonfinite_stops_with_last_good_checkpoint(tmp_path):
    clean_cfg = toy_config(tmp_path / "clean", iterations=2)
    clean = loop.train(clean_cfg, toy_setup(clean_cfg))
    cfg = toy_config(tmp_path / "bad", iterations=4)
    with pytest.raises(learner.NonFiniteError, match="non-finite loss or gradient"):
        loop.train(cfg, toy_setup(cfg, poison_from=2))  # iteration index 2 (the third) goes NaN
    ckpt = checkpoint.Checkpointer(os.path.join(tmp_path / "bad", "checkpoints"), async_save=False)
    assert ckpt.latest_step() == 2 and ckpt.all_steps() == [1, 2]
    target = {"train": clean["state"], "env": rl_setup.env_leaves(rl_setup.initial_env_state(cfg, toy_setup(cfg).env))}
    restored, extra = ckpt.restore(checkpoint.abstract_state(target))
    ckpt.close()
    assert extra["iteration"] == 2
    for a, b in zip(jax.tree.leaves(restored["train"].params), jax.tree.leaves(clean["state"].params)):
        assert np.all(np.isfinite(a))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_run_returns_one_line_error_on_nonfinite(tmp_path, monkeypatch, capsys):
    cfg = toy_config(tmp_path, iterations=3)
    monkeypatch.setattr(loop, "build", lambda c, mesh=None: toy_setup(c, poison_from=0))
    assert command.run(cfg) == 1
    out = capsys.readouterr().out
    assert "error: non-finite loss or gradient" in out and "last finite ones" in out


@pytest.mark.parametrize("algo", ["ppo", pytest.param("grpo", marks=pytest.mark.slow)])
def test_loop_learns_toy_reaching(tmp_path, algo):
    cfg = toy_config(tmp_path, algo, iterations=30, entropy_coef=0.0)
    cfg = cfg.replace(rl=dataclasses.replace(cfg.rl, eval_every=30, update_epochs=4, rollout_length=6),
                      env=dataclasses.replace(cfg.env, num_envs=B))
    out = loop.train(cfg, toy_setup(cfg))
    returns = [h["episode_return"] for h in out["history"]]
    print(algo, np.round(returns, 2))
    assert np.mean(returns[-5:]) > np.mean(returns[:5]) + 1.0, returns


@pytest.mark.slow
@pytest.mark.entry
def test_cli_trains_and_resumes_on_tabletop(tmp_path):
    """`python -m vlajax.train rl --preset rl-debug`: 2 iterations, then resume to 3."""
    base = [sys.executable, "-m", "vlajax.train", "rl", "--preset", "rl-debug", "--output-dir", str(tmp_path),
            "--logging.progress", "plain"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run(base, capture_output=True, text=True, env=env, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"start_iteration": 0' in r.stdout
    r = subprocess.run([*base, "--rl.num-iterations", "3"], capture_output=True, text=True, env=env, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"start_iteration": 2' in r.stdout and '"iterations": 3' in r.stdout
    assert os.listdir(tmp_path / "tb")


def test_eval_seed_fixes_the_evaluation_episodes_across_run_seeds(monkeypatch):
    """The evaluation's episode key comes from rl.eval_seed (or the run's seed when it is -1)."""
    seen = []
    real = ro.evaluate

    def spy(actor, env, params, rng, task_id, length):
        jax.debug.callback(lambda k: seen.append(np.asarray(k)), jax.random.key_data(rng))  # runs under jit
        return real(actor, env, params, rng, task_id, length)

    monkeypatch.setattr(ro, "evaluate", spy)
    cfg = dataclasses.replace(get_config("rl-mlp-state"), env=EnvConfig(
        suite="goal", task="goal/press_button", obs_mode="state", num_envs=4, episode_length=8))
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, eval_episodes_per_task=2))
    for seed, eval_seed in ((0, -1), (1, 0), (1, -1)):
        c = dataclasses.replace(cfg, seed=seed, rl=dataclasses.replace(cfg.rl, eval_seed=eval_seed))
        setup = rl_setup.build(c)
        setup.evaluate(setup.init_params(jax.random.key(0)), 0)
    assert rl_setup.eval_seed(dataclasses.replace(cfg, seed=5)) == 5
    np.testing.assert_array_equal(seen[0], seen[1])  # seed 1 evaluated on seed 0's episodes
    assert not np.array_equal(seen[0], seen[2])


def test_privileged_critic_needs_pixels():
    cfg = get_config("rl-mlp-state")
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, critic="privileged"))
    with pytest.raises(ConfigError, match="privileged"):
        rl_setup.build(cfg)


def test_rl_presets_validate():
    from vlajax.config.schema import get_config, preset_names

    names = [n for n in preset_names() if n.startswith("rl-")]
    assert {"rl-debug", "rl-mlp-state"} <= set(names)
    for n in names:
        cfg = get_config(n)
        assert cfg.name == n and cfg.output_dir.startswith("runs/")
    assert isinstance(get_config("rl-debug").model, ModelConfig)


def test_init_from_merge_keeps_new_heads_and_loads_the_rest():
    import flax.linen as nn

    fresh = {"a": nn.LogicallyPartitioned(jnp.zeros((2, 3)), ("embed", "mlp")), "value_head": {"w": jnp.ones(2)}}
    loaded = {"a": np.full((2, 3), 5.0, np.float32)}
    out = rl_setup.merge_params(fresh, loaded)
    assert isinstance(out["a"], nn.LogicallyPartitioned) and out["a"].names == ("embed", "mlp")
    np.testing.assert_array_equal(np.asarray(out["a"].value), 5.0)
    np.testing.assert_array_equal(np.asarray(out["value_head"]["w"]), 1.0)


def test_start_params_from_a_policy_with_every_leaf_compiles_no_random_init():
    """RL from `rl.init_from`: the jitted init takes the loaded params as arguments (not constants) and, when they
    cover every leaf, runs and compiles no RNG; with a new head the fresh init runs for it (and only it is kept)."""
    import flax.linen as nn

    def init_params(rng):
        k1, k2 = jax.random.split(rng)
        return {"a": nn.with_logical_partitioning(nn.initializers.normal(1.0), ("embed", "mlp"))(k1, (2, 3)),
                "value_head": {"w": jax.random.normal(k2, (2,))}}

    full = {"a": np.full((2, 3), 5.0, np.float32), "value_head": {"w": np.full((2,), 7.0, np.float32)}}
    setup = rl_setup.Setup(None, None, init_params, None, 1, 1, loaded=full)
    init = jax.jit(lambda rng, loaded: nn.unbox(setup.start_params(rng, loaded)))
    hlo = init.lower(jax.random.key(0), full).as_text()
    assert "threefry" not in hlo and "rng_bit_generator" not in hlo and "5.000000e+00" not in hlo, hlo
    out = init(jax.random.key(0), full)
    np.testing.assert_array_equal(np.asarray(out["a"]), 5.0)
    np.testing.assert_array_equal(np.asarray(out["value_head"]["w"]), 7.0)
    boxed = setup.start_params(jax.random.key(0))  # eager, from setup.loaded: the logical names kept
    assert isinstance(boxed["a"], nn.LogicallyPartitioned) and boxed["a"].names == ("embed", "mlp")

    part = {"a": full["a"]}  # a new head: initialized fresh, the rest loaded
    hlo = init.lower(jax.random.key(0), part).as_text()
    assert "threefry" in hlo or "rng_bit_generator" in hlo
    out = init(jax.random.key(0), part)
    np.testing.assert_array_equal(np.asarray(out["a"]), 5.0)
    w = np.asarray(out["value_head"]["w"])
    np.testing.assert_array_equal(w, np.asarray(init_params(jax.random.key(0))["value_head"]["w"]))
    assert not np.allclose(w, 7.0)
    assert rl_setup.covers(full, init_params(jax.random.key(0))) and not rl_setup.covers(part, init_params(
        jax.random.key(0)))


def test_critic_warmup_trains_only_the_critic_and_value_lr_applies(tmp_path):
    """During `critic_warmup_iterations` the actor's params stay put while the critic learns;
    `value_learning_rate` gives the critic its own Adam rate (first Adam step moves a leaf by ~lr)."""
    cfg = toy_config(tmp_path / "warm", iterations=1, critic_warmup_iterations=1, value_learning_rate=1e-1)
    cfg = cfg.replace(rl=dataclasses.replace(cfg.rl, eval_every=0, update_epochs=1, num_minibatches=1))
    setup = toy_setup(cfg)
    start = setup.init_params(jax.random.key(cfg.seed))
    out = loop.train(cfg, setup)
    after = out["state"].params
    assert learner.critic_labels(after)["critic"]["Dense_0"]["kernel"] == "critic"
    for a, b in zip(jax.tree.leaves(start["actor"]), jax.tree.leaves(after["actor"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # no policy gradient while warming up
    moved = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(jax.tree.leaves(start["critic"]), jax.tree.leaves(after["critic"]))]
    assert max(moved) > 0.05, moved  # one Adam step at 1e-1 (the policy rate is 3e-3)
    # After the warm-up the policy trains again.
    cfg2 = cfg.replace(rl=dataclasses.replace(cfg.rl, num_iterations=2))
    out2 = loop.train(cfg2, toy_setup(cfg2))
    assert any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(after["actor"]), jax.tree.leaves(out2["state"].params["actor"])))
