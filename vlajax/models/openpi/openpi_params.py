"""openpi's parameter layout -> ours, leaf by leaf (every leaf keeps its shape; only names change).

    table = path_table(cfg)                       # {openpi path: our path}, '/'-joined
    check(tree, cfg, fresh)                       # names every mismatching leaf
    params = from_openpi(tree, cfg, fresh)        # nested dict of arrays in our layout

`tree` is openpi's params pytree (`{"PaliGemma": ..., "action_in_proj": ...}`, optionally wrapped
in `{"params": ...}` as openpi's checkpoints store it). `fresh` is an initialised params tree of
our model (`Pi0(cfg).init(...)["params"]`, boxed or not): it gives the expected shapes and the
leaves openpi does not have (value head, flow_noise std). A leaf left over in `tree`, a mapped
leaf missing from it, or a shape mismatch raises `OpenpiLayoutError` naming the path(s) and
shape(s). openpi's LoRA factors (`.../lora_a`, `..._lora_b`) map to ours when the model has LoRA
(`model.lora_rank`, `model.expert_lora_rank`), are refused by name when it has none, and keep their
initialisation when the model has LoRA and the checkpoint does not (a base checkpoint).
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import numpy as np

from vlajax.config.schema import ModelConfig

_VIT = "PaliGemma/img/"
_BLOCK = _VIT + "Transformer/encoderblock/"
_LLM = "PaliGemma/llm/"


class OpenpiLayoutError(ValueError):
    """An openpi params tree that does not match the configured model (message names the leaves)."""


def path_table(cfg: ModelConfig) -> dict[str, str]:
    """{openpi leaf path: our leaf path} for every leaf openpi's `Pi0` has under `cfg`."""
    t = {
        _VIT + "embedding/kernel": "vision/patch/kernel",
        _VIT + "embedding/bias": "vision/patch/bias",
        _VIT + "pos_embedding": "vision/pos_embedding",
        _VIT + "Transformer/encoder_norm/scale": "vision/norm/scale",
        _VIT + "Transformer/encoder_norm/bias": "vision/norm/bias",
        _VIT + "head/kernel": "vision/head/kernel",
        _VIT + "head/bias": "vision/head/bias",
        _LLM + "embedder/input_embedding": "llm/embed",
    }
    blocks = {"LayerNorm_0": "ln_attn", "LayerNorm_1": "ln_mlp", "MlpBlock_0/Dense_0": "mlp_in",
              "MlpBlock_0/Dense_1": "mlp_out", "MultiHeadDotProductAttention_0/query": "q",
              "MultiHeadDotProductAttention_0/key": "k", "MultiHeadDotProductAttention_0/value": "v",
              "MultiHeadDotProductAttention_0/out": "o"}
    for theirs, ours in blocks.items():
        leaves = ("scale", "bias") if theirs.startswith("LayerNorm") else ("kernel", "bias")
        for leaf in leaves:
            t[f"{_BLOCK}{theirs}/{leaf}"] = f"vision/blocks/{ours}/{leaf}"
    for i in range(2):
        sfx = "" if i == 0 else f"_{i}"
        adaptive = i == 1 and cfg.family == "pi05"
        t[f"{_LLM}layers/attn/q_einsum{sfx}/w"] = f"llm/layers/e{i}_in/q"
        t[f"{_LLM}layers/attn/kv_einsum{sfx}/w"] = f"llm/layers/e{i}_in/kv"
        t[f"{_LLM}layers/attn/attn_vec_einsum{sfx}/w"] = f"llm/layers/e{i}_out/o"
        t[f"{_LLM}layers/mlp{sfx}/gating_einsum"] = f"llm/layers/e{i}_out/gate_up"
        t[f"{_LLM}layers/mlp{sfx}/linear"] = f"llm/layers/e{i}_out/down"
        if (cfg.lora_rank, cfg.expert_lora_rank)[i]:
            for f in ("a", "b"):
                t[f"{_LLM}layers/attn/q_einsum{sfx}/lora_{f}"] = f"llm/layers/e{i}_in/q_lora_{f}"
                t[f"{_LLM}layers/attn/kv_einsum{sfx}/lora_{f}"] = f"llm/layers/e{i}_in/kv_lora_{f}"
                t[f"{_LLM}layers/attn/attn_vec_einsum{sfx}/lora_{f}"] = f"llm/layers/e{i}_out/o_lora_{f}"
                t[f"{_LLM}layers/mlp{sfx}/gating_einsum_lora_{f}"] = f"llm/layers/e{i}_out/gate_up_lora_{f}"
                t[f"{_LLM}layers/mlp{sfx}/linear_lora_{f}"] = f"llm/layers/e{i}_out/down_lora_{f}"
        norms = {f"layers/pre_attention_norm{sfx}": f"layers/e{i}_in/attn_norm",
                 f"layers/pre_ffw_norm{sfx}": f"layers/e{i}_out/mlp_norm",
                 f"final_norm{sfx}": f"final_norms_{i}"}
        for theirs, ours in norms.items():
            if adaptive:
                t[f"{_LLM}{theirs}/Dense_0/kernel"] = f"llm/{ours}/kernel"
                t[f"{_LLM}{theirs}/Dense_0/bias"] = f"llm/{ours}/bias"
            else:
                t[f"{_LLM}{theirs}/scale"] = f"llm/{ours}/scale"
    heads = {"action_in_proj": "action_in", "action_out_proj": "action_out"}
    if cfg.family == "pi05":
        heads.update(time_mlp_in="time_mlp_in", time_mlp_out="time_mlp_out")
    else:
        heads.update(state_proj="state_proj", action_time_mlp_in="action_time_mlp_in",
                     action_time_mlp_out="action_time_mlp_out")
    for theirs, ours in heads.items():
        t[f"{theirs}/kernel"] = f"{ours}/kernel"
        t[f"{theirs}/bias"] = f"{ours}/bias"
    return t


