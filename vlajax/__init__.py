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
    "TrainConfig": "vlajax.config",
    "ConfigError": "vlajax.config",
    "get_config": "vlajax.config",
    "register": "vlajax.config",
    "preset_names": "vlajax.config",
    # Devices, meshes, processes
    "make_mesh": "vlajax.sharding",
    "use_mesh": "vlajax.sharding",
    "init_sharded": "vlajax.sharding",
    "initialize_distributed": "vlajax.distributed",
    # Training state, checkpoints, logging
    "TrainState": "vlajax.train_state",
    "Checkpointer": "vlajax.checkpoint",
    "MetricsLogger": "vlajax.logging",
    "Progress": "vlajax.logging",
}
_RENAMES = {"initialize_distributed": "initialize"}

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
    from vlajax.checkpoint import Checkpointer
    from vlajax.config import ConfigError, TrainConfig, get_config, preset_names, register
    from vlajax.distributed import initialize as initialize_distributed
    from vlajax.logging import MetricsLogger, Progress
    from vlajax.sharding import init_sharded, make_mesh, use_mesh
    from vlajax.train_state import TrainState
