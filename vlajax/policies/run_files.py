"""The files of a training run: `config.json`, the train state's shape, and loading a policy back.

A run directory written by `vlajax.train sft` holds the Orbax checkpoints, `config.json` (the
`TrainConfig`, `config_to_dict`) and `policy.json` (the `vlajax.policies.bridge.Bridge`). This module
reads and writes them and rebuilds the train state's abstract shape (`abstract_train_state`: the
optimizer of `make_optimizer`, the VLA of `init_fn`) so a checkpoint restores onto a mesh.
`vlajax.sft.loop` writes a run with it; the RL loops write their own `config.json` and `policy.json`
(`write_policy`, with `"source": "rl" | "async-rl"`) so their checkpoints are policies too.
`vlajax.evaluation.closed_loop`, `vlajax.serve`, `vlajax.rl.setup` and the benches read one (`load_policy`
takes any of them, `load_config`). It imports none of them.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import typing
from typing import Any

import flax.linen as nn
import jax
import optax

from vlajax.config.run import checkpoint_steps
from vlajax.config.schema import ConfigError, ModelConfig, TrainConfig
from vlajax.models.build import build_model
from vlajax.models.observation import fake_observation
from vlajax.policies.bridge import POLICY_FILE, Bridge
from vlajax.shared.atomic_files import write_json
from vlajax.training import checkpoint, sharding, trainable
from vlajax.training.train_state import TrainState

__all__ = ["CONFIG_FILE", "POLICY_SOURCES", "abstract_train_state", "config_from_dict", "config_to_dict", "eval_params",
           "init_fn", "load_config", "load_policy", "make_optimizer", "make_schedule", "policy_source",
           "restore_eval_params", "write_policy", "checkpoint_dir", "run_checkpointer",
           "load_run_policy", "KINDS", "RunIdentity", "identify"]

CONFIG_FILE = "config.json"
# policy.json 'source': which run wrote the checkpoint (where its state keeps the policy's params)
POLICY_SOURCES = ("sft", "rl", "async-rl")


# ------------------------------------------------------------------------------------------
# Config files
# ------------------------------------------------------------------------------------------


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain JSON-able data (nested dicts, tuples become lists when dumped)."""
    return dataclasses.asdict(cfg)


def _from_dict(cls, d: dict[str, Any]):
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v, t = d[f.name], hints[f.name]
        if dataclasses.is_dataclass(t):
            v = _from_dict(t, v)
        elif isinstance(v, list):
            v = tuple(v)
        kw[f.name] = v
    return cls(**kw)


def config_from_dict(d: dict[str, Any]) -> TrainConfig:
    """Inverse of `config_to_dict` (unknown keys are ignored, missing ones take defaults)."""
    return _from_dict(TrainConfig, d)


def load_config(directory: str) -> TrainConfig:
    """The `TrainConfig` of the run in `directory` (its `config.json`); FileNotFoundError when absent."""
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: missing (a checkpoint directory written by `vlajax.train sft` has it)")
    with open(path) as f:
        return config_from_dict(json.load(f))


# ------------------------------------------------------------------------------------------
# Optimizer and state
# ------------------------------------------------------------------------------------------


def make_schedule(cfg: TrainConfig) -> optax.Schedule:
    """SFT learning rate: linear warmup over `sft.warmup_steps`, cosine decay to `end_lr_fraction`."""
    s = cfg.sft
    return optax.warmup_cosine_decay_schedule(
        0.0, s.learning_rate, max(s.warmup_steps, 1), max(s.num_steps, s.warmup_steps + 1),
        end_value=s.learning_rate * s.end_lr_fraction)


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """SFT optimizer: global-norm clipping (`sft.grad_clip` > 0), then AdamW on `make_schedule`."""
    s = cfg.sft
    parts = [optax.clip_by_global_norm(s.grad_clip)] if s.grad_clip > 0 else []
    # model.trainable='expert': no weight decay on the frozen VLM (its gradients are stopped in the loss)
    mask = None if cfg.model.trainable == "all" else trainable.decay_mask(cfg.model)
    return optax.chain(*parts, optax.adamw(make_schedule(cfg), weight_decay=s.weight_decay, mask=mask))


