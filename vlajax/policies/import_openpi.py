"""Import an openpi checkpoint: `python -m vlajax.policies.import_openpi --checkpoint DIR --config NAME
--tokenizer MODEL --out OUT`.

`--config` names openpi's train config (`vlajax.config.openpi.OPENPI_CONFIGS`: pi0_libero,
pi05_libero, pi0_droid, pi05_droid, pi0_aloha_sim, pi0_aloha, pi05_aloha): the model fields are
set as openpi's config sets them (π0 / π0.5, action horizon, max prompt tokens, whether the π0.5
prompt carries the state, action dim 32), the norm stats are read from
`DIR/assets/<the config's asset id>/norm_stats.json` (z-score for π0, quantiles for π0.5) and
the config's data transforms (robot input/output keys, delta/absolute action dims, default
prompt) are recorded in `OUT/policy.json`, so eval, the policy server and the RL rollout answer
as openpi's `Policy.infer`. `--size full` is openpi's widths (PaliGemma gemma_2b +
gemma_300m expert, SigLIP So400m/14); `--size dummy` the reference data's (dummy Gemma, SigLIP
mu/14 x 2, 1,024 pieces); without `--size` it is read from the checkpoint's parameter shapes
(`infer_size`: the last dims of three leaves; a `--size` they do not fit is one short `error:` line). Your own
openpi config: start from the nearest one and name the fields
that differ (`--action-horizon`, `--max-token-len`, `--discrete-state-input`, `--robot`,
`--delta-dims`, `--default-prompt`, `--asset-id`). `--config` may also name a vlajax π preset
(pi0, pi05, pi0-dummy, pi05-dummy, pi0-lora, pi05-lora): our tabletop conventions, and openpi's
transforms only with `--robot`.

Reads `DIR/params` (the Orbax params tree openpi writes; `DIR` itself may be that tree), maps
every leaf to our layout (`vlajax.models.openpi.openpi_params`: a leaf left over or missing, a
shape mismatch or a LoRA leaf is an `error:` line naming it) and writes a vlajax run directory
that `eval`, `sft --sft.init-from`, `rl --rl.init-from`, `vlajax.serve` and `vlajax.load_policy` read:

    OUT/config.json     the TrainConfig (its model config sizes the import)
    OUT/policy.json     the `vlajax.policies.bridge.Bridge`: model config, cameras, norm stats, openpi transforms
    OUT/0/              Orbax step 0: a fresh TrainState (optimizer, EMA as the preset keeps them)
                        holding the imported params; `extra` records the source checkpoint,
                        the leaves left at their initialisation and where the norm stats came from

Every bad input is one `error:` line and exit 2 before anything is built: an unknown config, a
missing tokenizer or one with more pieces than `model.vocab_size`, missing norm stats (a vlajax
preset without `--robot` falls back to identity statistics and says so), params of another
config. Leaves openpi lacks (a value head, flow_noise's std) start from their initialisation.
This module is a command at the top of the stack: nothing below imports it.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import sys
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp

from vlajax.config.openpi import OPENPI_CONFIGS, ROBOTS, OpenpiTransforms, make_bool_mask
from vlajax.config.schema import (
    GEMMA_VARIANTS,
    SIGLIP_VARIANTS,
    ConfigError,
    TrainConfig,
    action_norm,
    get_config,
    preset_names,
)
from vlajax.data.normalize import NormStats
from vlajax.data.openpi import camera_map, model_slots
from vlajax.models import build_model, fake_observation
from vlajax.models.openpi import openpi_params
from vlajax.models.sp_tokenizer import PromptTokenizer
from vlajax.policies.bridge import Bridge
from vlajax.policies.run_files import init_fn, make_optimizer, write_policy
from vlajax.shared import cli
from vlajax.training import checkpoint
from vlajax.training.train_state import TrainState

__all__ = ["import_checkpoint", "infer_size", "openpi_train_config", "read_norm_stats", "read_params",
           "read_shapes", "main"]


def read_params(checkpoint_dir: str) -> dict:
    """openpi's params tree (host numpy arrays) from `DIR/params` or `DIR` itself."""
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
    files = sorted(glob.glob(os.path.join(checkpoint_dir, "assets", asset_id or "*", "norm_stats.json")))
    if not files:
        if asset_id:
            raise ConfigError(f"no norm stats for asset id {asset_id!r}: {checkpoint_dir}/assets/{asset_id}/"
                              "norm_stats.json is missing (openpi's compute_norm_stats writes it; --asset-id names "
                              "another)")
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
    z, o = np.zeros(dim, np.float32), np.ones(dim, np.float32)
    return NormStats(mean=z, std=o, q01=-o, q99=o, min=-o, max=o)


