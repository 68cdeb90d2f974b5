"""The rollout: chunk-level records, GRPO groups, truncation vs termination, auto-reset, one
trace, and ratio == 1 at the first update on freshly collected data for the MLP and both VLA
heads (flow_sde and tokens) through the policy bridge."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.rl import float_tolerance
from tests.rl import rollout_toy as toy
from vlajax.config.schema import ConfigError, EnvConfig, ModelConfig, RLConfig, TrainConfig
from vlajax.data.normalize import NormStats
from vlajax.models import heads
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.rl import actors, learner, mlp_policy
from vlajax.rl import advantages as adv_lib
from vlajax.rl import rollout as ro
from vlajax.rl import setup as rl_setup
from vlajax.training.train_state import TrainState

B, H = 8, 2


def mlp(use_value=True):
    model = mlp_policy.MLPActorCritic(action_horizon=H, action_dim=4, hidden=(16, 16), value_hidden=(16,))
    params = model.init(jax.random.key(0), jnp.zeros((1, toy.OBS_DIM)))["params"]
    return actors.mlp_actor(model, use_value), params


def collect(actor, env, params, length, group_size=1, auto_reset=True, seed=1):
    state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, B, group_size)))(jax.random.key(seed))
    fn = jax.jit(functools.partial(ro.rollout, actor, env, length=length, auto_reset=auto_reset))
    return state, fn(params, state, jax.random.key(seed + 1), version=3)


def test_records_are_chunk_level_and_consistent():
    actor, params = mlp()
    env = toy.make_env(B, H, episode_length=6)  # 3 decisions per episode unless it succeeds
    _, (_, traj) = collect(actor, env, params, length=7)
    t = 7
    assert traj["obs"].shape == (t, B, toy.OBS_DIM) and traj["actions"].shape == (t, B, H, 4)
    assert traj["action_mask"].shape == (t, B, H) and traj["last_value"].shape == (B,)
    assert np.all(np.asarray(traj["version"]) == 3)
    done, trunc, term = (np.asarray(traj[k]) for k in ("done", "truncated", "terminated"))
    np.testing.assert_array_equal(done, trunc | term)
    assert not np.any(trunc & term)
    assert trunc.sum() > 0  # time limits hit (a random policy rarely succeeds)
    # Episode lengths of finished episodes: 6 steps when truncated, <= 6 when terminated.
    lengths = np.asarray(traj["episode_length"])
    assert np.all(lengths[trunc] == 6) and np.all(lengths[term] <= 6) and np.all(lengths[~done] == 0)
    # Continuing mode: every decision is valid, and an env's first decision after a done is a new episode.
    assert np.all(np.asarray(traj["valid"]))
    obs = np.asarray(traj["obs"])
    k, b = np.argwhere(done[:-1])[0]
    assert not np.allclose(obs[k + 1, b], obs[k, b])
    # Chunk reward = the sum of the executed low-level rewards; the returns add up per episode.
    ret = np.asarray(traj["episode_return"])
    rewards = np.asarray(traj["rewards"])
    for b in range(B):
        ends = np.flatnonzero(done[:, b])
        starts = np.concatenate([[0], ends[:-1] + 1])
        for s, e in zip(starts, ends):
            np.testing.assert_allclose(ret[e, b], rewards[s : e + 1, b].sum(), rtol=1e-5)


def test_truncation_bootstraps_from_the_final_observation():
    actor, params = mlp()
    env = toy.make_env(B, H, episode_length=4)
    _, (_, traj) = collect(actor, env, params, length=5)
    trunc = np.asarray(traj["truncated"])
    final = np.asarray(traj["final_values"])
    assert trunc.any()
    # V(final obs) differs from V(first obs of the next episode) that the next row holds.
    k, b = np.argwhere(trunc[:-1])[0]
    assert not np.isclose(final[k, b], np.asarray(traj["old_values"])[k + 1, b])
    inputs = ro.advantage_inputs(traj)
    np.testing.assert_array_equal(np.asarray(inputs.next_values)[trunc], final[trunc])
    # GAE on a truncated step: delta = r + gamma * V(final) - V(s).
    adv, _ = adv_lib.gae(inputs.rewards, inputs.values, inputs.next_values, inputs.terminated, inputs.done, 0.9, 0.0)
    r, v = np.asarray(traj["rewards"]), np.asarray(traj["old_values"])
    np.testing.assert_allclose(np.asarray(adv)[k, b], r[k, b] + 0.9 * final[k, b] - v[k, b], rtol=1e-5, atol=1e-6)


def test_grpo_groups_share_initial_states_and_play_one_episode():
    actor, params = mlp(use_value=False)
    env = toy.make_env(B, H, episode_length=6)
    state, (_, traj) = collect(actor, env, params, length=5, group_size=4, auto_reset=False)
    first = np.asarray(state.obs)
    np.testing.assert_array_equal(first[:4], np.broadcast_to(first[0], (4, toy.OBS_DIM)))
    np.testing.assert_array_equal(first[4:], np.broadcast_to(first[4], (4, toy.OBS_DIM)))
    assert not np.allclose(first[0], first[4])
    assert "old_values" not in traj
    # One episode per env: after its done every decision is invalid and executes nothing.
    done, valid = np.asarray(traj["done"]), np.asarray(traj["valid"])
    assert np.all(done.sum(0) == 1)  # 3 decisions of 2 steps = the 6-step limit, within 5 decisions
    for b in range(B):
        e = np.flatnonzero(done[:, b])[0]
        assert valid[: e + 1, b].all() and not valid[e + 1 :, b].any()
        assert not np.asarray(traj["action_mask"])[e + 1 :, b].any()
    cfg = RLConfig(algo="grpo", group_size=4)
    res = adv_lib.get_estimator("grpo")(cfg, ro.advantage_inputs(traj))
    batch = ro.learner_batch(traj, res)
    assert batch["mask"].shape == (B * 5,) and not np.any(np.asarray(batch["mask"]) & ~np.asarray(
        learner.flatten_decisions(traj["valid"])))


def test_balanced_task_ids_deal_every_task_its_share_of_groups():
    env = toy.make_env(12, H, task_ids=(0, 3, 5))
    for seed in range(4):
        ids = np.asarray(ro.balanced_task_ids(env, jax.random.key(seed), 12, group_size=2))
        groups = ids.reshape(6, 2)
        assert (groups[:, 0] == groups[:, 1]).all()  # one task per group
        assert sorted(np.bincount(groups[:, 0], minlength=6)[[0, 3, 5]]) == [2, 2, 2]
    starts = {int(ro.balanced_task_ids(env, jax.random.key(s), 12, 4)[0]) for s in range(20)}
    assert starts == {0, 3, 5}  # the first group's task rotates with the key
    with pytest.raises(ValueError, match="groups of 5"):
        ro.balanced_task_ids(env, jax.random.key(0), 12, 5)


def test_reset_into_given_tasks_matches_reset_task():
    env = toy.make_env(6, H, task_ids=(0, 3, 5))
    keys = ro.group_keys(jax.random.key(2), 6, 2)
    tasks = jnp.asarray([5, 5, 0, 0, 3, 3], jnp.int32)
    state = jax.jit(lambda k, t: ro.reset(env, k, t))(keys, tasks)
    np.testing.assert_array_equal(np.asarray(state.info["episode"]["task_id"]), np.asarray(tasks))
    inner = jax.vmap(ro._suite(env).reset_task)(keys, tasks)  # the suite's own per-task reset
    np.testing.assert_array_equal(np.asarray(state.obs), np.asarray(inner.obs))
    assert float(jnp.sum(state.info["rl_return"])) == 0 and float(jnp.sum(state.info["steps"])) == 0
    with pytest.raises(ValueError, match="task_id"):
        ro.reset(env, keys, tasks[:3])


def test_reset_done_resets_and_renders_only_the_finished_envs():
    """Auto-reset: rows of finished envs become the fresh reset of their key, the others are
    left bit for bit as they were (the reset runs per finished env, not for the whole batch)."""
    actor, params = mlp()
    env = toy.make_env(B, H, episode_length=6)
    state, _ = collect(actor, env, params, length=1)[1]  # a state one decision in (not a reset state)
    done = jnp.asarray([True, False, False, True, False, False, False, True])
    keys = ro.group_keys(jax.random.key(7), B)
    out = jax.jit(functools.partial(ro.reset_done, env))(done, keys, state)
    fresh = jax.jit(functools.partial(ro.reset, env))(keys)
    d = np.asarray(done)
    for a, f, s in zip(jax.tree.leaves(out), jax.tree.leaves(fresh), jax.tree.leaves(state)):
        a, f, s = np.asarray(a), np.asarray(f), np.asarray(s)
        np.testing.assert_array_equal(a[d], f[d].astype(a.dtype))
        np.testing.assert_array_equal(a[~d], s[~d])
    assert not np.array_equal(np.asarray(state.obs)[d], np.asarray(fresh.obs)[d])  # the reset did something
    none = jax.jit(functools.partial(ro.reset_done, env))(jnp.zeros((B,), bool), keys, state)
    for a, s in zip(jax.tree.leaves(none), jax.tree.leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(s))


def test_final_values_only_for_truncated_envs():
    """V(final obs) of the truncated rows, 0 elsewhere, whichever pass computes it: none truncated,
    at most B // 4 (their rows gathered, including row 0, which the gather also pads with), or more
    (the whole batch) -- the same values as the whole-batch pass."""
    actor, params = mlp()
    env = toy.make_env(B, H, episode_length=6)
    state, _ = collect(actor, env, params, length=1)[1]
    tid = state.info["episode"]["task_id"]
    full = np.asarray(actor.value(params, state.obs, tid))
    fn = jax.jit(lambda t: ro._final_values(actor, params, state.obs, tid, t, jnp.zeros((B,), jnp.float32)))
    for rows in ([], [5], [0, 3], [3, 6], [0, 1, 2, 7], list(range(B))):
        t = np.zeros(B, bool)
        t[rows] = True
        out = np.asarray(fn(jnp.asarray(t)))
        np.testing.assert_allclose(out[t], full[t], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(out[~t], 0.0)


def test_rollout_traces_once():
    actor, params = mlp()
    env = toy.make_env(B, H)
    state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, B)))(jax.random.key(0))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def fn(p, s, k, v):
        return ro.rollout(actor, env, p, s, k, 3, v)

    for i in range(3):
        state, _ = fn(params, state, jax.random.key(i), jnp.int32(i))


def test_evaluate_pins_tasks_and_is_deterministic():
    actor, params = mlp()
    env = toy.make_env(4, H)
    task = jnp.asarray([0, 0, 1, 1])
    fn = jax.jit(lambda p, k: ro.evaluate(actor, env, p, k, task, 6))
    a, b = fn(params, jax.random.key(0)), fn(params, jax.random.key(0))
    for k in a:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    state = ro.reset(env, ro.group_keys(jax.random.key(0), 4), task)
    np.testing.assert_array_equal(np.asarray(state.info["episode"]["task_id"]), [0, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(state.obs)[:, 4:], np.eye(2)[[0, 0, 1, 1]])


# ------------------------------------------------------------------------------------------
# Ratio == 1 on freshly collected data
# ------------------------------------------------------------------------------------------


def _vla(head, per_factor=False, temperature=1.0):
    model, bridge = _model_and_bridge(head)
    env = toy.make_env(B, H, episode_length=6, pixels=True)
    obs0 = bridge.observation(jax.tree.map(lambda x: x[:1], jax.jit(
        lambda k: ro.reset(env, ro.group_keys(k, B)))(jax.random.key(0)).obs), jnp.zeros((1,), jnp.int32))
    params = jax.jit(model.init)(jax.random.key(1), obs0)["params"]
    return actors.vla_actor(model, bridge, temperature=temperature, per_factor=per_factor), params, env


_HEADS = {  # the ModelConfig fields of each tested head
    "flow_sde": dict(flow_sampler="flow_sde", value_head="expert"),
    # the RL presets' flow sampler: x_1 = 0, only the last step stochastic
    "flow_sde_last": dict(flow_sampler="flow_sde", flow_x1="zeros", flow_sde_steps="last", value_head="expert"),
    "tokens": dict(action_head="tokens", num_bins=32),
}


def _model_and_bridge(head):
    mcfg = ModelConfig(image_size=16, patch_size=8, num_cameras=1, action_horizon=H, action_dim=4, **_HEADS[head])
    model = VLA(mcfg)
    def ident(n):
        z, o = np.zeros(n, np.float32), np.ones(n, np.float32)
        return NormStats(mean=z, std=o, q01=-o, q99=o)

    return model, Bridge(mcfg, ("agentview",), {"actions": ident(4), "state": ident(8)})


@pytest.mark.parametrize("head", ["mlp", "flow_sde", "flow_sde_last", "tokens", "tokens_t0.5"])
def test_first_update_on_fresh_data_has_ratio_one_to_rounding(head):
    """`rl_setup.collect` (rollout + advantages + learner batch), then `learner.update`: the first
    update's importance ratio is 1 to float32 rounding. The rollout records the log-densities its
    sampling pass computed (`Actor.act` / `score`, one forward per decision); the learner
    recomputes them from the stored actions / chain / tokens in another XLA program (inside grad
    and three nested scans) that may fuse and round differently -- so the bound is ulp-scaled,
    not bit equality (`tests/rl/float_tolerance.py`): `ULPS_NETWORK` (64) float32 ulps at
    max(1, max|old_logp|); measured up to 9 ulps (flow_sde_last, fresh clone, cold compile
    cache). No clipping. 'tokens_t0.5': rollouts drawn at rl.temperature 0.5, which the
    learner's recomputation uses too."""
    head, _, t_arg = head.partition("_t")
    algo = "grpo" if head == "tokens" else "ppo"
    if head == "mlp":
        (actor, params), env = mlp(), toy.make_env(B, H, episode_length=6)
    else:
        actor, params, env = _vla(head, temperature=float(t_arg or 1.0))
    t = 3 if algo == "grpo" else 4  # GRPO plays the 6-step episode: 3 decisions
    rl = RLConfig(algo=algo, group_size=4, rollout_length=4, update_epochs=1, num_minibatches=1, micro_batches=t,
                  learning_rate=1e-3, filter_zero_advantage=False)
    cfg = TrainConfig(env=EnvConfig(num_envs=B, episode_length=6), rl=rl)
    setup = rl_setup.Setup(actor, env, None, None, H, 3)
    env_state = jax.jit(functools.partial(rl_setup.initial_env_state, cfg, env))()
    _, batch, _ = jax.jit(functools.partial(rl_setup.collect, cfg, setup))(params, env_state, jax.random.key(1),
                                                                      jnp.int32(0))
    assert batch["old_logp"].shape == (B * t,)
    if algo == "grpo":  # a group whose returns tie would have all-zero advantages: give every row a signal
        batch["advantages"] = jnp.asarray(np.random.default_rng(0).standard_normal(B * t), jnp.float32)

    state = TrainState.create(params, learner.make_optimizer(rl), jax.random.key(2))
    _, m = jax.jit(functools.partial(learner.update, rl, actor.logp_value))(jax.random.key(3), state, batch)
    m = jax.device_get(m)
    learner.check_finite(m)
    print(head, "ratio_mean - 1 =", m["ratio_mean"] - 1.0, "approx_kl =", m["approx_kl"])
    tol = float_tolerance.network_logp_tol(batch["old_logp"])
    assert m["updates"] == 1.0 and m["clip_frac"] == 0.0 and m["dual_clip_frac"] == 0.0
    assert abs(m["ratio_mean"] - 1.0) <= 2 * tol and m["approx_kl"] <= (2 * tol) ** 2  # |e^d - 1| <= 2|d|

    # The learner's recomputation outside grad (one piece of all B * t rows): float32 rounding.
    logp, _ = jax.jit(functools.partial(learner.recompute_log_probs, actor.logp_value))(params, batch,
                                                                                      jax.random.key(0))
    diff = np.abs(np.asarray(logp, np.float64) - np.asarray(batch["old_logp"], np.float64))
    print(head, f"{B * t}-row recomputation: max |logp - old_logp| =", diff.max(),
          f"= {diff.max() / tol * float_tolerance.ULPS_NETWORK:.1f} ulps at the bound's scale")
    assert diff.max() <= tol


