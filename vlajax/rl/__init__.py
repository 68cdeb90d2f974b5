"""Reinforcement learning over action chunks: advantages, losses, the learner, an MLP policy.

Submodules: `advantages` (GAE, GRPO, RLOO; registered by name), `losses` (PPO clip with
clip-higher and dual clip, decoupled PPO, value, entropy, KL), `learner` (epochs x shuffled
minibatches x accumulated micro-batches, generic over the policy's `logp_value_fn`),
`mlp_policy` (state-observation Gaussian actor-critic over chunks).

The training loops read top-down: `command` (the `rl` command) -> `loop` (synchronous) or
`async_loop` + `async_workload` (through `vlajax.pipeline`; terminal progress in
`async_progress`) -> `setup` (what both loops share) -> `rollout`, `actors`, `learner`, `losses`,
`advantages`. None of them imports a module above it (tests/test_layers.py).
"""

from vlajax.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    AdvantageResult,
    bootstrap_values,
    episode_returns,
    estimator_name,
    gae,
    get_estimator,
    group_relative,
    register_estimator,
    rloo,
    zero_variance_groups,
)
from vlajax.rl.learner import (
    LogpValueFn,
    NonFiniteError,
    accumulate_gradients,
    apply_gradients,
    check_finite,
    compute_gradients,
    explained_variance,
    flatten_decisions,
    make_optimizer,
    normalize_advantages,
    recompute_log_probs,
    update,
)
from vlajax.rl.losses import (
    clipped_surrogate,
    decoupled_ppo_policy_loss,
    entropy_bonus,
    grpo_loss,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    rl_loss,
    value_loss,
)
from vlajax.rl.mlp_policy import MLPActorCritic, gaussian_entropy, gaussian_log_prob, make_logp_value_fn, sample

__all__ = [
    # Advantages
    "ADVANTAGE_ESTIMATORS", "AdvantageInputs", "AdvantageResult", "bootstrap_values", "episode_returns",
    "estimator_name", "gae", "get_estimator", "group_relative", "register_estimator", "rloo",
    "zero_variance_groups",
    # Losses
    "clipped_surrogate", "decoupled_ppo_policy_loss", "entropy_bonus", "grpo_loss", "kl_penalty", "masked_mean",
    "ppo_policy_loss", "rl_loss", "value_loss",
    # Learner
    "LogpValueFn", "NonFiniteError", "accumulate_gradients", "apply_gradients", "check_finite",
    "compute_gradients", "explained_variance", "flatten_decisions", "make_optimizer", "normalize_advantages",
    "recompute_log_probs", "update",
    # MLP policy
    "MLPActorCritic", "gaussian_entropy", "gaussian_log_prob", "make_logp_value_fn", "sample",
]