def _bridge(cfg: TrainConfig, norm: dict, openpi=None):
    if openpi is not None:  # the robot's cameras, slots and action dims
        return Bridge(cfg.model, openpi.cameras, norm, action_norm(cfg), cfg.data.state_norm,
                      env_action_dim=openpi.keys.action_dims, camera_map=openpi.keys.camera_map, openpi=openpi)
    cameras = tuple(sorted(cfg.env.cameras))
    cmap = camera_map(cfg.data.camera_map, cameras, model_slots(cfg.model))
    return Bridge(cfg.model, cameras, norm, action_norm(cfg), cfg.data.state_norm,
                  env_action_dim=min(cfg.model.action_dim, 4), camera_map=cmap)


def train_state(cfg: TrainConfig, cameras: tuple[str, ...], params: Any | None = None, rng=None):
    """The fresh TrainState `vlajax.policies.run_files.init_fn` builds (unboxed), with `params` (our layout)
    in place of the initialised ones when given (optimizer state and EMA follow them)."""
    rng = jax.random.key(cfg.seed) if rng is None else rng
    fresh = nn.unbox(init_fn(cfg, cameras)(rng))
    if params is None:
        return fresh
    return TrainState.create(params, make_optimizer(cfg), rng, ema=cfg.sft.ema_decay > 0,
                             collections=fresh.collections)


def check_tokenizer(model_cfg) -> int:
    """The SentencePiece model of `model.tokenizer_path` exists and its ids fit `model.vocab_size`
    (ConfigError naming both otherwise). -> its vocabulary size."""
    path = model_cfg.tokenizer_path
    try:
        n = PromptTokenizer.load(path, 1).vocab_size
    except FileNotFoundError as e:
        raise ConfigError(f"--tokenizer: {e}") from None
    except RuntimeError as e:  # sentencepiece's parse error
        raise ConfigError(f"--tokenizer {path}: not a SentencePiece model ({str(e).splitlines()[0]})") from None
    if n > model_cfg.vocab_size:
        raise ConfigError(f"--tokenizer {path} has {n} pieces > model.vocab_size={model_cfg.vocab_size} "
                          "(its ids would index past the embedding table): use the tokenizer the checkpoint was "
                          "trained with")
    return n


def import_checkpoint(checkpoint_dir: str, cfg: TrainConfig, out: str, asset_id: str = "", openpi=None) -> dict:
    """Convert `checkpoint_dir` for `cfg` (a pi-family TrainConfig) into the run directory `out`.

    openpi: the `vlajax.config.openpi.OpenpiTransforms` of the checkpoint's train config (its asset
    id names the norm stats, which must exist), or None (our tabletop conventions; without norm
    stats identity statistics). -> a summary dict (leaves mapped, fresh leaves, norm stats' source).
    Raises ConfigError / `OpenpiLayoutError` (a ValueError) with the offending leaves named.
    """
    if cfg.model.family == "vla":
        raise ConfigError(f"--config {cfg.name}: model.family is 'vla'; openpi checkpoints need a pi0 / pi05 preset")
    out = os.path.abspath(os.path.expanduser(out))
    if os.path.isdir(out) and os.listdir(out):
        raise ConfigError(f"--out {out} exists and is not empty; pick a new directory")
    check_tokenizer(cfg.model)
    asset_id = asset_id or (openpi.asset_id if openpi is not None else "")
    norm, norm_source = read_norm_stats(checkpoint_dir, asset_id)
    tree = read_params(checkpoint_dir)
    cameras = openpi.cameras if openpi is not None else tuple(sorted(cfg.env.cameras))
    model = build_model(cfg.model)
    rng = jax.random.key(cfg.seed)
    fresh = jax.eval_shape(model.init, rng, fake_observation(rng, 1, cfg.model, cameras=cameras))["params"]
    openpi_params.check(tree, cfg.model, fresh)  # layout and shapes checked before anything is built
    if norm is None:
        norm = {k: _identity_stats(cfg.model.action_dim) for k in ("state", "actions")}
    bridge = _bridge(cfg, norm, openpi)

    def build(tree):
        state = train_state(cfg, cameras, rng=rng)
        params = openpi_params.from_openpi(tree, cfg.model, state.params)
        return train_state(cfg, cameras, params, rng)

    state = jax.jit(build)(tree)
    ckpt = checkpoint.Checkpointer(out, async_save=False)
    write_policy(out, cfg, bridge, "sft")  # a TrainState at step 0, as an SFT run's
    summary = {"step": 0, "config": cfg.name, "source": os.path.abspath(checkpoint_dir),
               "openpi_leaves": len(openpi_params.flatten(tree)),
               "fresh_leaves": openpi_params.fresh_only(cfg.model, fresh, tree), "norm_stats": norm_source,
               "openpi": None if openpi is None else openpi.to_json()}
    ckpt.save(0, state, extra=summary, force=True)
    ckpt.close()
    return summary