@pytest.mark.parametrize("head", ["flow_sde_last", "tokens"])
def test_per_entry_log_probs_sum_to_the_decisions_and_start_at_ratio_one(head):
    """rl.ratio_level='factor': the rollout records log-probs [N, H*A] per scored entry with
    `logp_mask`; they sum to the decision-level log-probs of the same draws, and the first update
    on fresh data has every entry's ratio 1 (float32 rounding) and clips nothing."""
    algo = "grpo" if head == "tokens" else "ppo"
    t = 3 if algo == "grpo" else 4
    rl = RLConfig(algo=algo, group_size=4, rollout_length=4, update_epochs=1, num_minibatches=1, micro_batches=t,
                  learning_rate=1e-3, filter_zero_advantage=False, ratio_level="factor")
    cfg = TrainConfig(env=EnvConfig(num_envs=B, episode_length=6), rl=rl)
    batches = {}
    for per_factor in (False, True):
        actor, params, env = _vla(head, per_factor)
        setup = rl_setup.Setup(actor, env, None, None, H, 3)
        env_state = jax.jit(functools.partial(rl_setup.initial_env_state, cfg, env))()
        _, batches[per_factor], _ = jax.jit(functools.partial(rl_setup.collect, cfg, setup))(
            params, env_state, jax.random.key(1), jnp.int32(0))
    whole, per = batches[False], batches[True]
    assert per["old_logp"].shape == per["logp_mask"].shape == (B * t, H * 4) and "logp_mask" not in whole
    np.testing.assert_array_equal(per["action_mask"], whole["action_mask"])  # the same draws
    np.testing.assert_allclose(np.sum(per["old_logp"], -1), whole["old_logp"], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(per["old_logp"])[np.asarray(per["logp_mask"]) == 0] == 0.0)
    if algo == "grpo":
        per["advantages"] = jnp.asarray(np.random.default_rng(0).standard_normal(B * t), jnp.float32)
    state = TrainState.create(params, learner.make_optimizer(rl), jax.random.key(2))
    _, m = jax.jit(functools.partial(learner.update, rl, actor.logp_value))(jax.random.key(3), state, per)
    m = jax.device_get(m)
    learner.check_finite(m)
    r_tol = 2 * float_tolerance.network_logp_tol(per["old_logp"])  # per entry; |e^d - 1| <= 2|d|
    assert m["clip_frac"] == 0.0 and abs(m["ratio_mean"] - 1.0) <= r_tol and m["approx_kl"] <= r_tol**2
    # rl.kl_coef > 0 at ratio_level 'decision' (per-entry log-probs for the KL only): the reference is the policy
    # itself here, so the penalty starts at 0 and the ratios are the decisions' (1 on fresh data)
    rl_kl = dataclasses.replace(rl, ratio_level="decision", kl_coef=0.1)
    with_ref = jax.jit(functools.partial(learner.with_reference, actor.logp_value))(params, per, jax.random.key(0))
    _, m = jax.jit(functools.partial(learner.update, rl_kl, actor.logp_value))(jax.random.key(3), state, with_ref)
    m = jax.device_get(m)
    learner.check_finite(m)
    assert m["kl_ref"] <= 1e-6 and abs(m["ratio_mean"] - 1.0) <= r_tol and m["clip_frac"] == 0.0


