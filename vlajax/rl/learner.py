"""The PPO / GRPO update over one collected batch, generic over the policy.

The policy enters only through `logp_value_fn(params, batch, rng) -> (logp [N], entropy [N] |
None, value [N] | None)` (logp [N, F] per scored entry with `rl.ratio_level='factor'` or, for a
VLA, `rl.kl_coef > 0`, the batch then holding `logp_mask` [N, F]), evaluated on a (micro-)batch
of N decisions: the flow head recomputes its log-probs from the stored denoising chain, the
token head from the stored tokens, the MLP policy from the stored action chunk. Everything
else (advantages, old log-probs, masks) is batch data.

Batch: a dict of arrays with a leading decision axis `[N]` (see `flatten_decisions`), holding
what `vlajax.rl.losses.rl_loss` reads (`old_logp`, `advantages`, `mask`, `returns`,
`old_values`, optional `prox_logp`, `ref_logp`) plus whatever `logp_value_fn` reads.

`update` is a module-level pure function: jit it once at the call site,

    step = jax.jit(functools.partial(learner.update, cfg.rl, logp_value_fn), donate_argnums=(1,))
    state, metrics = step(rng, state, batch)

It runs `update_epochs` passes; each pass shuffles the N decisions and splits them into
`num_minibatches` minibatches; each minibatch is split into `micro_batches` micro-batches
whose gradients are accumulated in a `lax.scan` (summed with the minibatch's normalizer, so
they equal the whole minibatch's gradient), then one optimizer update. Under a mesh with a
`dp` axis (`jax.set_mesh` / `sharding.use_mesh`), minibatches and micro-batches stay split
over `dp`: both are cut strided (rows `i::k`), so each device keeps its share.

A minibatch whose loss or gradient is not finite is *not applied* (the state stays as it was)
and counted in `metrics['nonfinite']`; the caller stops the run with `check_finite`.

Streaming (micro-batches arriving one by one, one optimizer update per global batch) uses the
same pieces: `compute_gradients(..., normalizer=1.0)` per arriving micro-batch gives masked
*sums*; add them up, divide by the total valid count, then `apply_gradients`. That equals
`accumulate_gradients` on the concatenated batch (tested). Normalize advantages before
streaming (`normalize_advantages='batch'` at collection, or 'none'): per-minibatch
normalization needs the whole minibatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec

from vlajax.config.schema import DP, RLConfig
from vlajax.rl.losses import masked_mean, rl_loss
from vlajax.training.train_state import TrainState

__all__ = [
    "LogpValueFn", "NonFiniteError", "make_optimizer", "critic_warmup", "flatten_decisions", "normalize_advantages",
    "with_reference", "REF_STREAM", "explained_variance", "compute_gradients", "accumulate_gradients",
    "apply_gradients", "update", "recompute_log_probs", "check_finite",
]

LogpValueFn = Callable[[Any, dict, jax.Array], tuple[jax.Array, jax.Array | None, jax.Array | None]]
Metrics = dict[str, jax.Array]


class NonFiniteError(FloatingPointError):
    """A loss or gradient was NaN/inf; the offending update was skipped (params are the last good ones)."""


CRITIC_KEYS = ("critic", "value_hidden", "value_out")  # top-level param names of the critics (MLP, VLA)


def critic_labels(params: Any) -> Any:
    """A tree like `params` labelling each leaf 'critic' (under a `CRITIC_KEYS` module) or 'policy'."""
    def label(path, _):
        first = path[0]
        name = getattr(first, "key", getattr(first, "name", None))
        return "critic" if name in CRITIC_KEYS else "policy"

    return jax.tree_util.tree_map_with_path(label, params)


def make_optimizer(config: RLConfig) -> optax.GradientTransformation:
    """Adam at `learning_rate`, after global-norm clipping at `grad_clip` (0 = no clipping).

    With `value_learning_rate > 0` the critic's own params (`CRITIC_KEYS`) take that rate
    instead (a fresh value head next to a pretrained policy usually needs a larger one).
    With `lr_warmup_steps > 0` every rate ramps linearly from 0 over that many optimizer steps
    (one step per minibatch update); the step count lives in the optimizer state, so it resumes.
    """
    parts = [optax.clip_by_global_norm(config.grad_clip)] if config.grad_clip > 0 else []
    n = config.lr_warmup_steps  # step k (0-based) scaled by min(1, (k + 1) / n), after Adam
    warmup = [optax.scale_by_schedule(lambda k: jnp.minimum(1.0, (k + 1) / n))] if n > 0 else []
    if config.value_learning_rate <= 0:
        return optax.chain(*parts, optax.adam(config.learning_rate), *warmup)
    rates = {"policy": -config.learning_rate, "critic": -config.value_learning_rate}

    def per_leaf_rate(updates, params):  # Adam's direction times each leaf's own rate (stateless)
        del params
        labels = critic_labels(updates)
        return jax.tree.map(lambda u, label: u * rates[label], updates, labels)

    # (optax.multi_transform would give the same updates, but its masked states do not shard)
    return optax.chain(*parts, optax.scale_by_adam(), optax.stateless(per_leaf_rate), *warmup)


def critic_warmup(config: RLConfig, update: int, batch: dict) -> dict:
    """`batch` for the `update`-th update (0-based): during the first `critic_warmup_iterations`
    its advantages are zeroed, so the policy gets no gradient and only the critic learns."""
    if update < config.critic_warmup_iterations:
        return batch | {"advantages": jnp.zeros_like(batch["advantages"])}
    return batch


# ----------------------------------------------------------------------------------------
# Batch helpers
# ----------------------------------------------------------------------------------------


def flatten_decisions(tree: Any) -> Any:
    """Time-major `[T, B, ...]` leaves -> `[B * T, ...]`, env-major (row `b * T + t`).

    Env-major keeps each env's decisions on the device that holds the env when B is split
    over `dp`, so flattening moves no data.
    """
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:]), tree)


def normalize_advantages(advantages: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
    """[N] -> [N]: zero mean, unit std over the valid entries (masked entries become 0)."""
    mean = masked_mean(advantages, mask)
    std = jnp.sqrt(masked_mean(jnp.square(advantages - mean), mask))
    return jnp.where(jnp.asarray(mask) > 0, (advantages - mean) / (std + eps), 0.0)


def explained_variance(values: jax.Array, returns: jax.Array, mask: jax.Array) -> jax.Array:
    """`1 - Var(R - V) / Var(R)` over valid entries ([N] -> []); 0 when Var(R) = 0."""
    def var(x):
        mean = masked_mean(x, mask)
        return masked_mean(jnp.square(x - mean), mask)

    var_r = var(returns)
    return jnp.where(var_r > 0, 1.0 - var(returns - values) / jnp.where(var_r > 0, var_r, 1.0), 0.0)


def _constrain(tree: Any, batch_dim: int) -> Any:
    """Keep dim `batch_dim` split over `dp` when a mesh with a `dp` axis is current."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or DP not in mesh.axis_names:
        return tree
    spec = PartitionSpec(*([None] * batch_dim), DP)
    dp = mesh.shape[DP]
    return jax.tree.map(
        lambda x: jax.lax.with_sharding_constraint(x, spec) if x.shape[batch_dim] % dp == 0 else x, tree
    )


