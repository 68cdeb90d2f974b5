"""Action heads as pure functions of `(model, variables, obs, ...)`: losses, samplers, log-probs, values.

Flow matching (pi0 convention, t = 1 is noise; see shared ALGORITHMS.md):
  flow_loss         t ~ Beta(1.5, 1) * 0.999 + 0.001, x_t = t eps + (1 - t) a, target u = eps - a
                    (`flow_loss_on_prefix` on an encoded prefix: the one copy, SFT's packed loss runs it).
  flow_sample       prefix encoded once (KV cache), K Euler steps of the expert from t = 1 to 0,
                    starting at x_1 ~ N(0, I) (cfg.flow_x1 = 'normal') or x_1 = 0 ('zeros').
                    `ode`: deterministic. `flow_sde`: one uniformly drawn step j per sample is an
                    SDE step (std sqrt(d) * sigma_t), every other step is the ODE step; the
                    log-prob is that step's Gaussian log-density (cfg.flow_sde_steps = 'all':
                    every step is an SDE step and the log-prob sums them; 'last': only the last
                    step, j = K - 1). `flow_noise`: every step adds a learned std; the log-prob sums all steps.
  flow_chain_log_prob  recomputes the log-prob of a stored chain x_1 .. x_0 under new params
                    ('last': the K - 1 ODE steps are re-run from the stored x_1, so the log-prob is
                    the exact density of the actions given x_1: no parameter-dependent step is left out).
Action tokens (OpenVLA-OFT): each dim of [-1, 1] split into `num_bins` bins, all H*A tokens
decoded in one pass; `log pi = sum log softmax(logits / T)[token]`, T = 0 is argmax.
Value: `value(...)` -> [B] from the prefix or from the head's hidden states (cfg.value_head).

Target conditioning (`cfg.target_conditioning`): every function here encodes the prefix through
`_prefix`, which also returns the model's own gradient-stopped `aux_target` prediction [B, D] and
passes it to the head as its condition, so sampling, log-probs and values at inference (eval, RL,
serving) are conditioned on the predicted target; only `vlajax.sft.loop` teacher-forces the demo's target.

Shapes: actions [B, H, A]; masks over actions bool/float [B, H, A] or [B, H] (None = all);
chains [B, K + 1, H, A] with chain[:, 0] = x_1 (noise) and chain[:, K] = the actions.
"""

from __future__ import annotations

import math

import flax.struct
import jax
import jax.numpy as jnp

from vlajax.models.observation import Observation
from vlajax.models.vla import VLA

_LOG_2PI = math.log(2 * math.pi)


def _mask(mask, shape) -> jax.Array:
    """Float mask broadcast to `shape` [B, H, A]."""
    if mask is None:
        return jnp.ones(shape, jnp.float32)
    mask = mask.astype(jnp.float32)
    return jnp.broadcast_to(mask[..., None] if mask.ndim == 2 else mask, shape)


def _prefix(model: VLA, variables, obs: Observation):
    """Encode the prefix. -> (hidden [B, L, W], KVCache, cond): cond = {'target': [B, D]} (the predicted
    target, `cfg.target_conditioning`) to pass to `velocity` / `action_logits`, else {}."""
    hidden, cache = model.apply(variables, obs, method="prefix")
    if getattr(model.cfg, "target_conditioning", False):
        target = model.apply(variables, hidden, cache.segment_ids > 0, method="predicted_target")
        return hidden, cache, {"target": target}
    return hidden, cache, {}


# ------------------------------------------------------------------------------------ flow


def flow_loss(model: VLA, variables, obs: Observation, actions, rng, action_mask=None):
    """Flow-matching MSE. -> (loss scalar, metrics). Masked entries do not count."""
    _, cache, cond = _prefix(model, variables, obs)
    return flow_loss_on_prefix(model, variables, cache, actions, rng, action_mask, cond)