def test_kl_coef_gives_the_vla_actor_per_entry_log_probs():
    """rl.kl_coef > 0: the VLA actor records per-entry log-probs (`logp_mask`), whatever rl.ratio_level is, so the
    KL penalty can be estimated per entry; without it the log-probs stay per decision."""
    for kl_coef, per_entry in ((0.0, False), (0.1, True)):
        cfg = TrainConfig(env=EnvConfig(obs_mode="pixels"), model=ModelConfig(**_HEADS["tokens"]),
                          rl=RLConfig(algo="grpo", kl_coef=kl_coef))
        assert (rl_setup.build(cfg).actor.logp_mask is not None) == per_entry


def test_token_temperature_scores_the_draws_at_that_temperature():
    """rl.temperature: the recorded log-prob of each decision is its tokens' log-prob under logits / T (the executed
    step's, as at T = 1), not under the untempered logits; the greedy draw ignores T."""
    model, bridge = _model_and_bridge("tokens")
    _, params, env = _vla("tokens")
    obs = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, B)))(jax.random.key(0)).obs
    task = jnp.zeros((B,), jnp.int32)
    o = bridge.observation(obs, task)
    for t in (0.5, 2.0):
        actor = actors.vla_actor(model, bridge, temperature=t)
        _, record, scores = jax.jit(actor.act)(params, obs, task, jax.random.key(3))
        logp, _ = actor.score(scores, None)
        tempered = heads.token_chunk_log_prob(model, {"params": params}, o, record["tokens"], temperature=t)
        plain = heads.token_chunk_log_prob(model, {"params": params}, o, record["tokens"])
        np.testing.assert_allclose(np.asarray(logp), np.asarray(tempered["log_prob"]), rtol=1e-5, atol=1e-5)
        assert not np.allclose(np.asarray(logp), np.asarray(plain["log_prob"]), rtol=1e-3, atol=1e-3)
        greedy = jax.jit(functools.partial(actor.sample, deterministic=True))(params, obs, task, jax.random.key(3))
        greedy_t1 = jax.jit(functools.partial(actors.vla_actor(model, bridge).sample, deterministic=True))(
            params, obs, task, jax.random.key(3))
        np.testing.assert_array_equal(np.asarray(greedy[1]["tokens"]), np.asarray(greedy_t1[1]["tokens"]))


