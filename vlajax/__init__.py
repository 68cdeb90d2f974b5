"""vlajax: Vision-Language-Action policies in JAX — demonstrations, SFT and async RL on MJX.

The public API, grouped. Submodules load lazily on first attribute access, so
`import vlajax` stays cheap (no JAX backend start-up, no MJX import).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> module that defines it
_API: dict[str, str] = {
    # Configuration
    "TrainConfig": "vlajax.config.schema",
    "ConfigError": "vlajax.config.schema",
    "get_config": "vlajax.config.schema",
    "register": "vlajax.config.schema",
    "preset_names": "vlajax.config.schema",
    # Devices, meshes, processes
    "make_mesh": "vlajax.training.sharding",
    "use_mesh": "vlajax.training.sharding",
    "init_sharded": "vlajax.training.sharding",
    "initialize_distributed": "vlajax.training.distributed",
    # Training state, checkpoints, logging
    "TrainState": "vlajax.training.train_state",
    "Checkpointer": "vlajax.training.checkpoint",
    "MetricsLogger": "vlajax.training.logging",
    "Progress": "vlajax.training.logging",
    "write_gif": "vlajax.training.logging",
    # Simulation: make an env, step it, render it
    "load_env": "vlajax.envs",
    "SUITES": "vlajax.envs",
    "ALL_ENVS": "vlajax.envs",
    # The model: build, sample actions, log-probs, losses
    "VLA": "vlajax.models",
    "Observation": "vlajax.models",
    "get_model_config": "vlajax.models",
    "sample_actions": "vlajax.models",
    "log_prob": "vlajax.models",
    "quantize_params": "vlajax.models",
    "Bridge": "vlajax.policies.bridge",
    "Policy": "vlajax.policies.policy",
    # Data and SFT
    "LeRobotWriter": "vlajax.data",
    "LeRobotData": "vlajax.data",
    "make_loader": "vlajax.data",
    "generate_demos": "vlajax.data.demos",
    "sft_train": "vlajax.sft.loop",
    "sft_train_step": "vlajax.sft.loop",
    "sft_loss": "vlajax.sft.loss",
    # RL: rollouts, advantages, losses, the learner step
    "gae": "vlajax.rl",
    "group_relative": "vlajax.rl",
    "ppo_policy_loss": "vlajax.rl",
    "decoupled_ppo_policy_loss": "vlajax.rl",
    "rl_update": "vlajax.rl",
    "rollout": "vlajax.rl.rollout",
    "actor_step": "vlajax.rl.rollout",
    "rl_train": "vlajax.rl.loop",
    # The asynchronous pipeline
    "AsyncRunner": "vlajax.pipeline",
    "run_sync": "vlajax.pipeline",
    "make_placement": "vlajax.pipeline",
    "run_async": "vlajax.rl.async_loop",
    "rl_train_async": "vlajax.rl.async_loop",
    # Evaluation
    "evaluate": "vlajax.evaluation.closed_loop",
    "load_policy": "vlajax.policies.run_files",
}
_RENAMES = {
    "initialize_distributed": "initialize",
    "load_env": "load",
    "sample_actions": "sample",
    "generate_demos": "generate",
    "sft_train": "train",
    "sft_train_step": "train_step",
    "sft_loss": "loss_fn",
    "rl_update": "update",
    "rl_train": "train",
    "rl_train_async": "train_async",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'vlajax' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), _RENAMES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover
    from vlajax.config.schema import ConfigError, TrainConfig, get_config, preset_names, register
    from vlajax.training.checkpoint import Checkpointer
    from vlajax.training.distributed import initialize as initialize_distributed
    from vlajax.training.logging import MetricsLogger, Progress, write_gif
    from vlajax.training.sharding import init_sharded, make_mesh, use_mesh
    from vlajax.training.train_state import TrainState
