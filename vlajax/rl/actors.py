"""Actors: how a policy acts in the env and scores its own decisions, for every policy family.

An `Actor` is a bundle of pure functions closed over constants (a model, a `Bridge`); close over
it, never pass it as a traced argument. The rollout and the learner see only these functions:

    env_actions, record = actor.sample(params, obs, task_id, rng)         # one decision per env
    logp, entropy, value = actor.logp_value(params, batch, rng)           # the learner's LogpValueFn
    v = actor.value(params, obs, task_id)                                 # [B] (None without a critic)
    env_actions, record, scores = actor.act(params, obs, task_id, rng)   # sample + its own scores
    logp, value = actor.score(scores, action_mask)                       # once the env has run

obs is the env observation as the env returns it (flat `[B, 32]` state vector, or the pixels
dict `{'pixels/<cam>': uint8 [B, h, w, 3], 'state': [B, 8], 'instruction_id': [B]}`), task_id
int32 [B]. `record` holds what the learner needs to score the decision again: the chunk
`actions` [B, H, A] (MLP), the denoising `chain` [B, K+1, H, A] and `sde_step` [B] (flow), or
the `tokens` [B, H, A] (token head). `batch` is the record plus `obs`, `task_id` and
`action_mask` [N, H] (the chunk steps the env executed), with a leading decision axis N.

`act` / `score` (the VLA; None for the MLP) are the rollout's one-forward decision: `act` samples
exactly as `sample` does (same key, same draws) and also returns `scores`, the per-entry
log-densities of what it drew (`logp_terms` [B, H, A]) and, with a critic, the value [B] -- all
from the one prefix pass that sampled. Which entries count depends on what the env executed,
known only after the step, so `score(scores, action_mask [B, k])` applies the same mask as
`logp_value` and sums: the learner's first recomputation on fresh data (the same formula on the
stored record) gives the same log-prob to float32 rounding, so the importance ratio starts at 1
(tested for every actor). Without `act` the rollout samples, then calls `logp_value` on the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.models import heads
from vlajax.models.vla import VLA
from vlajax.policies.bridge import Bridge
from vlajax.rl import mlp_policy
from vlajax.training import trainable

__all__ = ["Actor", "mlp_actor", "vla_actor"]

Array = jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Actor:
    """A policy as four pure functions (see the module docstring for shapes)."""

    sample: Callable[..., tuple[Array, dict[str, Array]]]  # (params, obs, task_id, rng, deterministic=False)
    logp_value: Callable[[Any, dict, Array], tuple[Array, Array | None, Array | None]]
    value: Callable[[Any, Any, Array], Array] | None  # None: no critic (GRPO)
    name: str = ""
    act: Callable[..., tuple[Array, dict[str, Array], dict[str, Array]]] | None = None  # (params, obs, task_id, rng)
    score: Callable[[dict, Array], tuple[Array, Array | None]] | None = None  # (scores, action_mask [B, k])
    # per-entry log-probs (`rl.ratio_level='factor'`): (action_mask [B, k] | None, B) -> float [B, F], the
    # scored entries of each decision; `logp_value` / `score` then return log-probs [B, F] (0 where unscored)
    logp_mask: Callable[[Array | None, int], Array] | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not None


# ----------------------------------------------------------------------------------------
# State-observation MLP (the brax-comparison policy)
# ----------------------------------------------------------------------------------------


def mlp_actor(model: mlp_policy.MLPActorCritic, use_value: bool = True) -> Actor:
    """The Gaussian chunk policy of `mlp_policy`; env actions are the samples clipped to [-1, 1]."""
    base = mlp_policy.make_logp_value_fn(model)

    def sample(params, obs, task_id, rng, deterministic=False):
        del task_id
        out = mlp_policy.sample(model, params, obs, rng, deterministic=deterministic)
        return jnp.clip(out["actions"], -1.0, 1.0), {"actions": out["actions"]}

    def logp_value(params, batch, rng):
        logp, ent, val = base(params, batch, rng)
        return logp, ent, (val if use_value else None)

    def value(params, obs, task_id):
        del task_id
        return model.apply({"params": params}, obs)[2]

    return Actor(sample, logp_value, value if use_value else None, "mlp")


# ----------------------------------------------------------------------------------------
# The VLA (flow_sde / flow_noise or token head) through the policy bridge
# ----------------------------------------------------------------------------------------


def _logp_mask(bridge: Bridge, action_mask: Array | None, shape: tuple[int, ...], whole_chunk: bool) -> Array:
    """float [N, H, A]: the entries of a decision's sample that its log-prob scores.

    Tokens and flow_sde 'last' (`whole_chunk=False`): executed chunk steps x the action dims the
    robot receives -- their entries are drawn independently (the last step's noise is added after
    every expert call), so an unexecuted entry cannot change an executed action.
    Flow (`whole_chunk=True`): every entry of a decision with any executed step. The expert
    attends across the chunk, so the noise drawn for an unexecuted step or a padded dim moves the
    executed actions at the next denoising steps; leaving it out of the log-prob drops a
    parameter-dependent factor of the chain's density and biases the policy gradient.
    """
    n, h, a = shape
    steps = jnp.ones((n, h), bool) if action_mask is None else jnp.asarray(action_mask) > 0
    if whole_chunk:
        return jnp.broadcast_to(jnp.any(steps, axis=1)[:, None, None], shape).astype(jnp.float32)
    dims = jnp.arange(a) < bridge.env_action_dim
    return (steps[:, :, None] & dims[None, None, :]).astype(jnp.float32)


def vla_actor(model: VLA, bridge: Bridge, use_value: bool | None = None, temperature: float = 1.0,
              execute: int = 0, critic: mlp_policy.ValueMLP | None = None, per_factor: bool = False) -> Actor:
    """The VLA's configured head. Flow: `cfg.flow_sampler` must be stochastic (`flow_sde` /
    `flow_noise`); its log-prob scores the whole chain of a decision (`_logp_mask`). Tokens:
    the log-prob covers only the executed steps and the env's action dims.
    `use_value` (default: the model has a value head) adds the critic, whose loss trains only the
    value head (`_critic_variables`). `execute = k` sends only
    the first k of the chunk's H actions to the env (receding horizon; 0 = all H): env actions
    are [B, k, A_env], and `action_mask` [N, k] is padded to H with False for the log-prob.
    `critic` (asymmetric actor-critic, `rl.critic='privileged'`): values come from this MLP on
    `obs['privileged']` [B, 32] with params `params['critic']` (the VLA ignores that entry);
    the model's own value head is then not used. `per_factor` (`rl.ratio_level='factor'`): log-probs
    [N, F] per scored entry (F = H * A, flattened; unscored entries 0) instead of their sum [N], and
    `logp_mask` gives which entries count."""
    cfg = model.cfg
    if critic is not None:
        return _with_privileged_critic(vla_actor(model, bridge, False, temperature, execute, per_factor=per_factor),
                                       critic)
    if cfg.action_head == "flow" and cfg.flow_sampler == "ode":
        raise ValueError("RL with the flow head needs model.flow_sampler='flow_sde' or 'flow_noise' (log-probs)")
    use_value = cfg.value_head != "none" if use_value is None else use_value
    if use_value and cfg.value_head == "none":
        raise ValueError("use_value=True needs a model with a value head (model.value_head='prefix'|'expert')")
    shape = (cfg.action_horizon, cfg.action_dim)
    # flow_sde 'last': the actions' entries are independent given the recomputed chain, so only the
    # executed ones are scored (as for tokens); every other flow sampler scores the whole chain
    whole_chunk = cfg.action_head == "flow" and not (cfg.flow_sampler == "flow_sde" and cfg.flow_sde_steps == "last")
    k = execute or cfg.action_horizon
    if not 1 <= k <= cfg.action_horizon:
        raise ValueError(f"execute={execute} must be in [0, model.action_horizon={cfg.action_horizon}]")

    def draw(params, obs, task_id, rng, deterministic):  # -> env actions, record, FlowSample | TokenSample
        env_actions, s = bridge.sample(model, {"params": params}, obs, rng, task_id=task_id,
                                       deterministic=deterministic, temperature=temperature)  # eval's and serving's
        record = {"chain": s.chain, "sde_step": s.sde_step} if cfg.action_head == "flow" else {"tokens": s.tokens}
        return env_actions[:, :k], record, s

    def sample(params, obs, task_id, rng, deterministic=False):
        return draw(params, obs, task_id, rng, deterministic)[:2]

    def act(params, obs, task_id, rng):  # sample's draws, plus their log-densities and the value
        env_actions, record, s = draw(params, obs, task_id, rng, False)
        return env_actions, record, {"logp_terms": s.log_prob_terms} | ({"value": s.value} if use_value else {})

    def mask(executed, n):  # [n, k] executed chunk steps (or None) -> float [n, H, A]
        if executed is not None and executed.shape[1] < shape[0]:
            executed = jnp.pad(jnp.asarray(executed) > 0, ((0, 0), (0, shape[0] - executed.shape[1])))
        return _logp_mask(bridge, executed, (n, *shape), whole_chunk=whole_chunk)

    def reduce(terms, m):  # [n, H, A] entries, mask -> the decision's log-prob [n] (or its scored entries [n, F])
        return (terms * m).reshape(terms.shape[0], -1) if per_factor else jnp.sum(terms * m, axis=(1, 2))

    def score(scores, action_mask):
        terms = scores["logp_terms"]
        return reduce(terms, mask(action_mask, terms.shape[0])), scores.get("value")

    def logp_value(params, batch, rng):
        del rng
        v = {"params": trainable.freeze(params, cfg)}  # model.trainable='expert': the VLM gets no gradient
        o = bridge.observation(batch["obs"], batch["task_id"])
        m = mask(batch.get("action_mask"), batch["task_id"].shape[0])
        if cfg.action_head == "flow":
            out = heads.flow_chain_log_prob(model, v, o, batch["chain"], batch["sde_step"], logp_mask=m)
        else:
            out = heads.token_chunk_log_prob(model, v, o, batch["tokens"], temperature=temperature, logp_mask=m)
        val = heads.value(model, _critic_variables(params), o) if use_value else None
        return reduce(out["log_prob_terms"], m), out["entropy"], val

    def value(params, obs, task_id):
        return heads.value(model, {"params": params}, bridge.observation(obs, task_id))

    def logp_mask(action_mask, n):
        return mask(action_mask, n).reshape(n, -1)

    return Actor(sample, logp_value, value if use_value else None, f"vla-{cfg.action_head}", act, score,
                 logp_mask if per_factor else None)


def _with_privileged_critic(actor: Actor, critic: mlp_policy.ValueMLP) -> Actor:
    """`actor` (no critic) plus `critic` on the env's privileged state."""

    def value(params, obs, task_id):
        del task_id
        if "privileged" not in obs:
            raise ValueError("rl.critic='privileged' needs an env built with privileged_obs=True (obs['privileged'])")
        return critic.apply({"params": params["critic"]}, obs["privileged"])

    def logp_value(params, batch, rng):
        logp, entropy, _ = actor.logp_value(params, batch, rng)
        return logp, entropy, value(params, batch["obs"], batch["task_id"])

    def act(params, obs, task_id, rng):
        env_actions, record, scores = actor.act(params, obs, task_id, rng)
        return env_actions, record, scores | {"value": value(params, obs, task_id)}

    def score(scores, action_mask):
        return actor.score(scores, action_mask)[0], scores["value"]

    return Actor(actor.sample, logp_value, value, actor.name + "+privileged-critic", act, score, actor.logp_mask)


CRITIC_PARAMS = ("value_hidden", "value_out")  # the VLA's own value-head modules


def _critic_variables(params: Any) -> dict:
    """Params for the value loss: the value head trains, the shared trunk (ViT, prefix, expert)
    is read through `stop_gradient`, so a fresh critic's large early errors cannot push the
    policy's weights (the value head sits on features the SFT policy learned)."""
    return {"params": {k: (v if k in CRITIC_PARAMS else jax.lax.stop_gradient(v)) for k, v in params.items()}}