def test_temperature_is_refused_for_heads_without_bins():
    with pytest.raises(ConfigError, match="rl.temperature"):
        RLConfig(temperature=0.0)
    state_cfg = TrainConfig(env=EnvConfig(obs_mode="state"), rl=RLConfig(temperature=0.5))
    with pytest.raises(ConfigError, match="state MLP"):
        rl_setup.build(state_cfg)
    flow_cfg = TrainConfig(env=EnvConfig(obs_mode="pixels"), model=ModelConfig(**_HEADS["flow_sde_last"]),
                           rl=RLConfig(temperature=0.5))
    with pytest.raises(ConfigError, match="head is 'flow'"):
        rl_setup.build(flow_cfg)


def test_vla_executes_the_first_k_actions_and_scores_only_them():
    _, params, _ = _vla("tokens")
    mcfg = ModelConfig(image_size=16, patch_size=8, num_cameras=1, action_horizon=H, action_dim=4,
                       action_head="tokens", num_bins=32)
    model = VLA(mcfg)
    ident = lambda n: NormStats(mean=np.zeros(n, np.float32), std=np.ones(n, np.float32),
                                q01=-np.ones(n, np.float32), q99=np.ones(n, np.float32))
    bridge = Bridge(mcfg, ("agentview",), {"actions": ident(4), "state": ident(8)})
    actor = actors.vla_actor(model, bridge, execute=1)
    env = toy.make_env(B, 1, episode_length=6, pixels=True)  # one env step per decision
    _, (_, traj) = collect(actor, env, params, length=2)
    assert traj["action_mask"].shape == (2, B, 1) and traj["tokens"].shape == (2, B, H, 4)
    obs = bridge.observation(jax.tree.map(lambda x: x[0], traj["obs"]), traj["task_id"][0])
    full = heads.token_chunk_log_prob(model, {"params": params}, obs, traj["tokens"][0])["log_prob"]
    first = heads.token_chunk_log_prob(model, {"params": params}, obs, traj["tokens"][0],
                                       logp_mask=jnp.asarray([True, False])[None].repeat(B, 0))["log_prob"]
    np.testing.assert_allclose(np.asarray(traj["old_logp"][0]), np.asarray(first), rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.asarray(first), np.asarray(full))


