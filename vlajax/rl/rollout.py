"""Colocated, synchronous rollout: a `lax.scan` over a pure `actor_step`, policy and env jitted together.

Chunk-level MDP: one decision = one action chunk of H low-level steps (the env's
`ActionChunkWrapper`); the chunk's reward is the sum of its low-level rewards, and it is done if
any step ended the episode (success or instability: `terminated`; time limit: `truncated`).

    env = make_env(cfg.env, action_horizon=H)                  # suite -> episode -> chunk -> vmap
    state = reset(env, group_keys(rng, B, G))                   # GRPO: G envs per initial state
    state, traj = rollout(actor, env, params, state, rng, T, version, auto_reset=True)
    inputs = advantage_inputs(traj)                             # -> vlajax.rl.advantages
    batch = learner_batch(traj, result)                         # -> vlajax.rl.learner.update

`traj` is time-major, every leaf `[T, B, ...]`:
  obs, task_id                    the observation the decision was taken on
  actions | chain, sde_step | tokens   the actor's record (see `vlajax.rl.actors`)
  action_mask [T, B, H] bool      chunk steps the env executed (False after the episode ended)
  old_logp [T, B]                 the actor's `score` of its own sample (one prefix pass per
                                  decision), else its `logp_value` on the record (the learner's formula);
                                  [T, B, F] per scored entry with `rl.ratio_level='factor'` or `rl.kl_coef > 0`
  logp_mask [T, B, F] float       which entries count (those modes only; `Actor.logp_mask`)
  old_values, final_values [T, B] V(s_k); V(final observation) on truncated decisions (PPO)
  last_value [B]                  V(s_T), in `traj["last_value"]` (no time axis)
  rewards, done, terminated, truncated, valid, success [T, B]
  episode_return, episode_length [T, B]   of the episode that ended at this decision (0 otherwise)
  version [T, B] int32            the policy version that produced the decision
Two modes: `auto_reset=True` (PPO: continuing; a finished env is reset into a new episode
of a random suite task before its next decision) and `auto_reset=False` (GRPO: every env plays
one episode from `reset`; decisions after its end are invalid no-ops).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.envs import registry
from vlajax.envs.base import Env, State
from vlajax.envs.wrappers import (
    ActionChunkWrapper,
    EpisodeWrapper,
    ProgressRewardWrapper,
    VmapWrapper,
    Wrapper,
    select,
)
from vlajax.rl import advantages as adv_lib
from vlajax.rl.actors import Actor
from vlajax.rl.learner import flatten_decisions

__all__ = [
    "SuiteEnv", "make_env", "reset", "reset_done", "group_keys", "actor_step", "rollout", "advantage_inputs",
    "learner_batch", "rollout_metrics", "evaluate", "decisions_per_episode",
]

_RETURN, _LENGTH = "rl_return", "rl_length"  # per-env episode accumulators kept in State.info


# ----------------------------------------------------------------------------------------
# Envs
# ----------------------------------------------------------------------------------------


class SuiteEnv(Wrapper):
    """A tabletop env whose `reset(rng)` draws the task uniformly from `task_ids` (one compile for
    a whole suite); `reset_task(rng, task_id)` picks it."""

    def __init__(self, env: Env, task_ids: tuple[int, ...]):
        super().__init__(env)
        self.task_ids = tuple(int(t) for t in task_ids)

    def reset(self, rng: jax.Array, task_id: jax.Array | None = None, **kwargs) -> State:
        """A uniformly drawn suite task, or `task_id` when given (the same state as `reset_task`)."""
        k_task, k = jax.random.split(rng)
        if task_id is None:
            task_id = jnp.asarray(self.task_ids, jnp.int32)[jax.random.randint(k_task, (), 0, len(self.task_ids))]
        return self.env.reset_task(k, task_id, **kwargs)

    def reset_task(self, rng: jax.Array, task_id: jax.Array, **kwargs) -> State:
        return self.env.reset_task(jax.random.split(rng)[1], task_id, **kwargs)


def make_env(env_cfg, action_horizon: int, num_envs: int | None = None, reward: str = "shaped",
             privileged_obs: bool = False) -> Env:
    """`EnvConfig` -> SuiteEnv -> EpisodeWrapper -> ActionChunkWrapper -> VmapWrapper (no auto-reset:
    `rollout` resets itself so it can read the final observation first). `reward='success'`
    zeroes the shaped terms: the reward is the success bonus alone (shaped terms paid at every
    step can outweigh finishing, since success ends the episode); `reward='progress'` pays the
    success bonus plus the *change* of the shaped terms (`ProgressRewardWrapper`: an episode's
    return is the bonus plus the shaped terms of its final state)."""
    env_cfg = dataclasses.replace(env_cfg, physics_impl=rollout_physics(env_cfg))
    names = registry.tasks_for(env_cfg)
    overrides = registry.config_from_env_config(env_cfg)
    n = num_envs or env_cfg.num_envs
    overrides["num_envs"] = n
    if privileged_obs:  # pixels: also obs['privileged'] [32] (an asymmetric critic's input)
        overrides["privileged_obs"] = True
    if reward == "success":
        scales = registry.get_default_config().reward_scales
        overrides["reward_scales"] = {k: (v if k == "success" else 0.0) for k, v in scales.items()}
    elif reward not in ("shaped", "progress"):
        raise ValueError(f"reward must be 'shaped', 'success' or 'progress', got {reward!r}")
    base = registry.load(names[0], **overrides)
    if reward == "progress":
        base = ProgressRewardWrapper(base)
    suite = SuiteEnv(base, tuple(_task_index(t) for t in names))
    env = ActionChunkWrapper(EpisodeWrapper(suite, env_cfg.episode_length), action_horizon)
    return VmapWrapper(env, n)


def rollout_physics(env_cfg) -> str:
    """The simulator an RL rollout of `env_cfg` steps: its `physics_impl`, unless that is 'auto', which means
    'c' (C MuJoCo on the host) when this program's JAX backend is a single CPU device and nothing needs MJX
    (warp rendering, the dynamics perturbation axis); else 'jax' (MJX: accelerators, rollouts sharded over
    several devices). Chosen from `bench rollout --physics mjx c`: on the 2-core CPU host C gave 2.2-2.5x
    MJX's decisions/s."""
    from vlajax.envs import perturb

    if env_cfg.physics_impl != "auto":
        return env_cfg.physics_impl
    axes = {*perturb.parse_ranges(env_cfg.randomize), *(perturb.parse_eval(env_cfg.robustness)
                                                         if env_cfg.robustness else ())}
    if env_cfg.render_backend != "jax" or "dynamics" in axes:
        return "jax"
    return "c" if jax.default_backend() == "cpu" and jax.device_count() == 1 else "jax"


