"""Policy-gradient losses over chunk-level decisions.

Every function takes flat per-decision arrays `[N]` (N = decisions in the (micro-)batch):
log-probs are per decision (the sum over the executed part of the chunk's action dims, or
the flow chain's stochastic step(s)), and `mask` ([N], bool or 0/1) selects the decisions
that count. Each returns `(loss, metrics)` with scalar entries.

Per-entry ratios (`rl.ratio_level='factor'`): the policy losses also take log-probs `[N, F]`, one
per scored entry of a decision's chunk (a token, a flow-chain entry), with `factor_mask` [N, F]
marking the entries that count. The ratio, its clip and the behaviour weight are then per entry
(token-level PPO: DAPO, verl), and each decision's loss is the mean over its scored entries, so
decisions keep equal weight. `approx_kl` / `behaviour_kl` are then per entry, not per decision.

Means are `sum(x * mask) / normalizer`, with `normalizer = max(sum(mask), 1)` by default.
The learner passes the *minibatch's* valid count when it splits a minibatch into
micro-batches, so the micro-batch losses (and their gradients and metrics) add up exactly to
the minibatch's; pass `normalizer=1.0` to get plain sums (streaming: scale at the end).

Conventions: ratio `r = exp(logp - old_logp)`; loss = -objective (minimized).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import RLConfig

__all__ = [
    "masked_mean", "clipped_surrogate", "ppo_policy_loss", "decoupled_ppo_policy_loss", "value_loss",
    "entropy_bonus", "kl_penalty", "grpo_loss", "rl_loss", "weight_negative_advantages",
]

Metrics = dict[str, jax.Array]


def _denominator(mask: jax.Array, normalizer: Any) -> jax.Array:
    if normalizer is None:
        return jnp.maximum(jnp.sum(mask), 1.0)
    return jnp.asarray(normalizer, jnp.float32)


def masked_mean(x: jax.Array, mask: jax.Array, normalizer: Any = None) -> jax.Array:
    """`sum(x * mask) / normalizer` (default `max(sum(mask), 1)`); masked entries may hold anything finite."""
    m = jnp.asarray(mask, jnp.float32)
    return jnp.sum(jnp.where(m > 0, x, 0.0) * m) / _denominator(m, normalizer)


def _log_ratio(logp: jax.Array, old_logp: jax.Array, mask: jax.Array) -> jax.Array:
    # Masked entries get log-ratio 0 so that padding (even -inf log-probs) never reaches exp.
    return jnp.where(jnp.asarray(mask) > 0, logp - jax.lax.stop_gradient(old_logp), 0.0)


def _factor_masks(logp: jax.Array, mask: jax.Array, factor_mask: jax.Array | None
                  ) -> tuple[jax.Array, Any]:
    """(the mask of what enters a ratio: [N] or [N, F], reduce: per-entry [N, F] -> per-decision [N]
    mean over the decision's scored entries; the identity for decision-level log-probs [N])."""
    if logp.ndim == 1:
        return jnp.asarray(mask), lambda x: x
    if factor_mask is None:
        raise ValueError(f"per-entry log-probs {logp.shape} need factor_mask [N, F] (batch['logp_mask'])")
    fm = jnp.asarray(factor_mask, jnp.float32)
    count = jnp.maximum(jnp.sum(fm, axis=-1), 1.0)
    full = (jnp.asarray(mask) > 0)[:, None] & (fm > 0)
    return full, lambda x: jnp.sum(jnp.where(fm > 0, x, 0.0), axis=-1) / count


def _approx_kl(log_ratio: jax.Array) -> jax.Array:
    """Per-sample `(r - 1) - log r` (>= 0; the k3 estimator of KL(old || new) under old samples)."""
    return jnp.expm1(log_ratio) - log_ratio


def clipped_surrogate(ratio: jax.Array, advantages: jax.Array, clip_low: float, clip_high: float,
                      dual_clip: float = 0.0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The per-sample PPO loss with asymmetric clip and optional dual clip.

    ratio, advantages: [N]. `l = max(-r A, -clip(r, 1 - clip_low, 1 + clip_high) A)`; with
    `dual_clip = c > 1`, for `A < 0`: `l = min(l, -c A)` (the loss of a sample whose ratio ran
    far above 1 with a negative advantage is capped). Returns `(l [N], clipped [N] bool,
    dual_clipped [N] bool)`, the flags marking where the clipped / dual-clip branch was chosen.
    """
    adv = jax.lax.stop_gradient(advantages)
    unclipped = -ratio * adv
    clipped = -jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = jnp.maximum(unclipped, clipped)
    is_clipped = clipped > unclipped
    if dual_clip > 0:
        cap = -dual_clip * adv
        is_dual = (adv < 0) & (cap < loss)
        loss = jnp.where(is_dual, cap, loss)
    else:
        is_dual = jnp.zeros_like(is_clipped)
    return loss, is_clipped, is_dual


def _per_entry(advantages: jax.Array, logp: jax.Array) -> jax.Array:
    return advantages[:, None] if logp.ndim == 2 else advantages


def ppo_policy_loss(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array, mask: jax.Array, *,
                    clip_low: float, clip_high: float, dual_clip: float = 0.0, normalizer: Any = None,
                    factor_mask: jax.Array | None = None) -> tuple[jax.Array, Metrics]:
    """PPO clipped policy loss. logp (current), old_logp (the sampling policy): [N] (or [N, F] per
    entry, with `factor_mask` [N, F]); advantages, mask: [N].

    Metrics: `approx_kl = mean((r - 1) - log r)`, `clip_frac` (clipped branch chosen),
    `dual_clip_frac`, `ratio_mean`.
    """
    ratio_mask, reduce = _factor_masks(logp, mask, factor_mask)
    mean = lambda x: masked_mean(reduce(x), mask, normalizer)
    return _clipped_loss(logp, old_logp, advantages, ratio_mask, mean, None, clip_low, clip_high, dual_clip)


def _clipped_loss(logp, anchor_logp, advantages, ratio_mask, mean, weights, clip_low, clip_high, dual_clip
                  ) -> tuple[jax.Array, Metrics]:
    """The clipped surrogate of r = pi_theta / pi_anchor, times `weights` (None = 1), reduced by `mean`,
    and the metrics both PPO losses report."""
    log_ratio = _log_ratio(logp, anchor_logp, ratio_mask)
    ratio = jnp.exp(log_ratio)
    per, is_clipped, is_dual = clipped_surrogate(ratio, _per_entry(advantages, logp), clip_low, clip_high,
                                                 dual_clip)
    loss = mean(per if weights is None else weights * per)
    return loss, {
        "policy_loss": loss,
        "approx_kl": mean(jax.lax.stop_gradient(_approx_kl(log_ratio))),
        "clip_frac": mean(is_clipped.astype(jnp.float32)),
        "dual_clip_frac": mean(is_dual.astype(jnp.float32)),
        "ratio_mean": mean(jax.lax.stop_gradient(ratio)),
    }


def decoupled_ppo_policy_loss(logp: jax.Array, prox_logp: jax.Array, behaviour_logp: jax.Array,
                              advantages: jax.Array, mask: jax.Array, *, clip_low: float, clip_high: float,
                              dual_clip: float = 0.0, weight_cap: float = 2.0, weight_mode: str = "drop",
                              normalizer: Any = None, factor_mask: jax.Array | None = None
                              ) -> tuple[jax.Array, Metrics]:
    """Decoupled PPO (AReaL) for samples produced by a stale behaviour policy.

    logp (current), prox_logp (proximal policy: the trainer's weights before this update),
    behaviour_logp (the weights that produced the sample): [N] (or [N, F] per entry, with
    `factor_mask` [N, F]: weights, caps and ratios then per entry); advantages, mask: [N].
    `w = pi_prox / pi_b` (no gradient), `r' = pi_theta / pi_prox`,
    `l = w * clipped_surrogate(r', A)`. Samples with `w > weight_cap` are dropped
    (`weight_mode='drop'`, AReaL: weight 0, still counted in the denominator) or get `w = cap`
    (`'truncate'`). With `prox_logp == behaviour_logp` this is exactly `ppo_policy_loss`.
    Metrics are those of `ppo_policy_loss` (against pi_prox) plus `behaviour_weight_mean`,
    `behaviour_weight_max`, `behaviour_capped_frac` and `behaviour_kl` (k3, pi_b vs pi_prox).
    """
    if weight_mode not in ("drop", "truncate"):
        raise ValueError(f"weight_mode must be 'drop' or 'truncate', got {weight_mode!r}")
    ratio_mask, reduce = _factor_masks(logp, mask, factor_mask)
    m = jnp.asarray(ratio_mask) > 0
    log_w = jnp.where(m, jax.lax.stop_gradient(prox_logp) - jax.lax.stop_gradient(behaviour_logp), 0.0)
    w = jnp.exp(log_w)
    over = w > weight_cap
    w_used = jnp.where(over, 0.0 if weight_mode == "drop" else weight_cap, w)
    mean = lambda x: masked_mean(reduce(x), mask, normalizer)
    loss, metrics = _clipped_loss(logp, prox_logp, advantages, ratio_mask, mean, w_used, clip_low, clip_high,
                                  dual_clip)
    metrics = metrics | {
        "behaviour_weight_mean": mean(w),
        "behaviour_weight_max": jnp.max(jnp.where(m, w, 0.0)),
        "behaviour_capped_frac": mean(over.astype(jnp.float32)),
        "behaviour_kl": mean(_approx_kl(log_w)),
    }
    return loss, metrics


def value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array, mask: jax.Array, *,
               clip: float = 0.0, normalizer: Any = None) -> tuple[jax.Array, Metrics]:
    """`0.5 * mean((V - R)^2)`; with `clip > 0`, `0.5 * mean(max((V - R)^2, (V_c - R)^2))`
    where `V_c = V_old + clip(V - V_old, -clip, clip)`.

    values (current), old_values (recorded at rollout), returns (targets), mask: [N].
    Metrics: `value_loss`, `value_clip_frac` (the clipped error was the larger one).
    """
    ret = jax.lax.stop_gradient(returns)
    err = jnp.square(values - ret)
    if clip > 0:
        old = jax.lax.stop_gradient(old_values)
        v_clipped = old + jnp.clip(values - old, -clip, clip)
        err_clipped = jnp.square(v_clipped - ret)
        frac = masked_mean((err_clipped > err).astype(jnp.float32), mask, normalizer)
        err = jnp.maximum(err, err_clipped)
    else:
        frac = jnp.zeros((), jnp.float32)
    loss = 0.5 * masked_mean(err, mask, normalizer)
    return loss, {"value_loss": loss, "value_clip_frac": frac}


def entropy_bonus(entropy: jax.Array, mask: jax.Array, normalizer: Any = None) -> tuple[jax.Array, Metrics]:
    """Mean policy entropy over valid decisions ([N] -> []); the loss adds `-entropy_coef * it`."""
    ent = masked_mean(entropy, mask, normalizer)
    return ent, {"entropy": ent}


def kl_penalty(logp: jax.Array, ref_logp: jax.Array, mask: jax.Array,
               normalizer: Any = None, factor_mask: jax.Array | None = None) -> tuple[jax.Array, Metrics]:
    """KL(pi_theta || pi_ref) by the k3 estimator `exp(d) - d - 1`, `d = ref_logp - logp`.

    logp (current), ref_logp (reference policy, no gradient): [N] per decision, or [N, F] per
    scored entry with `factor_mask` [N, F]; mask: [N]. Per entry, a decision's KL is the sum of
    its entries' k3 (the chunk's entries are independent given the observation -- the token
    head's bins, a flow-chain step's Gaussian dims -- so its KL is the sum of theirs). k3 of
    the decision's summed log-ratio estimates the same KL, but exp of a sum over ~30 entries
    explodes: a drift of 0.3 nats per entry is a d of ~9, k3 ~ 8000, and a gradient of
    `kl_coef * (exp(d) - 1)` on that one decision (measured: `kl_ref` 240 in a quickstart run).
    Unbiased (for the samples' policy), non-negative, and with gradient
    pushing pi_theta toward pi_ref.
    """
    full, _ = _factor_masks(logp, mask, factor_mask)  # [N] or [N, F]: what counts
    d = jnp.where(full > 0, jax.lax.stop_gradient(ref_logp) - logp, 0.0)
    k3 = jnp.expm1(d) - d
    if logp.ndim == 2:
        k3 = jnp.sum(k3, axis=-1)  # [N]: the decision's KL
    kl = masked_mean(k3, mask, normalizer)
    return kl, {"kl_ref": kl}


def grpo_loss(logp: jax.Array, old_logp: jax.Array, ref_logp: jax.Array | None, advantages: jax.Array,
              mask: jax.Array, *, clip_low: float, clip_high: float, dual_clip: float = 0.0,
              kl_coef: float = 0.0, normalizer: Any = None) -> tuple[jax.Array, Metrics]:
    """GRPO: the PPO clipped loss on group-relative advantages plus `kl_coef * KL(pi || ref)`."""
    loss, metrics = ppo_policy_loss(logp, old_logp, advantages, mask, clip_low=clip_low, clip_high=clip_high,
                                    dual_clip=dual_clip, normalizer=normalizer)
    if kl_coef > 0:
        kl, m = kl_penalty(logp, ref_logp, mask, normalizer)
        loss = loss + kl_coef * kl
        metrics |= m
    return loss, metrics


def weight_negative_advantages(advantages: jax.Array, weight: float) -> jax.Array:
    """[N] -> [N]: negative entries times `weight` (0 keeps only the positive ones), the rest unchanged."""
    adv = jnp.asarray(advantages)
    return jnp.where(adv < 0, weight * adv, adv)


def rl_loss(config: RLConfig, logp: jax.Array, entropy: jax.Array | None, value: jax.Array | None,
            batch: dict[str, jax.Array], normalizer: Any = None) -> tuple[jax.Array, Metrics]:
    """The learner's total loss for one (micro-)batch.

    logp, entropy, value: [N] under the current params (entropy / value may be None); logp may be
    [N, F] per scored entry (VLA actors with `ratio_level='factor'` or `kl_coef > 0`), with the
    batch's log-probs [N, F] too and `logp_mask` [N, F]: the ratios are then per entry for
    `ratio_level='factor'`, else per decision (the entries' sums); the KL penalty is per entry.
    batch keys ([N] each): `old_logp` (behaviour), `advantages`, `mask`; `returns` and
    `old_values` when `value` is given; `prox_logp` (optional: switches to decoupled PPO with
    `old_logp` as the behaviour policy); `ref_logp` (needed when `config.kl_coef > 0`).
    `loss = policy + value_coef * value - entropy_coef * entropy + kl_coef * kl_ref`; the policy term
    sees the advantages with their negative entries scaled by `config.negative_advantage_weight`.
    """
    mask, adv = batch["mask"], batch["advantages"]
    if config.negative_advantage_weight != 1.0:
        adv = weight_negative_advantages(adv, config.negative_advantage_weight)
    entries, factor_mask = logp, batch.get("logp_mask")
    policy = {k: batch[k] for k in ("old_logp", "prox_logp") if k in batch}
    if logp.ndim == 2 and config.ratio_level == "decision":
        # per-entry log-probs kept for the KL penalty only (rl.kl_coef > 0): the ratios are per decision,
        # the sums of the scored entries (unscored entries are 0)
        logp, policy, factor_mask = jnp.sum(logp, -1), {k: jnp.sum(v, -1) for k, v in policy.items()}, None
    clip = dict(clip_low=config.clip_low, clip_high=config.clip_high, dual_clip=config.dual_clip,
                normalizer=normalizer, factor_mask=factor_mask)
    if "prox_logp" in policy:
        loss, metrics = decoupled_ppo_policy_loss(
            logp, policy["prox_logp"], policy["old_logp"], adv, mask, weight_cap=config.behaviour_weight_cap,
            weight_mode=config.behaviour_weight_mode, **clip)
    else:
        loss, metrics = ppo_policy_loss(logp, policy["old_logp"], adv, mask, **clip)
    if value is not None:
        vl, m = value_loss(value, batch["old_values"], batch["returns"], mask, clip=config.value_clip,
                           normalizer=normalizer)
        loss, metrics = loss + config.value_coef * vl, metrics | m
    if entropy is not None:
        ent, m = entropy_bonus(entropy, mask, normalizer)
        loss, metrics = loss - config.entropy_coef * ent, metrics | m
    if config.kl_coef > 0:
        if "ref_logp" not in batch:
            raise ValueError("rl.kl_coef > 0 needs batch['ref_logp'] (reference-policy log-probs)")
        kl, m = kl_penalty(entries, batch["ref_logp"], mask, normalizer, batch.get("logp_mask"))
        loss, metrics = loss + config.kl_coef * kl, metrics | m
    metrics["loss"] = loss
    return loss, metrics