def test_vla_flow_scores_the_whole_chain_of_an_executed_decision():
    """The expert attends across the chunk: the noise of an unexecuted step moves the executed
    actions, so the flow log-prob scores every entry of the chain, not just the executed ones."""
    _, params, _ = _vla("flow_sde")
    mcfg = ModelConfig(image_size=16, patch_size=8, num_cameras=1, action_horizon=H, action_dim=4,
                       flow_sampler="flow_sde", flow_sde_steps="all", value_head="expert")
    model = VLA(mcfg)
    ident = lambda n: NormStats(mean=np.zeros(n, np.float32), std=np.ones(n, np.float32),
                                q01=-np.ones(n, np.float32), q99=np.ones(n, np.float32))
    bridge = Bridge(mcfg, ("agentview",), {"actions": ident(4), "state": ident(8)})
    actor = actors.vla_actor(model, bridge, execute=1)
    env = toy.make_env(B, 1, episode_length=6, pixels=True)
    _, (_, traj) = collect(actor, env, params, length=2)
    assert traj["action_mask"].shape == (2, B, 1) and traj["chain"].shape == (2, B, mcfg.num_denoise_steps + 1, H, 4)
    obs = bridge.observation(jax.tree.map(lambda x: x[0], traj["obs"]), traj["task_id"][0])
    v = {"params": params}
    full = heads.flow_chain_log_prob(model, v, obs, traj["chain"][0], traj["sde_step"][0])["log_prob"]
    executed = heads.flow_chain_log_prob(model, v, obs, traj["chain"][0], traj["sde_step"][0],
                                         logp_mask=jnp.asarray([True, False])[None].repeat(B, 0))["log_prob"]
    np.testing.assert_allclose(np.asarray(traj["old_logp"][0]), np.asarray(full), rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.asarray(executed), np.asarray(full))
    # a decision with no executed step (after the episode ended) scores nothing
    m = actors._logp_mask(bridge, jnp.asarray([[True], [False]]), (2, H, 4), whole_chunk=True)
    assert np.asarray(m[0]).min() == 1 and np.asarray(m[1]).max() == 0


