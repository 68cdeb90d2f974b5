"""`sft.init_from`: start SFT from another run's weights (an SFT run or an imported openpi checkpoint).

    cfg = resolve_config(cfg)                  # an empty model.tokenizer_path takes the source's
    openpi = openpi_transforms(cfg)            # the source's openpi transforms (an imported openpi policy)
    state = load_into(cfg, state, mesh)        # the source's params (its EMA when kept) into `state`

The source directory is what `vlajax.train sft` or `python -m vlajax.policies.import_openpi`
writes: `config.json`, `policy.json` and Orbax steps (the newest is used). Its model must have
this run's parameter shapes: a leaf missing on either side or of another shape is a
`ConfigError` naming its path, before anything trains -- except leaves only this run has that
start fresh anyway: LoRA factors (`*_lora_a` / `*_lora_b`, a LoRA run from full weights), a
value head (`value_hidden`, `value_out`) and flow_noise's `noise_std` (logged). The optimizer state, step and EMA of
`state` start fresh (the EMA, when kept, starts at the loaded params).

A source whose `policy.json` records openpi transforms (an imported `pi0_libero`, `pi05_libero`, ...;
or an SFT run fine-tuned from one) is fine-tuned with openpi's training transforms: norm stats
computed from the dataset as openpi's `compute_norm_stats` computes them
(`vlajax.data.openpi.openpi_norm_stats`; the run's `policy.json` records them), and, where the record
has a delta mask (`pi0_libero`, `pi0_aloha`, `pi05_aloha`, or `--delta-dims`), openpi's DeltaActions on
those dims to its targets (under those stats); such a run's saved policy keeps the transforms, so its
outputs go back through AbsoluteActions and the robot's outputs. Without a delta mask (`pi05_libero`)
the saved policy is ours (the dataset's cameras and action dims), as any fine-tune on an env's data.
ALOHA's `adapt_to_pi` (joint flips and gripper maps, before any delta) is not
applied by the SFT input pipeline: such a source (`pi0_aloha`, `pi05_aloha`, and `pi0_aloha_sim`, which
has no delta mask) is a `ConfigError` unless `sft.delta_actions='off'` (the dataset's actions as they are).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp

from vlajax.config.schema import ConfigError, TrainConfig

log = logging.getLogger(__name__)

__all__ = ["resolve_config", "delta_transforms", "openpi_transforms", "load_into"]


def _source(cfg: TrainConfig) -> tuple[str, TrainConfig]:
    from vlajax.policies.run_files import load_config

    directory = os.path.abspath(os.path.expanduser(cfg.sft.init_from))
    try:
        return directory, load_config(directory)
    except FileNotFoundError as e:
        raise ConfigError(f"sft.init_from: {e}") from None


def resolve_config(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with an empty `model.tokenizer_path` filled from the source run's (pi families)."""
    if not cfg.sft.init_from or cfg.model.tokenizer_path or cfg.model.family == "vla":
        return cfg
    _, src = _source(cfg)
    return cfg.replace(model=dataclasses.replace(cfg.model, tokenizer_path=src.model.tokenizer_path))


def delta_transforms(cfg: TrainConfig, resume_from: str | None = None):
    """`openpi_transforms` when they carry a delta mask (the targets must be delta actions on those
    dims), else None."""
    transforms = openpi_transforms(cfg, resume_from)
    return transforms if transforms is not None and any(transforms.delta_mask) else None