def flatten(tree: Any) -> dict[str, Any]:
    """Nested dict -> {'a/b/c': leaf}; a top-level {'params': ...} wrapper is removed; boxes unboxed."""
    tree = flax.core.unfreeze(tree) if isinstance(tree, flax.core.FrozenDict) else tree
    if isinstance(tree, dict) and set(tree) == {"params"}:
        tree = tree["params"]
    flat = flax.traverse_util.flatten_dict(tree, sep="/")
    return {k: (v.unbox() if isinstance(v, flax.linen.meta.AxisMetadata) else v) for k, v in flat.items()}


def _is_lora(path: str) -> bool:
    return path.rsplit("/", 1)[-1].endswith(("lora_a", "lora_b"))


def _shape(x) -> tuple[int, ...]:
    return tuple(int(d) for d in np.shape(x))


def _listing(paths, flat) -> str:
    return ", ".join(f"{p} {list(_shape(flat[p]))}" for p in sorted(paths))


def check(tree: Any, cfg: ModelConfig, fresh: Any) -> None:
    """Raises `OpenpiLayoutError` naming LoRA leaves, leaves left over or missing, shape mismatches
    (`tree` may hold arrays or anything with a shape, e.g. `jax.ShapeDtypeStruct`s)."""
    theirs = flatten(tree)
    ours = flatten(fresh)
    table = path_table(cfg)
    lora = [p for p in theirs if _is_lora(p) and p not in table]
    if lora:
        raise OpenpiLayoutError(
            "openpi LoRA leaves found but this model has no LoRA factors there (set model.lora_rank for the VLM, "
            f"model.expert_lora_rank for the action expert, to openpi's rank): {_listing(lora, theirs)}")
    extra = set(theirs) - set(table)
    missing = {p for p in set(table) - set(theirs) if not _is_lora(p)}  # absent LoRA factors start fresh
    if extra or missing:
        parts = []
        if extra:
            parts.append(f"leaves not in a {cfg.family} model: {_listing(extra, theirs)}")
        if missing:
            parts.append("leaves missing from the checkpoint: " + ", ".join(
                f"{p} {list(_shape(ours[table[p]]))}" for p in sorted(missing)))
        raise OpenpiLayoutError(f"openpi params do not match model.family={cfg.family!r}: " + "; ".join(parts))
    unknown = set(table.values()) - set(ours)
    if unknown:  # the table and our module disagree: a bug here, not in the checkpoint
        raise AssertionError(f"path table names leaves our model lacks: {sorted(unknown)}")
    bad = [(p, _shape(theirs[p]), _shape(ours[q])) for p, q in table.items()
           if p in theirs and _shape(theirs[p]) != _shape(ours[q])]
    if bad:
        raise OpenpiLayoutError("shape mismatch (openpi leaf shape vs model shape): " + ", ".join(
            f"{p} {list(a)} vs {table[p]} {list(b)}" for p, a, b in bad))


def from_openpi(tree: Any, cfg: ModelConfig, fresh: Any) -> dict:
    """openpi params -> our nested params dict (arrays cast to `fresh`'s dtypes; our leaves openpi
    lacks are `fresh`'s). Checked first (`check`)."""
    check(tree, cfg, fresh)
    theirs, ours, table = flatten(tree), flatten(fresh), path_table(cfg)
    out = dict(ours)
    for p, q in table.items():
        if p not in theirs:  # a LoRA factor the base checkpoint lacks: its initialisation
            continue
        out[q] = jax.numpy.asarray(theirs[p], dtype=ours[q].dtype)
    return flax.traverse_util.unflatten_dict(out, sep="/")


def fresh_only(cfg: ModelConfig, fresh: Any, tree: Any = None) -> list[str]:
    """Our leaves that openpi's `tree` (default: any openpi tree) does not have: they keep their
    initialisation on import. Sorted."""
    table = path_table(cfg)
    if tree is not None:
        theirs = flatten(tree)
        table = {p: q for p, q in table.items() if p in theirs}
    return sorted(set(flatten(fresh)) - set(table.values()))
