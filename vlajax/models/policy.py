"""A head-agnostic policy API for SFT and RL: `head_sample` (the one sampler), `sample`, `log_prob`, `sft_loss`.

The flow head and the token head store different things to recompute a log-prob (a denoising
chain + the stochastic step, or the sampled tokens). `PolicyOutput` carries both slots so
rollout buffers and losses need not know which head produced a sample:

    out = sample(model, variables, obs, rng)               # actions [B,H,A], log_prob [B], value [B]|None
    new = log_prob(model, new_variables, obs, out)         # {'log_prob': [B], 'entropy': [B]}
    loss, metrics = sft_loss(model, variables, obs, actions, rng, action_mask)

`deterministic=True` is the evaluation policy: the ODE sampler (flow) or argmax (tokens).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from vlajax.models import heads
from vlajax.models.observation import Observation
from vlajax.models.vla import VLA


@flax.struct.dataclass
class PolicyOutput:
    """One sampled action chunk per row and what is needed to score it again."""

    actions: jax.Array  # [B, H, A] in [-1, 1] (flow samples are not clipped)
    log_prob: jax.Array  # [B] (0 for deterministic flow sampling)
    value: jax.Array | None  # [B] when cfg.value_head != 'none'
    chain: jax.Array | None = None  # flow: [B, K + 1, H, A]
    sde_step: jax.Array | None = None  # flow: int32 [B] (-1 unless flow_sde)
    tokens: jax.Array | None = None  # tokens: int32 [B, H, A]


def head_sample(model: VLA, variables, obs: Observation, rng, *, deterministic: bool = False,
                temperature: float = 1.0, logp_mask=None, x1=None):
    """The one sampler: a chunk from the configured head. -> `heads.FlowSample` (flow: cfg.flow_sampler, or
    the ODE with `deterministic`; `x1` [B, H, A]: the starting noise, else per cfg.flow_x1) or
    `heads.TokenSample` (tokens at `temperature`, argmax with `deterministic`)."""
    if model.cfg.action_head == "flow":
        return heads.flow_sample(model, variables, obs, rng, sampler="ode" if deterministic else None,
                                 logp_mask=logp_mask, x1=x1)
    return heads.token_sample(model, variables, obs, rng, temperature=0.0 if deterministic else temperature,
                              logp_mask=logp_mask)


def sample(model: VLA, variables, obs: Observation, rng, *, deterministic: bool = False,
           temperature: float = 1.0, logp_mask=None) -> PolicyOutput:
    """`head_sample` as a `PolicyOutput` (both heads' slots)."""
    s = head_sample(model, variables, obs, rng, deterministic=deterministic, temperature=temperature,
                    logp_mask=logp_mask)
    if model.cfg.action_head == "flow":
        return PolicyOutput(s.actions, s.log_prob, s.value, chain=s.chain, sde_step=s.sde_step)
    return PolicyOutput(s.actions, s.log_prob, s.value, tokens=s.tokens)


def log_prob(model: VLA, variables, obs: Observation, out: PolicyOutput, *, temperature: float = 1.0,
             logp_mask=None) -> dict[str, jax.Array]:
    """Log-prob [B] and entropy [B] of a stored `PolicyOutput` under `variables`."""
    if model.cfg.action_head == "flow":
        if out.chain is None:
            raise ValueError("a flow-head log-prob needs the stored chain (PolicyOutput.chain)")
        return heads.flow_chain_log_prob(model, variables, obs, out.chain, out.sde_step, logp_mask=logp_mask)
    if out.tokens is None:
        raise ValueError("a token-head log-prob needs the stored tokens (PolicyOutput.tokens)")
    return heads.token_chunk_log_prob(model, variables, obs, out.tokens, temperature=temperature,
                                      logp_mask=logp_mask)


def sft_loss(model: VLA, variables, obs: Observation, actions: jax.Array, rng, action_mask=None):
    """Behaviour-cloning loss of the configured head on one `Observation` per row. -> (scalar, metrics dict).
    The head's one loss (`heads.flow_loss` / `token_loss`); SFT trains with the same functions on its
    packed batches (`vlajax.sft_loss`, `vlajax.sft.loss.loss_fn`)."""
    if model.cfg.action_head == "flow":
        return heads.flow_loss(model, variables, obs, actions, rng, action_mask)
    return heads.token_loss(model, variables, obs, actions, action_mask)


def value(model: VLA, variables, obs: Observation) -> jax.Array:
    """State value [B] (see `heads.value`)."""
    return heads.value(model, variables, obs)


def clip_actions(actions: jax.Array) -> jax.Array:
    """Actions clipped to the normalized range [-1, 1] before they are sent to an env."""
    return jnp.clip(actions, -1.0, 1.0)
