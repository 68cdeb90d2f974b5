"""`build_model(cfg)`: the network for a `ModelConfig` -- our `VLA` (family 'vla') or openpi's
pi0 / pi0.5 (`vlajax.models.openpi.Pi0`, families 'pi0' / 'pi05'). Both have the flow head's
methods (`prefix`, `velocity`, `value`, ...), which `vlajax.models.heads` calls by name.

A module of its own so that `vlajax.policies.run_files` can build models without importing the
`vlajax.models` package's planner modules (`memory` reads `run_files`)."""

from __future__ import annotations

import flax.linen as nn

from vlajax.config.schema import ModelConfig
from vlajax.models.openpi import Pi0
from vlajax.models.vla import VLA


def build_model(cfg: ModelConfig) -> nn.Module:
    """The network for `cfg`: `VLA(cfg)` for family 'vla', openpi's pi0 / pi0.5 otherwise."""
    if cfg.family == "vla":
        return VLA(cfg)
    return Pi0(cfg)
