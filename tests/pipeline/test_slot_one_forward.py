"""The async pipeline's env slots take a VLA decision in one forward pass, as the synchronous rollout does.

`RLWorkload.env`'s `infer` runs `Actor.act` (sample + the draws' log-densities + the value, one
prefix pass) and the slot's `step` plugs those scores into `rollout.actor_step`, instead of
re-scoring the record with `logp_value` (a second prefix pass in another XLA program) and
computing V(s_{t+1}) at every decision (a third). Checked against the synchronous decision with
the same key on real tabletop MJX envs from pixels: same draws, same behaviour log-prob and
value, the learner's recomputation within float32 rounding of what the slot recorded, and
V(s_{t+1}) on a segment's last row only.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vlajax.config.schema import EnvConfig, ModelConfig, RLConfig, TrainConfig
from vlajax.data.normalize import NormStats
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.rl import actors
from vlajax.rl import rollout as ro
from vlajax.rl.async_workload import RLWorkload
from vlajax.rl.setup import Setup

H, EXECUTE, ENVS, HORIZON = 4, 2, 2, 2

HEADS = {
    "flow": dict(action_head="flow", flow_sampler="flow_sde", flow_x1="zeros", flow_sde_steps="last",
                 value_head="expert", num_denoise_steps=2),
    "tokens": dict(action_head="tokens", num_bins=16, value_head="prefix"),
}


def _workload(head):
    env_cfg = EnvConfig(suite="goal", obs_mode="pixels", num_envs=ENVS, image_size=16, episode_length=40)
    mcfg = ModelConfig(image_size=16, patch_size=8, num_cameras=len(env_cfg.cameras), action_horizon=H,
                       action_dim=4, **HEADS[head])
    ident = lambda n: NormStats(mean=np.zeros(n, np.float32), std=np.ones(n, np.float32),
                                q01=-np.ones(n, np.float32), q99=np.ones(n, np.float32))
    bridge = Bridge(mcfg, tuple(sorted(env_cfg.cameras)), {"actions": ident(4), "state": ident(8)}, env_action_dim=4)
    model = VLA(mcfg)
    actor = actors.vla_actor(model, bridge, execute=EXECUTE)
    env = ro.make_env(env_cfg, EXECUTE)
    state = jax.jit(lambda k: ro.reset(env, ro.group_keys(k, ENVS)))(jax.random.key(0))
    obs0 = bridge.observation(jax.tree.map(lambda x: x[:1], state.obs), state.info["episode"]["task_id"][:1])
    init = lambda rng: model.init(rng, obs0)["params"]
    cfg = TrainConfig(env=env_cfg, rl=RLConfig(algo="ppo", rollout_length=HORIZON))
    return RLWorkload(cfg, Setup(actor, env, init, None, EXECUTE, 20, bridge)), actor


@pytest.mark.parametrize("head", ["flow", pytest.param("tokens", marks=pytest.mark.slow)])
def test_slot_decision_is_the_synchronous_one_forward_decision(head):
    work, actor = _workload(head)
    assert actor.act is not None
    params = work.init_state(0).params
    env = work._env_fns(ENVS)[0]
    reset, step, infer = work.env(1, None)
    env_state, payload = reset(0)
    (state0, _), key0 = env_state, payload["key"]

    (out,) = infer(params, [payload])
    assert set(out[2]) == {"logp_terms", "value"}  # the scores of the sampling pass travel to the step
    (state1, d), payload1, rec = step(0, env_state, out)
    assert d == 1

    # The synchronous decision with the same key and state: the same draws and scores.
    ref_state, ref = jax.jit(lambda p, s, k: ro.actor_step(actor, env, p, s, jax.random.wrap_key_data(k),
                                                           jnp.int32(0), True))(params, state0, key0)
    record_key = "chain" if head == "flow" else "tokens"
    np.testing.assert_allclose(np.asarray(rec[record_key]), np.asarray(ref[record_key]), atol=1e-5)
    for k in ("old_logp", "old_values", "rewards"):
        np.testing.assert_allclose(np.asarray(rec[k]), np.asarray(ref[k]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(payload1["obs"]["state"]), np.asarray(ref_state.obs["state"]), atol=1e-5)

    # What the learner recomputes from the record (its own formula, another program): float32 rounding.
    batch = {"obs": payload["obs"], "task_id": payload["task_id"], **{k: rec[k] for k in (record_key, "action_mask")}}
    if head == "flow":
        batch["sde_step"] = rec["sde_step"]
    logp, _, value = jax.jit(actor.logp_value)(params, batch, jax.random.key(9))
    scale = max(1.0, float(np.abs(np.asarray(rec["old_logp"])).max()))
    assert np.abs(np.asarray(logp) - np.asarray(rec["old_logp"])).max() <= 1e-5 * scale
    np.testing.assert_allclose(np.asarray(value), np.asarray(rec["old_values"]), atol=1e-5)

    # V(s_{t+1}) only on the segment's last row (decision HORIZON - 1), 0 before it.
    np.testing.assert_array_equal(np.asarray(rec["next_value"]), 0.0)
    (out1,) = infer(params, [payload1])
    (state2, d2), payload2, rec1 = step(0, (state1, d), out1)
    assert d2 == HORIZON
    expected = actor.value(params, state2.obs, state2.info["episode"]["task_id"])
    np.testing.assert_allclose(np.asarray(rec1["next_value"]), np.asarray(expected), atol=1e-5)
    assert np.any(np.asarray(rec1["next_value"]) != 0.0)


@pytest.mark.slow
def test_slot_without_act_scores_with_logp_value():
    """An actor without `act` (the state MLP) still records the learner's own log-prob."""
    work, actor = _workload("tokens")
    plain = dataclasses.replace(actor, act=None, score=None)
    work2 = RLWorkload(work.cfg, dataclasses.replace(work.setup, actor=plain))
    params = work2.init_state(0).params
    reset, step, infer = work2.env(1, None)
    env_state, payload = reset(0)
    (out,) = infer(params, [payload])
    assert out[2] == {}
    _, _, rec = step(0, env_state, out)
    batch = {"obs": payload["obs"], "task_id": payload["task_id"], "tokens": rec["tokens"],
             "action_mask": rec["action_mask"]}
    logp, _, _ = jax.jit(plain.logp_value)(params, batch, jax.random.key(9))
    np.testing.assert_allclose(np.asarray(logp), np.asarray(rec["old_logp"]), rtol=1e-6, atol=1e-6)