def _split(tree: Any, k: int) -> Any:
    """`[N, ...]` -> `[k, N // k, ...]`, strided: part i holds rows `i, i + k, i + 2k, ...`."""

    def one(x):
        n = x.shape[0]
        return jnp.swapaxes(x.reshape(n // k, k, *x.shape[1:]), 0, 1)

    return _constrain(jax.tree.map(one, tree), 1)


def _unsplit(tree: Any) -> Any:
    """Inverse of `_split`: `[k, M, ...]` -> `[M * k, ...]`."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:]), tree)


def _reduce(stacked: Metrics) -> Metrics:
    """Combine stacked per-part metrics: `*_max` by max, the rest by sum."""
    return {k: (jnp.max(v, 0) if k.endswith("_max") else jnp.sum(v, 0)) for k, v in stacked.items()}


# ----------------------------------------------------------------------------------------
# Gradients
# ----------------------------------------------------------------------------------------


def compute_gradients(config: RLConfig, logp_value_fn: LogpValueFn, params: Any, batch: dict, rng: jax.Array,
                      normalizer: Any = None) -> tuple[Any, Metrics]:
    """Gradient of `rl_loss` on one (micro-)batch of N decisions -> `(grads, metrics)`.

    `normalizer` divides the masked sums (default: this batch's valid count); see `losses`.
    """

    def loss_fn(p):
        logp, entropy, value = logp_value_fn(p, batch, rng)
        return rl_loss(config, logp, entropy, value, batch, normalizer)

    grads, metrics = jax.grad(loss_fn, has_aux=True)(params)
    return grads, metrics


def accumulate_gradients(config: RLConfig, logp_value_fn: LogpValueFn, params: Any, minibatch: dict,
                         rng: jax.Array, micro_batches: int) -> tuple[Any, Metrics]:
    """The minibatch's gradient as the sum over `micro_batches` micro-batches (`lax.scan`).

    Every micro-batch is normalized by the *minibatch's* valid count, so the sum equals the
    gradient of the whole minibatch's masked-mean loss (up to float rounding), and equals
    the mean of per-micro-batch gradients when each micro-batch holds the same valid count.
    Metrics add up the same way (`*_max` entries take the max).
    """
    normalizer = jnp.maximum(jnp.sum(jnp.asarray(minibatch["mask"], jnp.float32)), 1.0)
    if micro_batches == 1:
        return compute_gradients(config, logp_value_fn, params, minibatch, rng, normalizer)
    n = minibatch["mask"].shape[0]
    if n % micro_batches:
        raise ValueError(f"a minibatch of {n} decisions does not split into rl.micro_batches={micro_batches}")
    micro = _split(minibatch, micro_batches)
    keys = jax.random.split(rng, micro_batches)
    zeros = jax.tree.map(jnp.zeros_like, params)

    def body(acc, x):
        mb, key = x
        grads, metrics = compute_gradients(config, logp_value_fn, params, mb, key, normalizer)
        return jax.tree.map(jnp.add, acc, grads), metrics

    grads, metrics = jax.lax.scan(body, zeros, (micro, keys))
    return grads, _reduce(metrics)


def apply_gradients(state: TrainState, grads: Any, metrics: Metrics, skip: jax.Array | bool = False
                    ) -> tuple[TrainState, Metrics]:
    """One optimizer update, unless the loss or gradient is not finite or `skip` is set.

    Returns the new state (or the old one, untouched) and `metrics` plus `grad_norm` (before
    clipping), `nonfinite` (1.0 if this update was refused as non-finite) and `applied`.
    """
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    ok = finite & jnp.logical_not(skip)
    new = state.apply_gradients(grads)
    state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state)
    return state, metrics | {
        "grad_norm": grad_norm,
        "nonfinite": jnp.logical_not(finite).astype(jnp.float32),
        "applied": ok.astype(jnp.float32),
    }


# ----------------------------------------------------------------------------------------
# The update
# ----------------------------------------------------------------------------------------


def update(config: RLConfig, logp_value_fn: LogpValueFn, rng: jax.Array, state: TrainState,
           batch: dict) -> tuple[TrainState, Metrics]:
    """`update_epochs` x `num_minibatches` optimizer updates on one collected batch.

    rng: typed key; state: TrainState; batch: dict of `[N, ...]` arrays (N divisible by
    `num_minibatches * micro_batches`). Returns the new state and scalar metrics: the loss
    metrics averaged over the updates that ran (`policy_loss`, `value_loss`, `entropy`,
    `approx_kl`, `clip_frac`, ...), `grad_norm` (mean) and `grad_norm_max`, batch statistics
    (`advantage_mean`, `advantage_std`, `explained_variance`, `valid_frac`), and counters:
    `updates` (applied), `nonfinite` (refused as non-finite; > 0 means stop the run),
    `kl_stopped` (1 if `target_kl` cut the epochs short).
    """
    n = batch["mask"].shape[0]
    k = config.num_minibatches
    if n % (k * config.micro_batches):
        raise ValueError(
            f"{n} decisions do not split into rl.num_minibatches={k} x rl.micro_batches={config.micro_batches}"
        )
    batch = dict(batch)
    mask = jnp.asarray(batch["mask"], jnp.float32)
    batch["mask"] = mask
    adv = batch["advantages"]
    adv_mean = masked_mean(adv, mask)
    stats = {
        "advantage_mean": adv_mean,
        "advantage_std": jnp.sqrt(masked_mean(jnp.square(adv - adv_mean), mask)),
        "valid_frac": jnp.mean(mask),
    }
    if "old_values" in batch and "returns" in batch:
        stats["explained_variance"] = explained_variance(batch["old_values"], batch["returns"], mask)
    if config.normalize_advantages == "batch":
        batch["advantages"] = normalize_advantages(adv, mask)

    def minibatch_step(carry, x):
        state, stopped = carry
        mb, key = x
        if config.normalize_advantages == "minibatch":
            mb = mb | {"advantages": normalize_advantages(mb["advantages"], mb["mask"])}
        grads, metrics = accumulate_gradients(config, logp_value_fn, state.params, mb, key, config.micro_batches)
        over_kl = (config.target_kl > 0) & (metrics["approx_kl"] > config.target_kl)
        state, metrics = apply_gradients(state, grads, metrics, skip=stopped | over_kl)
        metrics["counted"] = jnp.logical_not(stopped).astype(jnp.float32)
        return (state, stopped | over_kl), metrics

    def epoch_step(carry, key):
        perm_key, mb_key = jax.random.split(key)
        perm = jax.random.permutation(perm_key, n)
        shuffled = _split(jax.tree.map(lambda x: jnp.take(x, perm, axis=0), batch), k)
        return jax.lax.scan(minibatch_step, carry, (shuffled, jax.random.split(mb_key, k)))

    batch = _constrain(batch, 0)
    (state, stopped), per = jax.lax.scan(
        epoch_step, (state, jnp.zeros((), bool)), jax.random.split(rng, config.update_epochs)
    )
    per = jax.tree.map(lambda x: x.reshape(-1), per)  # [epochs * minibatches]
    counted = per.pop("counted")
    applied, nonfinite = per.pop("applied"), per.pop("nonfinite")
    weight = counted / jnp.maximum(jnp.sum(counted), 1.0)
    metrics = {key: (jnp.max(v) if key.endswith("_max") else jnp.sum(v * weight)) for key, v in per.items()}
    metrics |= stats | {
        "grad_norm_max": jnp.max(jnp.where(counted > 0, per["grad_norm"], 0.0)),
        "updates": jnp.sum(applied),
        "nonfinite": jnp.sum(nonfinite),
        "kl_stopped": stopped.astype(jnp.float32),
    }
    return state, metrics


def recompute_log_probs(logp_value_fn: LogpValueFn, params: Any, batch: dict, rng: jax.Array,
                        chunks: int = 1) -> tuple[jax.Array, jax.Array | None]:
    """`(logp [N], value [N] | None)` of a whole batch under `params`, in `chunks` sequential pieces.

    For proximal log-probs (decoupled PPO), reference log-probs (KL penalty), and checking
    that the learner reproduces the rollout's log-probs.
    """
    if chunks == 1:
        logp, _, value = logp_value_fn(params, batch, rng)
        return logp, value
    parts = _split(batch, chunks)
    keys = jax.random.split(rng, chunks)

    def one(x):
        logp, _, value = logp_value_fn(params, x[0], x[1])
        return logp, value

    logp, value = jax.lax.map(one, (parts, keys))
    return _unsplit(logp), (None if value is None else _unsplit(value))


REF_STREAM = 11  # fold_in of an update's key for its reference log-probs


def with_reference(logp_value_fn: LogpValueFn, ref_params: Any, batch: dict, rng: jax.Array) -> dict:
    """`batch` plus `ref_logp` [N]: the log-probs of its actions under the frozen reference
    policy `ref_params` (the run's initial params: the KL penalty of `rl.kl_coef`)."""
    return batch | {"ref_logp": jax.lax.stop_gradient(recompute_log_probs(logp_value_fn, ref_params, batch, rng)[0])}


def check_finite(metrics: dict[str, Any], step: int | None = None) -> None:
    """Host side, after `jax.device_get(metrics)`: raise `NonFiniteError` if an update was refused."""
    bad = float(metrics.get("nonfinite", 0.0))
    if bad > 0:
        where = f" at learner step {step}" if step is not None else ""
        detail = ", ".join(f"{k}={float(metrics[k]):.4g}" for k in ("policy_loss", "value_loss", "grad_norm")
                           if k in metrics)
        raise NonFiniteError(
            f"non-finite loss or gradient in {int(bad)} minibatch update(s){where} ({detail}); those updates "
            "were skipped, so the parameters are the last finite ones. Stop here and resume from the last "
            "checkpoint with a lower rl.learning_rate or tighter rl.grad_clip."
        )