def init_fn(cfg: TrainConfig, cameras: tuple[str, ...]):
    """`rng -> TrainState` (boxed params inside; see `sharding.init_sharded`)."""
    model = build_model(cfg.model)  # our VLA or openpi's pi0 / pi0.5
    tx = make_optimizer(cfg)

    def init(rng):
        obs = fake_observation(rng, 1, cfg.model, cameras=cameras)
        params, collections = TrainState.split(model.init(rng, obs))  # FP8 scales: a collection of their own
        return TrainState.create(params, tx, rng, ema=cfg.sft.ema_decay > 0, collections=collections)

    return init


def abstract_train_state(cfg: TrainConfig, cameras: tuple[str, ...], mesh) -> tuple[Any, Any]:
    """(abstract unboxed state with shardings, shardings) for restoring onto `mesh`."""
    abstract = jax.eval_shape(init_fn(cfg, cameras), jax.random.key(cfg.seed))
    shardings = sharding.tree_shardings(abstract, mesh, cfg.mesh.logical_rules)
    return checkpoint.abstract_state(nn.unbox(abstract), shardings), shardings


def inference_model(model: Any) -> Any:
    """The model that runs a policy's params outside training: FP8 is a training-time choice
    (its scales live in the train state's collections), inference runs the same params in the
    model's compute dtype."""
    return model if model.cfg.fp8 == "none" else build_model(dataclasses.replace(model.cfg, fp8="none"))


def eval_params(state: TrainState) -> Any:
    """The parameters to evaluate: the EMA when kept, else the live ones."""
    return state.ema_params if state.ema_params is not None else state.params


def restore_eval_params(directory: str, target: TrainState, flag: str) -> tuple[Any, dict]:
    """(eval_params, extra JSON) of the newest step in `directory`, restored onto `target` (an abstract
    train state). A missing checkpoint is a ConfigError naming the config field `flag` that pointed here."""
    with checkpoint.Checkpointer(directory, async_save=False) as ckpt:
        try:
            state, extra = ckpt.restore(target)
        except FileNotFoundError as e:
            raise ConfigError(f"{flag}: {e}") from None
    return eval_params(state), extra


# ------------------------------------------------------------------------------------------
# Loading a policy
# ------------------------------------------------------------------------------------------


def write_policy(directory: str, cfg: TrainConfig, bridge: Bridge, source: str,
                 rollout_physics: str | None = None) -> None:
    """Make a run's checkpoint directory self-describing: `config.json` (the run's config) and
    `policy.json` (the bridge plus `"source"`, one of `POLICY_SOURCES`, and for RL runs
    `"rollout_physics"`: the simulator its rollouts stepped, 'auto' resolved, since `config.json` keeps
    `env.physics_impl` as given). SFT and RL runs call it."""
    if source not in POLICY_SOURCES:
        raise ValueError(f"source {source!r} is not one of {POLICY_SOURCES}")
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, CONFIG_FILE), config_to_dict(cfg))
    facts = {} if rollout_physics is None else {"rollout_physics": rollout_physics}
    write_json(os.path.join(directory, POLICY_FILE), {**bridge.to_json(), "source": source, **facts})


def policy_source(directory: str) -> str:
    """The `"source"` recorded in `<directory>/policy.json` ('sft' when absent)."""
    with open(os.path.join(directory, POLICY_FILE)) as f:
        return json.load(f).get("source", "sft")


def checkpoint_dir(cfg: TrainConfig) -> str:
    """The run's checkpoint directory, absolute: `checkpoint.dir`, or `<output_dir>/checkpoints`."""
    return cfg.checkpoint.directory(cfg.output_dir)


def run_checkpointer(cfg: TrainConfig) -> tuple[str, checkpoint.Checkpointer]:
    """(`checkpoint_dir(cfg)`, a Checkpointer there with the config's retention, cadence and async saving):
    the one every training command writes its steps with. A fresh run (`checkpoint.resume=False`) over a
    directory that holds steps is a ConfigError here too, for callers that skip the CLI's `vlajax.preflight`
    (a notebook calling `vlajax.rl.loop.train`): Orbax would refuse the first save that meets one."""
    cfg.checkpoint.check_fresh(cfg.output_dir)
    directory = checkpoint_dir(cfg)
    return directory, checkpoint.Checkpointer(directory, max_to_keep=cfg.checkpoint.max_to_keep,
                                              save_every=cfg.checkpoint.every_steps,
                                              async_save=cfg.checkpoint.async_save)


