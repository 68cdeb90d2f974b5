"""Which parameters train (`model.trainable`): all of them, or the action expert with the VLM frozen.

    'all'     every parameter
    'expert'  πRL's setting: the VLM (image encoder, text embedding, the prefix transformer's
              own layers and final norm) is frozen; the action expert, the action/time/state
              projections, a learned noise head and the value head train
    'lora'    openpi's LoRA fine-tuning (its `get_freeze_filter`): the transformer weights of every
              expert that has LoRA factors (model.lora_rank: the VLM, with the text embedding;
              model.expert_lora_rank: the action expert) are frozen, their `*_lora_a` / `*_lora_b`
              factors train, and so does everything else (image encoder, projections, heads).
              `ModelConfig` refuses it without a LoRA rank.

Frozen leaves are read through `jax.lax.stop_gradient` in the losses (`freeze`), so their
gradients are exactly zero and XLA skips the backward pass through the frozen prefix; their
Adam updates are then exactly zero, and `decay_mask` keeps AdamW's weight decay off them, so
they stay bit-identical. (Their optimizer moments are still allocated: zeros.)

VLM leaves by family (top-level module names of `vlajax.models.VLA` / `vlajax.models.openpi.Pi0`):
  vla        vision, embed, llm, state_proj (our VLA's state token is a prefix token)
  pi0/pi05   vision, llm/embed, the VLM expert's per-layer modules (llm/layers/e0_*) and its
             final norm (llm/final_norms_0); π0's state_proj feeds the action expert and trains
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["is_vlm", "trainable_mask", "freeze", "decay_mask"]

_VLA_VLM = ("vision", "embed", "llm", "state_proj")


def _names(path) -> tuple[str, ...]:
    out = []
    for p in path:
        if isinstance(p, jax.tree_util.DictKey):
            out.append(str(p.key))
        elif isinstance(p, jax.tree_util.GetAttrKey) and p.name != "value":  # flax boxes hold `.value`
            out.append(p.name)
    return tuple(out)


def is_vlm(family: str, names: tuple[str, ...]) -> bool:
    """Whether the parameter at `names` (module path, top level first) belongs to the VLM."""
    if not names:
        return False
    if family == "vla":
        return names[0] in _VLA_VLM
    if names[0] == "vision":
        return True
    if names[0] != "llm":
        return False
    return any(n == "embed" or n.startswith("e0_") or n == "final_norms_0" for n in names[1:])


def _is_lora(names: tuple[str, ...]) -> bool:
    return bool(names) and names[-1].endswith(("_lora_a", "_lora_b"))


def _expert(names: tuple[str, ...]) -> str | None:
    """Which Gemma expert ('0' = VLM, '1' = action expert) a pi-family `llm/...` leaf belongs to."""
    for n in names[1:]:
        if n == "embed":
            return "0"
        if n.startswith("final_norms_"):
            return n.rsplit("_", 1)[1]
        if len(n) > 2 and n[0] == "e" and n[1].isdigit() and n[2] == "_":
            return n[1]
    return None


def trainable_mask(params: Any, family: str, mode: str) -> Any:
    """A tree like `params` of bools: True = the leaf trains under `mode` ('all' | 'expert' | 'lora')."""
    if mode == "all":
        return jax.tree.map(lambda _: True, params)
    if mode == "lora":
        paths = [_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
        adapted = {_expert(n) for n in paths if n and n[0] == "llm" and _is_lora(n)}
        if not adapted:
            raise ValueError("model.trainable='lora': the model has no LoRA factors (set model.lora_rank / "
                             "model.expert_lora_rank)")
        return jax.tree_util.tree_map_with_path(
            lambda p, _: not (_names(p)[:1] == ("llm",) and not _is_lora(_names(p)) and _expert(_names(p)) in adapted),
            params)
    if mode != "expert":
        raise ValueError(f"model.trainable={mode!r} is not available (use 'all', 'expert' or 'lora')")
    return jax.tree_util.tree_map_with_path(lambda p, _: not is_vlm(family, _names(p)), params)


def freeze(params: Any, model_cfg) -> Any:
    """`params` with the frozen leaves (model.trainable) behind `stop_gradient` (identity for 'all')."""
    mode = getattr(model_cfg, "trainable", "all")
    if mode == "all":
        return params
    mask = trainable_mask(params, getattr(model_cfg, "family", "vla"), mode)
    return jax.tree.map(lambda x, m: x if m else jax.lax.stop_gradient(x), params, mask)


def decay_mask(model_cfg):
    """A callable `params -> bool tree` for `optax.adamw(mask=...)`: decay only trainable leaves."""
    family, mode = getattr(model_cfg, "family", "vla"), getattr(model_cfg, "trainable", "all")
    return lambda params: trainable_mask(params, family, mode)