def flow_loss_on_prefix(model: VLA, variables, cache, actions, rng, action_mask=None, cond=None):
    """The one flow-matching loss, given the encoded prefix (a KVCache per sample: `flow_loss` encodes
    one per row, SFT's packed batches one per sample slot) and the head's condition `cond`.
    actions [B, H, A]; mask [B, H, A] or [B, H]. -> (loss scalar, {'flow_mse': loss})."""
    b = actions.shape[0]
    k_t, k_eps = jax.random.split(rng)
    t = jax.random.beta(k_t, 1.5, 1.0, (b,)) * 0.999 + 0.001
    eps = jax.random.normal(k_eps, actions.shape)
    x_t = t[:, None, None] * eps + (1 - t[:, None, None]) * actions
    v, _, _ = model.apply(variables, cache, x_t, t, method="velocity", **(cond or {}))
    m = _mask(action_mask, actions.shape)
    loss = jnp.sum(m * (v - (eps - actions)) ** 2) / jnp.maximum(m.sum(), 1.0)
    return loss, {"flow_mse": loss}


def _times(num_steps: int) -> tuple[jax.Array, float]:
    return 1.0 - jnp.arange(num_steps, dtype=jnp.float32) / num_steps, 1.0 / num_steps


def _step_gaussian(sampler, noise_level, v, log_std, x, t, d, stochastic):
    """Mean and std [B,H,A] of x_{t-d} given v; t [B]; `stochastic` bool [B] marks flow_sde's step j."""
    t3 = t[:, None, None]
    t_next = t3 - d
    x0_hat, x1_hat = x - t3 * v, x + (1 - t3) * v
    ode_mean = (1 - t_next) * x0_hat + t_next * x1_hat
    if sampler == "ode":
        return ode_mean, jnp.zeros_like(x)
    if sampler == "flow_noise":
        return ode_mean, jnp.exp(log_std)
    denom = jnp.where(t3 >= 1.0, 1.0 - t_next, 1.0 - t3)  # RLinf: 1 - t_next at t = 1
    sigma = noise_level * jnp.sqrt(t3 / denom)
    sde_mean = (1 - t_next) * x0_hat + (t_next - sigma**2 * d / (2 * t3)) * x1_hat
    s = stochastic[:, None, None]
    return jnp.where(s, sde_mean, ode_mean), jnp.where(s, math.sqrt(d) * sigma, 0.0) * jnp.ones_like(x)


def _gauss_logp_terms(x, mean, std):
    """Entry-wise log N(x; mean, std^2) [B, H, A]; entries with std == 0 are 0."""
    safe = jnp.where(std > 0, std, 1.0)
    lp = -0.5 * ((x - mean) / safe) ** 2 - jnp.log(safe) - 0.5 * _LOG_2PI
    return jnp.where(std > 0, lp, 0.0)


def _gauss_entropy(std, m):
    safe = jnp.where(std > 0, std, 1.0)
    return jnp.sum(jnp.where(std > 0, 0.5 * (1 + _LOG_2PI) + jnp.log(safe), 0.0) * m, axis=(1, 2))


@flax.struct.dataclass
class FlowSample:
    """Output of `flow_sample`."""

    actions: jax.Array  # [B, H, A] = chain[:, -1]
    chain: jax.Array  # [B, K + 1, H, A], chain[:, 0] is the initial noise x_1
    log_prob: jax.Array  # [B] (0 for the ODE sampler)
    sde_step: jax.Array  # int32 [B]: the stochastic step of flow_sde (-1 otherwise)
    value: jax.Array | None  # [B] when cfg.value_head != 'none'
    # [B, H, A]: each entry's log-density summed over the denoising steps, unmasked (a log-prob
    # under any mask m is sum(log_prob_terms * m); what the rollout scores once the env has run)
    log_prob_terms: jax.Array | None = None


