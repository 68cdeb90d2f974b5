"""Import an openpi checkpoint: `python -m vlajax.models.import_openpi --checkpoint DIR --config pi0 --out OUT`.

Reads an openpi checkpoint directory -- `DIR/params` (the Orbax params tree openpi writes; `DIR`
itself may be that tree) and `DIR/assets/<asset id>/norm_stats.json` when present (openpi's
NormStats JSON: `{"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions": {...}}}`) --
maps every leaf to our layout (`vlajax.models.openpi.openpi_params`: a leaf left over or missing,
a shape mismatch or a LoRA leaf is an `error:` line naming it) and writes a vlajax run directory
that `eval`, `sft --sft.init-from`, `rl --rl.init-from` and `vlajax.load_policy` read:

    OUT/config.json     the TrainConfig of preset `--config` (its model config sizes the import)
    OUT/policy.json     the `vlajax.policy.Bridge`: model config, cameras, camera map, norm stats
    OUT/0/              Orbax step 0: a fresh TrainState (optimizer, EMA as the preset keeps them)
                        holding the imported params; `extra` records the source checkpoint,
                        the leaves left at their initialisation and where the norm stats came from

Leaves openpi lacks (a value head, flow_noise's std) start from their initialisation. Without
norm stats in the checkpoint the policy gets identity statistics (mean 0, std 1, quantiles +-1)
at the model's action width, and says so. This module is a command at the top of the stack: it
imports the run-file helpers lazily, nothing below imports it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
from typing import Any

import jax
import numpy as np

from vlajax.config import ConfigError, TrainConfig

__all__ = ["import_checkpoint", "read_norm_stats", "read_params", "main"]


def read_params(checkpoint_dir: str) -> dict:
    """openpi's params tree (host numpy arrays) from `DIR/params` or `DIR` itself."""
    import orbax.checkpoint as ocp  # noqa: PLC0415

    d = os.path.abspath(os.path.expanduser(checkpoint_dir))
    path = os.path.join(d, "params") if os.path.isdir(os.path.join(d, "params")) else d
    if not os.path.isfile(os.path.join(path, "_METADATA")):
        raise ConfigError(f"{checkpoint_dir}: no Orbax params tree (expected {path}/_METADATA, as openpi writes)")
    ckptr = ocp.PyTreeCheckpointer()
    meta = ckptr.metadata(path)
    meta = getattr(meta, "item_metadata", meta)
    meta = getattr(meta, "tree", meta)
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), dict(meta))
    return ckptr.restore(path, restore_args=args)


def read_norm_stats(checkpoint_dir: str, asset_id: str = "") -> tuple[dict | None, str]:
    """(`{'state': NormStats, 'actions': NormStats}` or None, where they came from) of `DIR/assets/*`."""
    from vlajax.data.normalize import NormStats  # noqa: PLC0415

    files = sorted(glob.glob(os.path.join(checkpoint_dir, "assets", asset_id or "*", "norm_stats.json")))
    if not files:
        if asset_id:
            raise ConfigError(f"--asset-id {asset_id}: no {checkpoint_dir}/assets/{asset_id}/norm_stats.json")
        return None, "identity (the checkpoint has no assets/*/norm_stats.json)"
    if len(files) > 1:
        ids = [os.path.basename(os.path.dirname(f)) for f in files]
        raise ConfigError(f"{checkpoint_dir} has norm stats for several assets {ids}: pick one with --asset-id")
    with open(files[0]) as f:
        raw = json.load(f)
    stats = raw.get("norm_stats", raw)
    out = {}
    for key in ("state", "actions"):
        if key not in stats:
            raise ConfigError(f"{files[0]}: no '{key}' statistics (has {sorted(stats)})")
        s = stats[key]
        lacking = [k for k in ("mean", "std", "q01", "q99") if s.get(k) is None]
        if lacking:
            raise ConfigError(f"{files[0]}: '{key}' lacks {lacking} (recompute with openpi's compute_norm_stats)")
        out[key] = NormStats(**{k: np.asarray(s[k], np.float32) for k in ("mean", "std", "q01", "q99")})
    return out, files[0]


def _identity_stats(dim: int):
    from vlajax.data.normalize import NormStats  # noqa: PLC0415

    z, o = np.zeros(dim, np.float32), np.ones(dim, np.float32)
    return NormStats(mean=z, std=o, q01=-o, q99=o, min=-o, max=o)


def _bridge(cfg: TrainConfig, norm: dict):
    from vlajax.config import action_norm  # noqa: PLC0415
    from vlajax.data.openpi import camera_map, model_slots  # noqa: PLC0415
    from vlajax.policy import Bridge  # noqa: PLC0415

    cameras = tuple(sorted(cfg.env.cameras))
    cmap = camera_map(cfg.data.camera_map, cameras, model_slots(cfg.model))
    return Bridge(cfg.model, cameras, norm, action_norm(cfg), cfg.data.state_norm,
                  env_action_dim=min(cfg.model.action_dim, 4), camera_map=cmap)