SIZES = ("full", "dummy")
# the leaves whose last dim tells the sizes apart: the VLM's width, the action expert's, SigLIP's
SIZE_LEAVES = ("PaliGemma/llm/embedder/input_embedding", "action_in_proj/kernel", "PaliGemma/img/embedding/kernel")


def read_shapes(checkpoint_dir: str) -> dict[str, tuple[int, ...]]:
    """{openpi leaf path: shape} of `DIR/params` (or `DIR`) from its Orbax metadata (no array is read)."""
    d = os.path.abspath(os.path.expanduser(checkpoint_dir))
    path = os.path.join(d, "params") if os.path.isdir(os.path.join(d, "params")) else d
    if not os.path.isfile(os.path.join(path, "_METADATA")):
        raise ConfigError(f"{checkpoint_dir}: no Orbax params tree (expected {path}/_METADATA, as openpi writes)")
    meta = ocp.PyTreeCheckpointer().metadata(path)
    meta = getattr(meta, "item_metadata", meta)
    meta = getattr(meta, "tree", meta)
    return {k: tuple(int(n) for n in getattr(v, "shape", ())) for k, v in openpi_params.flatten(dict(meta)).items()}


def _size_widths(model) -> tuple[int, int, int]:
    """The last dims of SIZE_LEAVES for a pi-family model config."""
    return (GEMMA_VARIANTS[model.paligemma_variant]["width"], GEMMA_VARIANTS[model.action_expert_variant]["width"],
            SIGLIP_VARIANTS[model.siglip_variant.partition("/")[0]]["width"])


def infer_size(checkpoint_dir: str, name: str, size: str = "auto") -> str:
    """The `--size` of openpi train config `name` whose widths the checkpoint's shapes have (SIZE_LEAVES).
    `size` given (not 'auto'): checked against the shapes. ConfigError (one short line naming the three
    leaves and the flag) when no size, or not the given one, fits."""
    if size != "auto" and size not in SIZES:
        raise ConfigError(f"--size {size!r}: choose from {SIZES} (or leave it out: it is read from the shapes)")
    shapes = read_shapes(checkpoint_dir)
    have = tuple(shapes[k][-1] if shapes.get(k) else None for k in SIZE_LEAVES)
    wants = {s: _size_widths(openpi_train_config(name, size=s)[0].model) for s in SIZES}
    fits = [s for s, w in wants.items() if w == have]
    if fits and size in ("auto", fits[0]):
        return fits[0]
    leaves = ", ".join(f"{k} {list(shapes[k]) if k in shapes else 'absent'}" for k in SIZE_LEAVES)
    sizes = "; ".join(f"{s}: {', '.join(map(str, w))}" for s, w in wants.items())
    if fits:
        raise ConfigError(f"--size {size}: the checkpoint has the {fits[0]} size's widths ({leaves}; last dims "
                          f"expected -- {sizes}): use --size {fits[0]}, or leave --size out (it is read from the "
                          "shapes)")
    raise ConfigError(f"--checkpoint {checkpoint_dir}: its widths fit no --size of --config {name} ({leaves}; last "
                      f"dims expected -- {sizes}): name the config it was trained with, or a vlajax π preset of its "
                      "sizes (--config pi0 / pi05 / pi0-dummy / pi05-dummy)")