def flow_sample(model: VLA, variables, obs: Observation, rng, *, sampler: str | None = None,
                logp_mask=None, x1=None) -> FlowSample:
    """K-step sampler with a cached prefix. sampler: 'ode' | 'flow_sde' | 'flow_noise' (default cfg).
    x1: the starting noise [B, H, A] when given (openpi's `sample_actions(noise=...)`), else per cfg.flow_x1."""
    cfg = model.cfg
    sampler = sampler or cfg.flow_sampler
    if sampler == "flow_noise" and cfg.flow_sampler != "flow_noise":
        raise ValueError("sampler='flow_noise' needs a model built with cfg.flow_sampler='flow_noise'")
    b, K = obs.batch_size, cfg.num_denoise_steps
    shape = (b, cfg.action_horizon, cfg.action_dim)
    k_x, k_j, k_steps = jax.random.split(rng, 3)
    hidden, cache, cond = _prefix(model, variables, obs)
    if x1 is None:
        x1 = jax.random.normal(k_x, shape) if cfg.flow_x1 == "normal" else jnp.zeros(shape)
    else:
        x1 = jnp.broadcast_to(jnp.asarray(x1, jnp.float32), shape)
    one = sampler == "flow_sde" and cfg.flow_sde_steps == "one"
    last = sampler == "flow_sde" and cfg.flow_sde_steps == "last"
    j = jax.random.randint(k_j, (b,), 0, K) if one else jnp.full((b,), K - 1 if last else -1, jnp.int32)
    every = sampler == "flow_sde" and cfg.flow_sde_steps == "all"
    ts, d = _times(K)
    m = _mask(logp_mask, shape)

    def step(x, inp):
        k, t, key = inp
        tb = jnp.full((b,), t)
        v, log_std, _ = model.apply(variables, cache, x, tb, method="velocity", **cond)
        mean, std = _step_gaussian(sampler, cfg.noise_level, v, log_std, x, tb, d, (j == k) | every)
        x_next = mean + std * jax.random.normal(key, shape)
        return x_next, (x_next, _gauss_logp_terms(x_next, mean, std))

    _, (xs, terms) = jax.lax.scan(step, x1, (jnp.arange(K), ts, jax.random.split(k_steps, K)))
    chain = jnp.concatenate([x1[:, None], jnp.moveaxis(xs, 0, 1)], axis=1)
    terms = terms.sum(0)  # [B, H, A]; flow_sde 'one'/'last': one nonzero step per entry, so exact
    val = _value_from(model, variables, hidden, cache, cond) if cfg.value_head != "none" else None
    return FlowSample(chain[:, -1], chain, jnp.sum(terms * m, axis=(1, 2)), j.astype(jnp.int32), val, terms)