def train_state(cfg: TrainConfig, cameras: tuple[str, ...], params: Any | None = None, rng=None):
    """The fresh TrainState `vlajax.run_files.init_fn` builds (unboxed), with `params` (our layout)
    in place of the initialised ones when given (optimizer state and EMA follow them)."""
    import flax.linen as nn  # noqa: PLC0415

    from vlajax.run_files import init_fn, make_optimizer  # noqa: PLC0415
    from vlajax.train_state import TrainState  # noqa: PLC0415

    rng = jax.random.key(cfg.seed) if rng is None else rng
    fresh = nn.unbox(init_fn(cfg, cameras)(rng))
    if params is None:
        return fresh
    return TrainState.create(params, make_optimizer(cfg), rng, ema=cfg.sft.ema_decay > 0,
                             collections=fresh.collections)


def import_checkpoint(checkpoint_dir: str, cfg: TrainConfig, out: str, asset_id: str = "") -> dict:
    """Convert `checkpoint_dir` for `cfg` (a pi-family TrainConfig) into the run directory `out`.

    -> a summary dict (leaves mapped, fresh leaves, norm stats' source). Raises ConfigError /
    `OpenpiLayoutError` (a ValueError) with the offending leaves named.
    """
    from vlajax import checkpoint  # noqa: PLC0415
    from vlajax.models import build_model, fake_observation  # noqa: PLC0415
    from vlajax.models.openpi import openpi_params  # noqa: PLC0415
    from vlajax.run_files import write_policy  # noqa: PLC0415

    if cfg.model.family == "vla":
        raise ConfigError(f"--config {cfg.name}: model.family is 'vla'; openpi checkpoints need a pi0 / pi05 preset")
    tree = read_params(checkpoint_dir)
    cameras = tuple(sorted(cfg.env.cameras))
    model = build_model(cfg.model)
    rng = jax.random.key(cfg.seed)
    fresh = jax.eval_shape(model.init, rng, fake_observation(rng, 1, cfg.model, cameras=cameras))["params"]
    openpi_params.check(tree, cfg.model, fresh)  # layout and shapes checked before anything is built
    norm, norm_source = read_norm_stats(checkpoint_dir, asset_id)
    if norm is None:
        norm = {k: _identity_stats(cfg.model.action_dim) for k in ("state", "actions")}
    bridge = _bridge(cfg, norm)

    def build(tree):
        state = train_state(cfg, cameras, rng=rng)
        params = openpi_params.from_openpi(tree, cfg.model, state.params)
        return train_state(cfg, cameras, params, rng)

    out = os.path.abspath(os.path.expanduser(out))
    if os.path.isdir(out) and os.listdir(out):
        raise ConfigError(f"--out {out} exists and is not empty; pick a new directory")
    state = jax.jit(build)(tree)
    ckpt = checkpoint.Checkpointer(out, async_save=False)
    write_policy(out, cfg, bridge, "sft")  # a TrainState at step 0, as an SFT run's
    summary = {"step": 0, "config": cfg.name, "source": os.path.abspath(checkpoint_dir),
               "openpi_leaves": len(openpi_params.flatten(tree)),
               "fresh_leaves": openpi_params.fresh_only(cfg.model, fresh, tree), "norm_stats": norm_source}
    ckpt.save(0, state, extra=summary, force=True)
    ckpt.close()
    return summary


@dataclasses.dataclass(frozen=True)
class ImportArgs:
    """Import an openpi checkpoint directory as a vlajax run directory."""

    checkpoint: str  # openpi checkpoint directory (holds params/, assets/)
    config: str  # vlajax preset of the model: pi0 | pi05 (or pi0-dummy, pi05-dummy, pi0-lora, ...)
    out: str  # new vlajax run directory to write
    asset_id: str = ""  # which assets/<id>/norm_stats.json (when there are several)
    tokenizer: str = ""  # SentencePiece model file ('' = the preset's model.tokenizer_path)


def main(argv: list[str] | None = None) -> int:
    from vlajax import cli  # noqa: PLC0415
    from vlajax.config import get_config, preset_names  # noqa: PLC0415

    args = cli.parse(ImportArgs, argv, prog="python -m vlajax.models.import_openpi",
                     description=__doc__.split("\n\n")[0])
    try:
        if args.config not in preset_names():
            raise ConfigError(f"--config {args.config!r} is not a preset; pi presets: "
                              f"{[n for n in preset_names() if n.startswith('pi')]}")
        cfg = get_config(args.config)
        if args.tokenizer:
            cfg = cfg.replace(model=dataclasses.replace(cfg.model, tokenizer_path=args.tokenizer))
        summary = import_checkpoint(args.checkpoint, cfg, args.out, args.asset_id)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"imported {summary['openpi_leaves']} openpi leaves into {args.out} (step 0, preset {cfg.name}); "
          f"fresh leaves: {summary['fresh_leaves'] or 'none'}; norm stats: {summary['norm_stats']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