def _short(message: str, keep: int = 3) -> str:
    """A layout error's leaf listings cut to their first `keep` leaves each (`and N more`): one short line."""
    def cut(listing: str) -> str:
        items = re.split(r", (?![^\[]*\])", listing)  # commas outside the shapes' brackets
        return listing if len(items) <= keep else ", ".join(items[:keep]) + f" and {len(items) - keep} more"

    parts = []
    for part in message.split("; "):
        head, sep, listing = part.partition(": ")
        parts.append(head + sep + cut(listing) if sep else part)
    return "; ".join(parts)


def openpi_train_config(name: str, *, size: str = "full", tokenizer: str = "", action_horizon: int = 0,
                        max_token_len: int = 0, discrete_state_input: str = "config", robot: str = "config",
                        delta_dims: str = "config", default_prompt: str | None = None, asset_id: str = ""):
    """(TrainConfig, OpenpiTransforms | None) for openpi train config `name` (or a vlajax π preset)
    at `size`, with the named fields overridden (0 / 'config' / None = the config's). ConfigError
    for an unknown name, size or value."""
    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: choose from {SIZES}")
    pi_presets = [n for n in preset_names() if n.startswith("pi")]
    if name in OPENPI_CONFIGS:
        oc = OPENPI_CONFIGS[name]
        family = "pi05" if oc.pi05 else "pi0"
        cfg = get_config(family if size == "full" else f"{family}-dummy")
        transforms = oc.transforms
        horizon, tokens, dsi, norm = oc.action_horizon, oc.max_token_len, oc.discrete_state_input, oc.norm
    elif name in pi_presets:
        cfg = get_config(name)
        if cfg.model.family == "vla":
            raise ConfigError(f"--config {name}: model.family is 'vla'; openpi checkpoints need a pi0 / pi05 config")
        transforms = None
        horizon, tokens, dsi = cfg.model.action_horizon, cfg.model.max_text_len, cfg.model.discrete_state_input
        norm = cfg.data.state_norm
    else:
        raise ConfigError(f"--config {name!r} is neither an openpi train config ({sorted(OPENPI_CONFIGS)}) "
                          f"nor a vlajax π preset ({pi_presets})")
    if robot != "config":
        if robot == "none":
            transforms = None
        elif robot not in ROBOTS:
            raise ConfigError(f"--robot {robot!r}: choose from {sorted(ROBOTS) + ['none']}")
        else:
            base = transforms or OpenpiTransforms("", robot, "", adapt_to_pi=robot == "aloha")
            transforms = dataclasses.replace(base, robot=robot, adapt_to_pi=robot == "aloha")
    if transforms is not None:
        if delta_dims != "config":
            try:
                dims = () if delta_dims == "none" else tuple(int(d) for d in delta_dims.split(","))
            except ValueError:
                raise ConfigError(f"--delta-dims {delta_dims!r}: 'none' or openpi's make_bool_mask dims, "
                                  "e.g. '6,-1'") from None
            transforms = dataclasses.replace(transforms, delta_mask=make_bool_mask(*dims))
        if default_prompt is not None:
            transforms = dataclasses.replace(transforms, default_prompt=default_prompt)
        if asset_id:
            transforms = dataclasses.replace(transforms, asset_id=asset_id)
        if not transforms.asset_id:
            raise ConfigError(f"--robot {transforms.robot}: name the norm stats' --asset-id "
                              "(<checkpoint>/assets/<asset id>/norm_stats.json)")
        if len(transforms.delta_mask) > ROBOTS[transforms.robot].action_dims:
            raise ConfigError(f"--delta-dims: {len(transforms.delta_mask)} dims > the {transforms.robot} "
                              f"robot's {ROBOTS[transforms.robot].action_dims} action dims")
    elif delta_dims != "config" or default_prompt is not None:
        raise ConfigError("--delta-dims / --default-prompt are openpi data transforms: name the robot (--robot)")
    if discrete_state_input not in ("config", "true", "false"):
        raise ConfigError(f"--discrete-state-input {discrete_state_input!r}: config | true | false")
    if action_horizon < 0 or max_token_len < 0:
        raise ConfigError("--action-horizon / --max-token-len must be > 0 (0 = the config's)")
    model = dataclasses.replace(
        cfg.model, name=name, action_horizon=action_horizon or horizon, max_text_len=max_token_len or tokens,
        discrete_state_input=dsi if discrete_state_input == "config" else discrete_state_input == "true",
        flow_x1="normal", tokenizer_path=tokenizer or cfg.model.tokenizer_path)
    data = dataclasses.replace(cfg.data, state_norm=norm, action_norm=norm)
    if transforms is not None:  # the robot's cameras in our names (env.cameras: the tabletop's among them)
        cams = transforms.cameras
        env = dataclasses.replace(cfg.env, cameras=tuple(c for c in cams if c in ("agentview", "wrist")))
        data = dataclasses.replace(data, camera_map=tuple(f"{c}={slot}" for c, slot in transforms.keys.camera_map))
        cfg = cfg.replace(env=env)
    try:
        cfg = cfg.replace(name=name, model=model, data=data, output_dir=f"runs/{name}")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return cfg, transforms