def flow_chain_log_prob(model: VLA, variables, obs: Observation, chain, sde_step=None, *,
                        sampler: str | None = None, logp_mask=None) -> dict[str, jax.Array]:
    """Log-prob [B] (and entropy [B]) of a stored chain [B, K+1, H, A] under `variables`, and
    `log_prob_terms` [B, H, A]: each entry's log-density (summed over the evaluated steps), unmasked.

    flow_sde evaluates only step `sde_step` (one expert call; with cfg.flow_sde_steps = 'all',
    every step; 'last': the ODE steps from the stored x_1, then the last step); flow_noise
    evaluates every step.
    """
    cfg = model.cfg
    sampler = sampler or cfg.flow_sampler
    b, K = chain.shape[0], chain.shape[1] - 1
    shape = chain.shape[:1] + chain.shape[2:]
    ts, d = _times(K)
    m = _mask(logp_mask, shape)
    _, cache, cond = _prefix(model, variables, obs)
    every = sampler == "flow_sde" and cfg.flow_sde_steps == "all"
    if sampler == "flow_sde" and cfg.flow_sde_steps == "last":
        def ode_step(x, k):
            tb = jnp.full((b,), ts[k])
            v, _, _ = model.apply(variables, cache, x, tb, method="velocity", **cond)
            return _step_gaussian("ode", cfg.noise_level, v, None, x, tb, d, None)[0], None

        x, _ = jax.lax.scan(ode_step, chain[:, 0], jnp.arange(K - 1))  # x_{t_K-1} under `variables`
        t = jnp.full((b,), ts[K - 1])
        v, _, _ = model.apply(variables, cache, x, t, method="velocity", **cond)
        mean, std = _step_gaussian(sampler, cfg.noise_level, v, None, x, t, d, jnp.ones((b,), bool))
        terms = _gauss_logp_terms(chain[:, K], mean, std)
        return {"log_prob": jnp.sum(terms * m, axis=(1, 2)), "entropy": _gauss_entropy(std, m),
                "log_prob_terms": terms}
    if sampler == "flow_sde" and not every:
        if sde_step is None:
            raise ValueError("flow_sde log-probs need the stored sde_step [B] of each chain")
        x = jnp.take_along_axis(chain, sde_step[:, None, None, None], axis=1)[:, 0]
        x_next = jnp.take_along_axis(chain, sde_step[:, None, None, None] + 1, axis=1)[:, 0]
        t = ts[sde_step]
        v, log_std, _ = model.apply(variables, cache, x, t, method="velocity", **cond)
        mean, std = _step_gaussian(sampler, cfg.noise_level, v, log_std, x, t, d, jnp.ones((b,), bool))
        terms = _gauss_logp_terms(x_next, mean, std)
        return {"log_prob": jnp.sum(terms * m, axis=(1, 2)), "entropy": _gauss_entropy(std, m),
                "log_prob_terms": terms}

    def step(carry, k):
        x, x_next = chain[:, k], chain[:, k + 1]
        tb = jnp.full((b,), ts[k])
        v, log_std, _ = model.apply(variables, cache, x, tb, method="velocity", **cond)
        mean, std = _step_gaussian(sampler, cfg.noise_level, v, log_std, x, tb, d, jnp.full((b,), every))
        return carry, (_gauss_logp_terms(x_next, mean, std), _gauss_entropy(std, m))

    _, (terms, ents) = jax.lax.scan(step, None, jnp.arange(K))
    terms = terms.sum(0)  # [B, H, A]: each entry's log-density summed over the denoising steps
    return {"log_prob": jnp.sum(terms * m, axis=(1, 2)), "entropy": ents.sum(0), "log_prob_terms": terms}


# ------------------------------------------------------------------------------------ tokens


def actions_to_bins(actions, num_bins: int) -> jax.Array:
    """[-1, 1] -> int32 bins in [0, num_bins) (uniform bins; values outside are clipped)."""
    idx = jnp.floor((jnp.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * num_bins)
    return jnp.clip(idx, 0, num_bins - 1).astype(jnp.int32)


def bins_to_actions(bins, num_bins: int) -> jax.Array:
    """Bin centres in [-1, 1]. int [..] -> float32 [..]."""
    return -1.0 + (bins.astype(jnp.float32) + 0.5) * (2.0 / num_bins)


def token_log_probs(logits, temperature: float = 1.0) -> jax.Array:
    """log softmax(logits / T) over bins; T = 0 is treated as T = 1 (argmax sampling is its mode)."""
    return jax.nn.log_softmax(logits / (temperature if temperature > 0 else 1.0), axis=-1)


def token_loss(model: VLA, variables, obs: Observation, actions, action_mask=None):
    """Cross-entropy of the binned actions. -> (loss, metrics with token accuracy)."""
    _, cache, cond = _prefix(model, variables, obs)
    return token_loss_on_prefix(model, variables, cache, actions, action_mask, cond)


def token_loss_on_prefix(model: VLA, variables, cache, actions, action_mask=None, cond=None):
    """The one action-token cross-entropy, given the encoded prefix (as `flow_loss_on_prefix`).
    -> (loss, {'token_ce', 'token_acc'})."""
    logits, _ = model.apply(variables, cache, method="action_logits", **(cond or {}))
    target = actions_to_bins(actions, model.cfg.num_bins)
    lp = jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], axis=-1)[..., 0]
    m = _mask(action_mask, actions.shape)
    denom = jnp.maximum(m.sum(), 1.0)
    loss = -jnp.sum(lp * m) / denom
    acc = jnp.sum((jnp.argmax(logits, -1) == target) * m) / denom
    return loss, {"token_ce": loss, "token_acc": acc}