def _task_index(name: str) -> int:
    from vlajax.envs.tabletop import tasks

    return tasks.TASKS.index(registry.task_spec(name))


def decisions_per_episode(episode_length: int, action_horizon: int) -> int:
    """Chunk decisions that cover one whole episode: ceil(episode_length / H)."""
    return -(-episode_length // action_horizon)


def _with_accumulators(state: State) -> State:
    z = jnp.zeros(state.done.shape, jnp.float32)
    return state.replace(info={**state.info, _RETURN: z, _LENGTH: z})


def reset(env: Env, keys: jax.Array, task_id: jax.Array | None = None) -> State:
    """keys [B, 2] (raw) -> batched first states; `task_id` int [B] pins each env's task (else the
    suite draws one per key). Two envs with the same key start identically."""
    if task_id is None:
        return _with_accumulators(env.reset(keys))
    _suite(env)  # a clear error when the env cannot pick tasks
    return _with_accumulators(env.reset(keys, task_id=task_id))


def _suite(env: Env) -> SuiteEnv:
    e = env
    while not isinstance(e, SuiteEnv):
        if not hasattr(e, "env"):
            raise TypeError("reset(task_id=...) needs an env built by make_env (with a SuiteEnv inside)")
        e = e.env
    return e


def _num_groups(num_envs: int, group_size: int) -> int:
    if num_envs % group_size:
        raise ValueError(f"{num_envs} envs do not split into groups of {group_size}")
    return num_envs // group_size


def balanced_task_ids(env: Env, rng: jax.Array, num_envs: int, group_size: int = 1) -> jax.Array:
    """int32 [num_envs]: the suite's tasks dealt to the groups in turn from a random start, so
    every task gets `num_groups // num_tasks` or one more groups (GRPO: no iteration spends all
    its groups on one task by chance). Envs of one group share its task."""
    tasks = jnp.asarray(_suite(env).task_ids, jnp.int32)
    start = jax.random.randint(rng, (), 0, tasks.shape[0])
    per_group = tasks[(start + jnp.arange(_num_groups(num_envs, group_size))) % tasks.shape[0]]
    return jnp.repeat(per_group, group_size)


def group_keys(rng: jax.Array, num_envs: int, group_size: int = 1) -> jax.Array:
    """Raw keys [num_envs, 2]: env b gets key `b // group_size` (GRPO groups share initial states)."""
    keys = jax.random.key_data(jax.random.split(rng, _num_groups(num_envs, group_size)))
    return jnp.repeat(keys, group_size, axis=0)


# ----------------------------------------------------------------------------------------
# One decision, and the scan
# ----------------------------------------------------------------------------------------


def _select(done: jax.Array, new: State, old: State) -> State:
    """`new` where `done` [B] else `old` (the physics data by MJX's own merge: `wrappers.select`)."""
    return select(done, new, old)


def actor_step(actor: Actor, env: Env, params: Any, state: State, rng: jax.Array, version: jax.Array,
               auto_reset: bool = True) -> tuple[State, dict[str, jax.Array]]:
    """One decision of B envs: sample a chunk, step it, record it, (auto-)reset finished envs.

    state: batched env State (leaves [B, ...]); rng: typed key; version: int32 []. Returns the
    next state and the decision's record (leaves [B, ...], keys as in the module docstring).
    """
    k_act, k_lp, k_reset = jax.random.split(rng, 3)
    obs, task_id = state.obs, state.info["episode"]["task_id"]
    valid = state.done <= 0  # False only in one-episode mode, after the episode ended
    if actor.act is not None:  # one forward: the sampling pass also scores its draws (and the value)
        env_actions, record, scores = actor.act(params, obs, task_id, k_act)
    else:
        env_actions, record = actor.sample(params, obs, task_id, k_act)
    nxt = env.step(state, env_actions)
    action_mask = nxt.info["chunk_valid"] > 0
    scored = {"obs": obs, "task_id": task_id, **record, "action_mask": action_mask}
    if actor.act is not None:
        logp, value = actor.score(scores, action_mask)
    else:
        logp, _, value = actor.logp_value(params, scored, k_lp)
    if actor.logp_mask is not None:  # rl.ratio_level='factor': logp [B, F], and which entries count
        scored["logp_mask"] = actor.logp_mask(action_mask, task_id.shape[0])

    done = (nxt.done > 0) & valid
    truncated = done & (nxt.info["truncation"] > 0)
    reward = jnp.where(valid, nxt.reward, 0.0)
    ep_return = nxt.info[_RETURN] + reward
    ep_length = nxt.info[_LENGTH] + jnp.sum(nxt.info["chunk_valid"], axis=-1)
    out = {
        **scored, "old_logp": logp, "rewards": reward, "done": done, "truncated": truncated,
        "terminated": done & ~truncated, "valid": valid, "success": jnp.where(done, nxt.metrics["success"], 0.0),
        "episode_return": jnp.where(done, ep_return, 0.0), "episode_length": jnp.where(done, ep_length, 0.0),
        "version": jnp.broadcast_to(jnp.asarray(version, jnp.int32), done.shape),
    }
    if actor.has_value:
        out["old_values"] = value
        out["final_values"] = _final_values(actor, params, nxt.obs, task_id, truncated, value)
    nxt = nxt.replace(info={**nxt.info, _RETURN: jnp.where(done, 0.0, ep_return),
                            _LENGTH: jnp.where(done, 0.0, ep_length)})
    if auto_reset:
        keys = jax.random.key_data(jax.random.split(k_reset, done.shape[0]))
        nxt = reset_done(env, done, keys, nxt)
    return nxt, out


def _final_values(actor: Actor, params: Any, obs: Any, task_id: jax.Array, truncated: jax.Array,
                  like: jax.Array) -> jax.Array:
    """V(final observation) [B] of the truncated envs (time-limit bootstrapping; 0 elsewhere, where
    `advantages.bootstrap_values` does not read it). No pass when none truncated; the truncated rows
    only (gathered into a batch of B // 4) when at most B // 4 did; the whole batch otherwise."""
    few = max(1, truncated.shape[0] // 4)
    n = jnp.sum(truncated.astype(jnp.int32))

    def some():
        idx = jnp.nonzero(truncated, size=few, fill_value=0)[0]
        v = actor.value(params, jax.tree.map(lambda x: x[idx], obs), task_id[idx])
        return jnp.zeros_like(like).at[idx].add(jnp.where(jnp.arange(few) < n, v, 0.0))  # fill rows add 0

    def every():
        return jnp.where(truncated, actor.value(params, obs, task_id), 0.0).astype(like.dtype)

    branch = jnp.where(n == 0, 0, jnp.where(n <= few, 1, 2))
    return jax.lax.switch(branch, [lambda: jnp.zeros_like(like), some, every])


def reset_done(env: Env, done: jax.Array, keys: jax.Array, state: State) -> State:
    """Env b restarts from `keys[b]` where `done[b]`; the others keep `state`. done bool [B], keys [B, 2].

    Only the finished envs are reset and rendered: a `fori_loop` over their indices (a traced
    trip count, static shapes) resets one env at a time with the batched env's inner env and
    writes it into its row. Envs not built as a `VmapWrapper` reset all rows and select."""
    if not isinstance(env, VmapWrapper):
        return jax.lax.cond(jnp.any(done), lambda: _select(done, reset(env, keys), state), lambda: state)
    one = env.env
    idx = jnp.nonzero(done, size=done.shape[0], fill_value=0)[0]

    def body(i, s):
        j = idx[i]
        fresh = _with_accumulators(one.reset(keys[j]))
        return jax.tree.map(lambda a, x: jax.lax.dynamic_update_index_in_dim(a, x.astype(a.dtype), j, 0), s, fresh)

    return jax.lax.fori_loop(0, jnp.sum(done.astype(jnp.int32)), body, state)


def rollout(actor: Actor, env: Env, params: Any, state: State, rng: jax.Array, length: int,
            version: jax.Array | int = 0, auto_reset: bool = True) -> tuple[State, dict[str, jax.Array]]:
    """`length` decisions of every env (`lax.scan` over `actor_step`); decision k uses
    `fold_in(rng, k)`. Returns the final state and the time-major trajectory (module docstring)."""

    def body(s, k):
        return actor_step(actor, env, params, s, jax.random.fold_in(rng, k), version, auto_reset)

    state, traj = jax.lax.scan(body, state, jnp.arange(length))
    if actor.has_value:
        traj["last_value"] = actor.value(params, state.obs, state.info["episode"]["task_id"])
    return state, traj


# ----------------------------------------------------------------------------------------
# From a trajectory to the learner
# ----------------------------------------------------------------------------------------


def advantage_inputs(traj: dict[str, jax.Array]) -> adv_lib.AdvantageInputs:
    """The estimator's inputs ([T, B]); `next_values` bootstraps from V(final obs) on truncation."""
    values = next_values = None
    if "old_values" in traj:
        values = traj["old_values"]
        next_values = adv_lib.bootstrap_values(values, traj["last_value"], traj["final_values"], traj["done"])
    return adv_lib.AdvantageInputs(rewards=traj["rewards"], terminated=traj["terminated"], done=traj["done"],
                                   valid=traj["valid"], values=values, next_values=next_values)


_LEARNER_KEYS = ("obs", "task_id", "actions", "chain", "sde_step", "tokens", "action_mask", "logp_mask", "old_logp",
                 "old_values", "version")


def learner_batch(traj: dict[str, jax.Array], result: adv_lib.AdvantageResult) -> dict[str, Any]:
    """Flat env-major learner batch `[B * T, ...]`: the record, old log-probs/values, advantages,
    returns and the loss mask."""
    batch = {k: traj[k] for k in _LEARNER_KEYS if k in traj}
    batch |= {"advantages": result.advantages, "returns": result.returns, "mask": result.mask}
    return flatten_decisions(batch)


def rollout_metrics(traj: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Scalars: finished episodes, their mean success / return / length (low-level steps), the
    env steps taken (executed low-level steps) and mean chunk reward."""
    done = traj["done"].astype(jnp.float32)
    n = jnp.sum(done)
    mean = lambda x: jnp.sum(x * done) / jnp.maximum(n, 1.0)
    return {
        "episodes": n,
        "success": mean(traj["success"]),
        "episode_return": mean(traj["episode_return"]),
        "episode_length": mean(traj["episode_length"]),
        "env_steps": jnp.sum(traj["action_mask"].astype(jnp.float32)),
        "chunk_reward": jnp.sum(traj["rewards"]) / jnp.maximum(jnp.sum(traj["valid"]), 1),
    }


# ----------------------------------------------------------------------------------------
# Closed-loop evaluation (deterministic policy, one episode per env)
# ----------------------------------------------------------------------------------------


def evaluate(actor: Actor, env: Env, params: Any, rng: jax.Array, task_id: jax.Array,
             length: int) -> dict[str, jax.Array]:
    """One episode per env with the deterministic policy (ODE sampler / argmax / Gaussian mean).

    task_id: int32 [B] (the env's batch); length: decisions (cover the episode). Env b's initial
    state comes from `fold_in(rng, b)`. Returns {'success', 'return', 'length'}: [B] each.
    """
    b = task_id.shape[0]
    keys = jax.vmap(lambda i: jax.random.key_data(jax.random.fold_in(rng, i)))(jnp.arange(b))
    state = reset(env, keys, task_id)

    def body(carry, k):
        s, succ, ret, n = carry
        valid = s.done <= 0
        act, _ = actor.sample(params, s.obs, s.info["episode"]["task_id"], jax.random.fold_in(rng, k),
                              deterministic=True)
        s = env.step(s, act)
        succ = jnp.maximum(succ, jnp.where(valid, s.metrics["success"], 0.0))
        ret = ret + jnp.where(valid, s.reward, 0.0)
        n = n + jnp.sum(s.info["chunk_valid"], -1)
        return (s, succ, ret, n), None

    z = jnp.zeros((b,), jnp.float32)
    (_, succ, ret, n), _ = jax.lax.scan(body, (state, z, z, z), jnp.arange(length))
    return {"success": succ, "return": ret, "length": n}