def load_run_policy(cfg: TrainConfig):
    """`load_policy(checkpoint_dir(cfg), cfg)` for the commands that read a run's policy (eval,
    robustness); a missing checkpoint is a ConfigError (one `error:` line)."""
    try:
        return load_policy(checkpoint_dir(cfg), cfg)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None


def load_policy(ckpt_dir: str, cfg: TrainConfig, step: int | None = None):
    """(bridge, model, params, train config, step) from a checkpoint directory (or one `<dir>/<step>`)
    of an SFT, sync RL or async RL run.

    SFT: the state restores onto `cfg.mesh`; params are the EMA when the run kept one. RL
    (`policy.json` source 'rl' / 'async-rl'): the state `{'train': TrainState, 'env': ...}` is
    read as saved and the VLA's parameters taken from `train.params` (a privileged critic's
    `critic` entry is not part of the policy). Raises FileNotFoundError for a missing file."""
    ckpt_dir = os.path.abspath(os.path.expanduser(ckpt_dir))
    if os.path.isfile(os.path.join(os.path.dirname(ckpt_dir), POLICY_FILE)) and os.path.basename(
            ckpt_dir).isdigit():  # a step directory: <dir>/<step>
        step, ckpt_dir = int(os.path.basename(ckpt_dir)), os.path.dirname(ckpt_dir)
    bridge = Bridge.load(ckpt_dir)
    train_cfg = load_config(ckpt_dir)
    source = policy_source(ckpt_dir)
    ckpt = checkpoint.Checkpointer(ckpt_dir, async_save=False)
    try:
        if source == "sft":
            target, _ = abstract_train_state(train_cfg, bridge.cameras, sharding.make_mesh(cfg.mesh))
            state, extra = ckpt.restore(target, step=step)
            params = eval_params(state)
        else:
            state, extra = ckpt.restore(None, step=step)  # as saved: the RL state holds the env's too
            params = {k: v for k, v in state["train"]["params"].items() if k != "critic"}
    finally:
        ckpt.close()
    done = extra.get("step", extra.get("iteration", (extra.get("counters") or {}).get("updates", -1)))
    return bridge, inference_model(build_model(bridge.model)), params, train_cfg, int(done)


# ------------------------------------------------------------------------------------------
# What wrote a checkpoint directory (read before anything is built: JSON files and names only)
# ------------------------------------------------------------------------------------------