def openpi_transforms(cfg: TrainConfig, resume_from: str | None = None):
    """The `OpenpiTransforms` of `cfg.sft.init_from`'s policy (an imported openpi policy, or an SFT run
    fine-tuned from one), else None. SFT then trains with norm stats computed as openpi computes them and,
    where the record has a delta mask, on openpi's DeltaActions, keeping the record in its own `policy.json`
    (without a mask the run's policy is ours: it acts in the dataset's action space). Reads `policy.json`
    only: when `resume_from` (the run's own checkpoint directory, resuming) holds one with a record, that
    one -- a resumed delta run no longer needs the source directory -- else the source's (a resumed run
    without a delta mask whose source directory is gone: None, so its data's `meta/stats.json`)."""
    import json

    from vlajax.config.openpi import OpenpiTransforms
    from vlajax.policies.bridge import POLICY_FILE

    if not cfg.sft.init_from:
        return None
    own = os.path.join(resume_from, POLICY_FILE) if resume_from else ""
    record = None
    if own and os.path.isfile(own):
        with open(own) as f:
            record = json.load(f).get("openpi")
        directory, path = resume_from, own
    if record is None:
        if own and os.path.isfile(own) and not os.path.isdir(os.path.expanduser(cfg.sft.init_from)):
            return None  # resuming a run without a delta mask whose source is gone: nothing more to read
        directory, _ = _source(cfg)
        path = os.path.join(directory, POLICY_FILE)
    try:
        if record is None:
            with open(path) as f:
                record = json.load(f).get("openpi")
    except FileNotFoundError:
        raise ConfigError(f"sft.init_from: {path}: missing (a checkpoint directory written by `vlajax.train sft` "
                          "or `vlajax.policies.import_openpi` has it)") from None
    transforms = OpenpiTransforms.from_json(record) if record else None
    if transforms is None:
        return None
    if transforms.adapt_to_pi:  # with or without a delta mask: its state and actions live in openpi's ALOHA space
        learned = "learned delta actions" if any(transforms.delta_mask) else "learned its state and actions"
        raise ConfigError(f"sft.init_from={directory}: its openpi config ({transforms.train_config or 'custom'}) "
                          f"{learned} in openpi's ALOHA space (adapt_to_pi: joint flips, gripper maps), which the "
                          "SFT input pipeline does not apply; --sft.delta-actions off fine-tunes it on the dataset's "
                          "state and actions as they are, saved without the source's robot transforms")
    return transforms


def _flat(tree: Any) -> dict[str, Any]:
    return {"/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path): leaf
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _fresh_ok(path: str) -> bool:
    """Leaves a run may add to its source's: they start from their initialisation."""
    parts = path.split("/")
    return parts[-1].endswith(("_lora_a", "_lora_b")) or parts[0] in ("value_hidden", "value_out", "noise_std")


def load_into(cfg: TrainConfig, state: Any, mesh) -> Any:
    """`state` (a fresh `TrainState`) with params (and EMA) from `cfg.sft.init_from`'s newest step."""
    from vlajax.policies.bridge import Bridge
    from vlajax.policies.run_files import abstract_train_state, restore_eval_params

    directory, src_cfg = _source(cfg)
    try:
        bridge = Bridge.load(directory)
    except FileNotFoundError as e:
        raise ConfigError(f"sft.init_from: {e}") from None
    target, _ = abstract_train_state(src_cfg, bridge.cameras, mesh)
    ours, theirs = _flat(state.params), _flat(target.params)
    bad = [f"{k} {tuple(ours[k].shape)} vs {tuple(theirs[k].shape)}" for k in ours
           if k in theirs and tuple(ours[k].shape) != tuple(theirs[k].shape)]
    fresh = sorted(k for k in set(ours) - set(theirs) if _fresh_ok(k))
    missing = sorted(k for k in set(ours) - set(theirs) if not _fresh_ok(k))
    extra = sorted(set(theirs) - set(ours))
    if bad or missing or extra:
        what = (f"shapes differ: {bad[:3]}" if bad else
                f"leaves missing there: {missing[:3]}" if missing else f"leaves only there: {extra[:3]}")
        raise ConfigError(f"sft.init_from={directory}: its model ({src_cfg.model.name}) does not match "
                          f"model={cfg.model.name}: {what}")
    restored, extra_json = restore_eval_params(directory, target, "sft.init_from")
    loaded = _flat(restored)

    def take(path, old):  # onto this run's shardings (the step is jitted with them)
        key = "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
        if key not in loaded:
            return old  # a fresh leaf (_fresh_ok)
        return jax.device_put(jnp.asarray(loaded[key], old.dtype), old.sharding)

    params = jax.tree_util.tree_map_with_path(take, state.params)
    if fresh:
        log.info("sft: %d leaves start fresh (not in %s): %s", len(fresh), directory, fresh[:4])
    ema = None if state.ema_params is None else jax.tree.map(jnp.copy, params)
    log.info("sft: initialized from %s (step %s)", directory, extra_json.get("step"))
    return state.replace(params=params, ema_params=ema)