def test_vla_privileged_critic_reads_the_privileged_state_and_trains_only_itself():
    """rl.critic='privileged': values from an MLP on obs['privileged']; the policy's log-probs are
    those of the plain actor; the value loss moves only params['critic']."""
    plain, params, env = _vla("tokens")
    model, bridge = _model_and_bridge("tokens")
    critic = mlp_policy.ValueMLP((16, 16))
    actor = actors.vla_actor(model, bridge, use_value=True, critic=critic)
    params = {**params, "critic": critic.init(jax.random.key(3), jnp.zeros((1, 6)))["params"]}
    assert actor.has_value and not plain.has_value
    _, (_, traj) = collect(actor, env, params, length=2)
    batch = learner.flatten_decisions({k: traj[k] for k in ("obs", "task_id", "tokens", "action_mask")})
    logp, _, value = actor.logp_value(params, batch, jax.random.key(0))
    np.testing.assert_allclose(np.asarray(logp), np.asarray(plain.logp_value(params, batch, jax.random.key(0))[0]),
                               rtol=1e-6)
    by_hand = critic.apply({"params": params["critic"]}, batch["obs"]["privileged"])
    np.testing.assert_allclose(np.asarray(value), np.asarray(by_hand), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(traj["old_values"]).T.reshape(-1), np.asarray(by_hand), rtol=1e-5, atol=1e-6)
    grads = jax.jit(jax.grad(lambda p: jnp.sum(actor.logp_value(p, batch, jax.random.key(0))[2])))(params)
    for name, g in grads.items():
        norm = float(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(g)))
        assert (norm > 0) == (name == "critic"), (name, norm)
    with pytest.raises(ValueError, match="privileged_obs"):
        actor.value(params, {k: v for k, v in batch["obs"].items() if k != "privileged"}, batch["task_id"])