@dataclasses.dataclass(frozen=True)
class ImportArgs:
    """Import an openpi checkpoint directory as a vlajax run directory (a policy)."""

    checkpoint: str  # openpi checkpoint directory (holds params/, assets/<asset id>/norm_stats.json)
    config: str  # openpi train config (pi0_libero, pi05_libero, pi0_droid, pi05_droid, pi0_aloha_sim...) or π preset
    out: str  # new vlajax run directory to write
    tokenizer: str = ""  # SentencePiece model file ('' = the preset's model.tokenizer_path: openpi's cache path)
    # full: openpi's widths; dummy: the reference data's (dummy Gemma, SigLIP mu/14 x 2); auto: the one whose
    # widths the checkpoint's parameter shapes have (an openpi train config's --config; a π preset has its own)
    size: str = "auto"
    asset_id: str = ""  # which assets/<id>/norm_stats.json ('' = the config's)
    action_horizon: int = 0  # your config's action horizon (0 = the config's)
    max_token_len: int = 0  # your config's max prompt tokens (0 = the config's)
    discrete_state_input: str = "config"  # π0.5: the state in the prompt: config | true | false
    robot: str = "config"  # data transforms: libero | droid | aloha | none (config = the config's)
    delta_dims: str = "config"  # AbsoluteActions dims as openpi's make_bool_mask, e.g. '6,-1'; 'none'
    default_prompt: str | None = None  # prompt when a request has none (None = the config's)


def main(argv: list[str] | None = None) -> int:
    args = cli.parse(ImportArgs, argv, prog="python -m vlajax.policies.import_openpi",
                     description=__doc__.split("\n\n")[0])
    size = args.size
    try:
        if args.config in OPENPI_CONFIGS:  # (a vlajax π preset has its sizes)
            size = infer_size(args.checkpoint, args.config, size)
        elif size not in ("auto", *SIZES):
            raise ConfigError(f"--size {size!r}: choose from {SIZES} (or leave it out: it is read from the shapes)")
        cfg, transforms = openpi_train_config(
            args.config, size="full" if size == "auto" else size, tokenizer=args.tokenizer,
            action_horizon=args.action_horizon,
            max_token_len=args.max_token_len, discrete_state_input=args.discrete_state_input, robot=args.robot,
            delta_dims=args.delta_dims, default_prompt=args.default_prompt, asset_id=args.asset_id)
        summary = import_checkpoint(args.checkpoint, cfg, args.out, args.asset_id, transforms)
    except openpi_params.OpenpiLayoutError as e:
        print(f"error: {_short(str(e))} (are these params of another config than --config {args.config}"
              f"{'' if size == 'auto' else f' --size {size}'}?)", file=sys.stderr)
        return 2
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"imported {summary['openpi_leaves']} openpi leaves into {args.out} (step 0, config {cfg.name}, "
          f"horizon {cfg.model.action_horizon}, {cfg.model.max_text_len} prompt tokens, "
          f"state in prompt: {cfg.model.family == 'pi05' and cfg.model.discrete_state_input}); "
          f"transforms: {transforms.robot if transforms else 'none (tabletop conventions)'}; "
          f"fresh leaves: {summary['fresh_leaves'] or 'none'}; norm stats: {summary['norm_stats']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