# kinds `identify` tells apart ('sft' / 'rl' / 'async-rl' are POLICY_SOURCES)
KINDS = ("sft", "rl", "async-rl", "openpi-import", "openpi-raw", "run-dir", "empty", "missing", "unknown")
_KIND_WORDS = {"sft": "an SFT run", "rl": "a sync RL run", "async-rl": "an async RL run",
               "openpi-import": "an imported openpi checkpoint"}


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint directory holds (`identify`): the kind of run that wrote it, its steps, its policy's
    model, its openpi record (policy.json's `openpi`: an imported policy's robot transforms, or None) and,
    for a raw openpi checkpoint, the family its leaf names show and its asset ids."""

    directory: str
    kind: str  # one of KINDS
    steps: tuple[int, ...] = ()
    model: Any = None  # the policy's ModelConfig (policy.json), or None
    run_model: Any = None  # the run's ModelConfig (config.json; the same but for RL's head fields), or None
    ema: bool = False  # config.json's sft.ema_decay > 0 (an SFT train state keeps an EMA)
    openpi: dict | None = None  # policy.json's openpi record (train_config, robot, ...), or None
    cameras: tuple[str, ...] = ()  # the policy's cameras (policy.json)
    openpi_family: str = ""  # openpi-raw: 'pi0' | 'pi05' (from its leaf names)
    asset_ids: tuple[str, ...] = ()  # openpi-raw: assets/<id>/norm_stats.json ids

    @property
    def robot(self) -> str:
        """The robot whose raw keys the policy reads ('' = our tabletop env's)."""
        return (self.openpi or {}).get("robot", "")

    def describe(self) -> str:
        """A few words for an `error:` line, e.g. "an SFT run (flow head, model 'tiny', steps 2, 4)"."""
        if self.kind == "openpi-raw":
            fam = f"{self.openpi_family} " if self.openpi_family else ""
            return f"a raw {fam}openpi checkpoint (params/ without config.json / policy.json: not imported yet)"
        if self.kind == "run-dir":
            return "a run's output directory (its checkpoints are in checkpoints/)"
        if self.kind in ("empty", "missing", "unknown"):
            return {"empty": "an empty directory (no checkpoint)", "missing": "not a directory",
                    "unknown": "no vlajax run (no policy.json / config.json)"}[self.kind]
        m = self.model
        facts = [f"{m.action_head} head" if m.family == "vla" else f"{m.family}", f"model {m.name!r}"]
        if self.openpi:
            r = self.openpi.get("robot", "")
            facts.insert(0, f"{self.openpi.get('train_config') or 'custom'}, {r.upper() if r == 'droid' else r.title()}"
                            f" robot keys")
        shown = ", ".join(map(str, self.steps[-3:]))
        facts.append(f"step{'s' if len(self.steps) > 1 else ''} {shown}" if self.steps else "no steps yet")
        return f"{_KIND_WORDS[self.kind]} ({'; '.join(facts)})"


def _json(path: str) -> dict | None:
    try:
        with open(path) as f:
            out = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return out if isinstance(out, dict) else None


def _openpi_params(directory: str) -> str | None:
    """`<directory>/params/_METADATA` or `<directory>/_METADATA` (openpi's Orbax params tree), or None."""
    for path in (os.path.join(directory, "params", "_METADATA"), os.path.join(directory, "_METADATA")):
        if os.path.isfile(path):
            return path
    return None


def identify(directory: str) -> RunIdentity:
    """What `directory` holds, from its files' names and JSON only (nothing restored, nothing imported):
    a run's checkpoints ('sft' / 'rl' / 'async-rl' from policy.json's `source`; 'openpi-import' when its
    step 0 records the openpi leaves `vlajax.policies.import_openpi` mapped), a raw openpi checkpoint
    (`params/_METADATA`, no policy.json), a run's output directory (`checkpoints/policy.json` below it),
    an empty or missing directory, or 'unknown'."""
    d = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(d):
        return RunIdentity(d, "missing")
    steps = tuple(checkpoint_steps(d))
    policy, config = _json(os.path.join(d, POLICY_FILE)), _json(os.path.join(d, CONFIG_FILE))
    if policy is None:
        meta = _openpi_params(d)
        if meta is not None and config is None:
            with open(meta) as f:
                text = f.read()
            family = "pi05" if "time_mlp_in" in text else "pi0" if "state_proj" in text else ""
            assets = sorted(os.path.relpath(os.path.dirname(p), os.path.join(d, "assets")) for p in
                            _glob(os.path.join(d, "assets", "**", "norm_stats.json")))
            return RunIdentity(d, "openpi-raw", steps, openpi_family=family, asset_ids=tuple(assets))
        if os.path.isfile(os.path.join(d, "checkpoints", POLICY_FILE)):
            return RunIdentity(d, "run-dir", steps)
        return RunIdentity(d, "empty" if not os.listdir(d) else "unknown", steps)
    source = policy.get("source", "sft")
    try:
        model = ModelConfig(**policy["model"])
        run_model = _from_dict(ModelConfig, (config or {}).get("model", policy["model"]))
    except (KeyError, TypeError, ValueError):
        return RunIdentity(d, "unknown", steps)
    ema = float(((config or {}).get("sft") or {}).get("ema_decay", 0.0)) > 0
    if source == "sft" and steps and "openpi_leaves" in (_json(os.path.join(d, str(steps[0]), "extra",
                                                                              "metadata")) or {}):
        source = "openpi-import"
    return RunIdentity(d, source if source in KINDS else "unknown", steps, model, run_model, ema,
                       policy.get("openpi"), tuple(policy.get("cameras", ())))


def _glob(pattern: str) -> list[str]:
    return glob.glob(pattern, recursive=True)