def test_vla_value_loss_trains_only_the_value_head():
    actor, params, env = _vla("flow_sde")
    _, (_, traj) = collect(actor, env, params, length=1)
    batch = learner.flatten_decisions({k: traj[k] for k in ("obs", "task_id", "chain", "sde_step", "action_mask")})
    grads = jax.jit(jax.grad(lambda p: jnp.sum(actor.logp_value(p, batch, jax.random.key(0))[2])))(params)
    for name, g in grads.items():
        norm = float(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(g)))
        assert (norm > 0) == (name in actors.CRITIC_PARAMS), (name, norm)


def test_make_env_success_only_reward():
    from vlajax.config.schema import EnvConfig as E

    cfg = E(suite="goal", obs_mode="state", num_envs=2)
    shaped = ro.make_env(cfg, 2).unwrapped.config.reward_scales
    success = ro.make_env(cfg, 2, reward="success").unwrapped.config.reward_scales
    assert success["success"] == shaped["success"] > 0
    assert all(v == 0.0 for k, v in success.items() if k != "success") and shaped["place"] > 0
    assert ro.make_env(cfg, 2).task_ids == (8, 9, 10, 11)


def test_progress_reward_is_potential_based():
    """reward_t = bonus * success_t + Phi(s_t+1) - Phi(s_t), Phi = sum of the shaped terms (0 after reset):
    an episode's return telescopes to bonus * success + Phi(s_T)."""
    from vlajax.envs import registry
    from vlajax.envs.wrappers import ProgressRewardWrapper

    base = registry.load("goal/push_to_square", obs_mode="state")
    env = ProgressRewardWrapper(base)
    step, plain_step = jax.jit(env.step), jax.jit(base.step)
    state = jax.jit(env.reset)(jax.random.key(3))
    phi = lambda s: float(sum(v for k, v in s.metrics.items() if k.startswith("reward/")))
    total, bonus = 0.0, base.config.reward_scales["success"]
    for t in range(12):
        action = jax.random.uniform(jax.random.key(t), (4,), minval=-1.0, maxval=1.0)
        nxt, plain = step(state, action), plain_step(state, action)
        np.testing.assert_allclose(float(nxt.reward), float(plain.reward) - phi(state), atol=1e-6)
        np.testing.assert_allclose(float(nxt.reward), bonus * float(nxt.metrics["success"]) + phi(nxt) - phi(state),
                                   atol=1e-5)
        total += float(nxt.reward)
        state = nxt
    assert phi(state) > 0  # the shaped terms are live (push: reach/place closeness)
    np.testing.assert_allclose(total, bonus * float(state.metrics["success"]) + phi(state), atol=1e-4)
    with pytest.raises(ValueError, match="progress"):
        ro.make_env(EnvConfig(suite="goal", obs_mode="state", num_envs=2), 2, reward="dense")
