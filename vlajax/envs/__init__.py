"""The MJX tabletop task suite: env contract, wrappers, registry, renderers, experts, video.

    from vlajax import envs
    env = envs.load("goal/stack")                # see docs/envs.md
"""

from vlajax.envs.base import Env, State
from vlajax.envs.registry import ALL_ENVS, SUITES, load, suite
from vlajax.envs.wrappers import (
    ActionChunkWrapper,
    AutoResetWrapper,
    EpisodeWrapper,
    VmapWrapper,
    wrap,
)

__all__ = [
    # contract
    "Env",
    "State",
    # registry
    "ALL_ENVS",
    "SUITES",
    "load",
    "suite",
    # wrappers
    "ActionChunkWrapper",
    "AutoResetWrapper",
    "EpisodeWrapper",
    "VmapWrapper",
    "wrap",
]