@flax.struct.dataclass
class TokenSample:
    """Output of `token_sample`."""

    actions: jax.Array  # [B, H, A] bin centres
    tokens: jax.Array  # int32 [B, H, A]
    log_prob: jax.Array  # [B]
    value: jax.Array | None  # [B] when cfg.value_head != 'none'
    log_prob_terms: jax.Array | None = None  # [B, H, A]: each token's log-prob, unmasked


def token_sample(model: VLA, variables, obs: Observation, rng, *, temperature: float = 1.0,
                 logp_mask=None) -> TokenSample:
    """Parallel decoding of the whole chunk at temperature T (T = 0: argmax)."""
    cfg = model.cfg
    hidden, cache, cond = _prefix(model, variables, obs)
    logits, _ = model.apply(variables, cache, method="action_logits", **cond)
    if temperature == 0:
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    else:
        tokens = jax.random.categorical(rng, logits / temperature, axis=-1).astype(jnp.int32)
    lp = jnp.take_along_axis(token_log_probs(logits, temperature), tokens[..., None], axis=-1)[..., 0]
    m = _mask(logp_mask, tokens.shape)
    val = _value_from(model, variables, hidden, cache, cond) if cfg.value_head != "none" else None
    return TokenSample(bins_to_actions(tokens, cfg.num_bins), tokens, jnp.sum(lp * m, axis=(1, 2)), val, lp)


def token_chunk_log_prob(model: VLA, variables, obs: Observation, tokens, *, temperature: float = 1.0,
                         logp_mask=None) -> dict[str, jax.Array]:
    """Log-prob [B] and entropy [B] of stored tokens int32 [B, H, A] under `variables`, and
    `log_prob_terms` [B, H, A]: each token's log-prob, unmasked."""
    _, cache, cond = _prefix(model, variables, obs)
    logits, _ = model.apply(variables, cache, method="action_logits", **cond)
    logp = token_log_probs(logits, temperature)
    m = _mask(logp_mask, tokens.shape)
    lp = jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
    ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return {"log_prob": jnp.sum(lp * m, axis=(1, 2)), "entropy": jnp.sum(ent * m, axis=(1, 2)),
            "log_prob_terms": lp}


# ------------------------------------------------------------------------------------ value


def _value_from(model: VLA, variables, hidden, cache, cond) -> jax.Array:
    cfg = model.cfg
    if cfg.value_head == "prefix":
        return model.apply(variables, hidden, cache.segment_ids > 0, method="value")
    if cfg.action_head == "flow":  # the expert on a zero chunk at t = 1: a function of the observation only
        b = hidden.shape[0]
        x = jnp.zeros((b, cfg.action_horizon, cfg.action_dim))
        _, _, head = model.apply(variables, cache, x, jnp.ones((b,)), method="velocity", **cond)
    else:
        _, head = model.apply(variables, cache, method="action_logits", **cond)
    return model.apply(variables, head, jnp.ones(head.shape[:2], bool), method="value")


def value(model: VLA, variables, obs: Observation) -> jax.Array:
    """State value [B] from the configured value head (cfg.value_head must not be 'none')."""
    if model.cfg.value_head == "none":
        raise ValueError("model.value_head='none': this model has no value head")
    hidden, cache, cond = _prefix(model, variables, obs)
    return _value_from(model, variables, hidden, cache, cond)
