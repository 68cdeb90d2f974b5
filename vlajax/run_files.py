"""The files of a training run: `config.json`, the train state's shape, and loading a policy back.

A run directory written by `vlajax.train sft` holds the Orbax checkpoints, `config.json` (the
`TrainConfig`, `config_to_dict`) and `policy.json` (the `vlajax.policy.Bridge`). This module
reads and writes them and rebuilds the train state's abstract shape (`abstract_train_state`: the
optimizer of `make_optimizer`, the VLA of `init_fn`) so a checkpoint restores onto a mesh.
`vlajax.sft` writes a run with it; `vlajax.evaluate`, `vlajax.rl.setup` and the benches read one
(`load_policy`, `load_config`). It imports neither of them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from typing import Any

import flax.linen as nn
import jax
import optax

from vlajax import checkpoint, sharding
from vlajax.config import TrainConfig
from vlajax.models.observation import fake_observation
from vlajax.models.vla import VLA
from vlajax.policy import Bridge
from vlajax.train_state import TrainState

__all__ = ["CONFIG_FILE", "abstract_train_state", "config_from_dict", "config_to_dict", "eval_params", "init_fn",
           "load_config", "load_policy", "make_optimizer", "make_schedule", "write_json"]

CONFIG_FILE = "config.json"


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


def write_json(path: str, obj: Any) -> None:
    """`obj` as JSON at `path`, atomically (a temporary file renamed over it)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


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
    return optax.chain(*parts, optax.adamw(make_schedule(cfg), weight_decay=s.weight_decay))


def init_fn(cfg: TrainConfig, cameras: tuple[str, ...]):
    """`rng -> TrainState` (boxed params inside; see `sharding.init_sharded`)."""
    model = VLA(cfg.model)
    tx = make_optimizer(cfg)

    def init(rng):
        obs = fake_observation(rng, 1, cfg.model, cameras=cameras)
        params = model.init(rng, obs)["params"]
        return TrainState.create(params, tx, rng, ema=cfg.sft.ema_decay > 0)

    return init


def abstract_train_state(cfg: TrainConfig, cameras: tuple[str, ...], mesh) -> tuple[Any, Any]:
    """(abstract unboxed state with shardings, shardings) for restoring onto `mesh`."""
    abstract = jax.eval_shape(init_fn(cfg, cameras), jax.random.key(cfg.seed))
    shardings = sharding.tree_shardings(abstract, mesh, cfg.mesh.logical_rules)
    return checkpoint.abstract_state(nn.unbox(abstract), shardings), shardings


def eval_params(state: TrainState) -> Any:
    """The parameters to evaluate: the EMA when kept, else the live ones."""
    return state.ema_params if state.ema_params is not None else state.params


# ------------------------------------------------------------------------------------------
# Loading a policy
# ------------------------------------------------------------------------------------------


def load_policy(ckpt_dir: str, cfg: TrainConfig, step: int | None = None):
    """(bridge, model, params, train config, step) from an SFT checkpoint directory (or one `<dir>/<step>`).

    `cfg.mesh` is the mesh the state is restored onto; params are the EMA when the run kept one."""
    ckpt_dir = os.path.abspath(os.path.expanduser(ckpt_dir))
    if os.path.isfile(os.path.join(os.path.dirname(ckpt_dir), "policy.json")) and os.path.basename(
            ckpt_dir).isdigit():  # a step directory: <dir>/<step>
        step, ckpt_dir = int(os.path.basename(ckpt_dir)), os.path.dirname(ckpt_dir)
    bridge = Bridge.load(ckpt_dir)
    train_cfg = load_config(ckpt_dir)
    mesh = sharding.make_mesh(cfg.mesh)
    target, _ = abstract_train_state(train_cfg, bridge.cameras, mesh)
    ckpt = checkpoint.Checkpointer(ckpt_dir, async_save=False)
    state, extra = ckpt.restore(target, step=step)
    ckpt.close()
    return bridge, VLA(bridge.model), eval_params(state), train_cfg, int(extra.get("step", -1))
