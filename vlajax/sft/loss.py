"""The loss SFT trains with (`vlajax.sft_loss`): behaviour cloning over a loader batch's sample slots.

One path for every batching mode (`data.batching`):

    emb   = embed_prefix(obs)                               per-sample prefix [N, L, W]
    rows  = gather_prefix(emb, prefix_index, seg, groups)   fixed: identity; packed: rows [R, T, W]
    cache = encode_prefix(rows, seg, pos)                   attention only within a segment
    per-sample cache = rows_to_samples(cache, ...)          each sample sees only its own tokens
    loss  = the head's one loss on that prefix: `heads.flow_loss_on_prefix` (flow matching) or
            `heads.token_loss_on_prefix` (action-token cross-entropy), over the live sample slots

so the packed forward pass is the padded one per sample. The π families (fixed batching) take
openpi's flow-matching loss on each sample slot (`heads.flow_loss`, the same function on the
prefix it encodes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vlajax.data.openpi import is_pi
from vlajax.data.packing import gather_prefix, rows_to_samples
from vlajax.models import heads
from vlajax.models.observation import Observation
from vlajax.models.transformer import KVCache
from vlajax.models.vla import VLA, aux_loss, weighted_mse
from vlajax.training import trainable

__all__ = ["aux_target_loss", "batch_observation", "loss_fn", "sample_cache"]


def batch_observation(batch: dict) -> Observation:
    """A loader batch (uint8 images) -> the model's `Observation` (images in [0, 1])."""
    return Observation(
        images={c: v.astype(jnp.float32) / 255.0 for c, v in batch["images"].items()},
        image_masks=dict(batch["image_masks"]),
        tokens=batch["tokens"], token_mask=batch["token_mask"], state=batch["state"])


def sample_cache(model: VLA, variables, batch: dict, groups: int, with_hidden: bool = False):
    """The prefix of every sample slot, encoded in the batch's rows (fixed / dynamic / packed).
    -> KVCache, or (KVCache, per-sample last hidden states [N, T, W]) with `with_hidden`."""
    obs = batch_observation(batch)
    emb, _ = model.apply(variables, obs, method=VLA.embed_prefix)
    seg, pos = batch["segment_ids"], batch["positions"]
    rows = gather_prefix(emb, batch["prefix_index"], seg, groups)
    hidden, cache = model.apply(variables, rows, seg, pos, method=VLA.encode_prefix)
    tree = (cache.k, cache.v, cache.positions) + ((hidden,) if with_hidden else ())
    out, own = rows_to_samples(tree, seg, batch["sample_row"], batch["sample_segment"])
    kv = KVCache(out[0], out[1], own, out[2])
    return (kv, out[3]) if with_hidden else kv


def aux_target_loss(model: VLA, variables, hidden, cache: KVCache, batch: dict):
    """`vla.aux_loss` of `model.aux_target`'s head on the prefix over the live sample slots, each weighted
    by its `aux_frame_weight` (float [N]: 0 = not counted; `sft.aux_start_weight` on start frames).
    -> (scalar, the decoded prediction f32 [N, D], metrics)."""
    raw = model.apply(variables, hidden, cache.segment_ids > 0, method=VLA.aux_raw)
    return aux_loss(model.cfg, raw, batch["aux_target"], batch["sample_mask"] * batch["aux_frame_weight"])


def loss_fn(params, model: VLA, batch: dict, rng, groups: int = 1, collections: dict | None = None,
            aux_weight: float = 1.0, target_noise: float = 0.0):
    """Masked behaviour-cloning loss over the live sample slots. -> (loss, metrics).

    With `model.aux_target` set, the loss also holds `aux_weight` x the auxiliary target's loss
    (`vla.aux_loss`: its MSE, or with `model.aux_grasp_bins` the grasp bins' cross-entropy plus the
    place MSE; metrics `aux_target_mse` [, `aux_grasp_ce`]; `flow_mse` / `token_ce` stay the action
    loss alone).
    With `model.target_conditioning` the action head is teacher-forced with the sample's own
    `batch['aux_target']` [N, D] plus N(0, target_noise^2) per dim (inference conditions on the
    prediction instead, `vlajax.models.heads`); metric `target_pred_mse`: the gradient-free
    prediction's MSE against it on every live slot (what inference would feed the head).

    collections: the model's other Flax collections (FP8 scales / amax histories); their
    gradient is their next value (see `TrainState.apply_gradients`)."""
    variables = {"params": params, **(collections or {})}
    variables = {**variables, "params": trainable.freeze(params, model.cfg)}  # model.trainable='expert'
    mask = batch["action_mask"] & batch["sample_mask"][:, None]
    if is_pi(model.cfg):  # pi families (fixed batching): openpi's flow-matching loss on each sample slot
        return heads.flow_loss(model, variables, batch_observation(batch), batch["actions"], rng, mask)
    aux = model.cfg.aux_target != "none"
    cache = sample_cache(model, variables, batch, groups, with_hidden=aux)
    extra: dict = {}
    aux_term = 0.0
    if aux:  # auxiliary target from the prefix (SFT only): added to the action loss with its weight
        cache, hidden = cache
        aux_value, aux_pred, aux_metrics = aux_target_loss(model, variables, hidden, cache, batch)
        extra.update(aux_metrics)
        aux_term = aux_weight * aux_value
    cond: dict = {}
    if model.cfg.target_conditioning:  # teacher forcing: the demo's own target (+ noise), not the prediction
        target = batch["aux_target"]
        if target_noise > 0:
            target = target + target_noise * jax.random.normal(jax.random.fold_in(rng, 1), target.shape)
        cond = {"target": target}
        # what inference feeds the head (VLA.predicted_target; model.target_conditioning needs aux_target)
        extra["target_pred_mse"] = weighted_mse(jax.lax.stop_gradient(aux_pred), batch["aux_target"],
                                                batch["sample_mask"])
    if model.cfg.action_head == "flow":
        loss, metrics = heads.flow_loss_on_prefix(model, variables, cache, batch["actions"], rng, mask, cond)
    else:
        loss, metrics = heads.token_loss_on_prefix(model, variables, cache, batch["actions"], mask, cond)
    return loss + aux_term, {**metrics, **extra}
