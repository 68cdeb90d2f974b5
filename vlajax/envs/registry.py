"""Registry of tasks and suites: `ALL_ENVS`, `SUITES`, `load(name, **overrides)`.

    env = registry.load("goal/stack", obs_mode="state")
    env = registry.load("object/pick_red", config_overrides={"image_size": 32})

Unknown task or suite names raise `KeyError` listing the available names.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from vlajax.envs import perturb
from vlajax.envs.tabletop import tasks
from vlajax.envs.tabletop.env import TabletopConfig, TabletopEnv

_TASKS = {t.name: t for t in tasks.TASKS}
ALL_ENVS: tuple[str, ...] = tuple(_TASKS)
SUITES: dict[str, tuple[str, ...]] = {
    s: tuple(n for n in ALL_ENVS if n.startswith(s + "/")) for s in ("spatial", "object", "goal")
}


def _unknown(kind: str, name: str, available) -> KeyError:
    close = difflib.get_close_matches(name, list(available), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return KeyError(f"unknown {kind} {name!r}.{hint} Available: {', '.join(available)}")


def task_spec(name: str) -> tasks.TaskSpec:
    if name not in _TASKS:
        raise _unknown("task", name, ALL_ENVS)
    return _TASKS[name]


def suite(name: str) -> tuple[str, ...]:
    """Task names of a suite ('spatial', 'object', 'goal')."""
    if name not in SUITES:
        raise _unknown("suite", name, SUITES)
    return SUITES[name]


def get_default_config() -> TabletopConfig:
    return TabletopConfig()


def load(name: str, config_overrides: Mapping[str, Any] | None = None, **overrides: Any) -> TabletopEnv:
    """Build task `name` with `TabletopConfig` fields overridden (unknown fields fail)."""
    spec = task_spec(name)
    changes = {**(config_overrides or {}), **overrides}
    fields = {f.name for f in dataclasses.fields(TabletopConfig)}
    bad = sorted(set(changes) - fields)
    if bad:
        raise TypeError(f"unknown TabletopConfig fields {bad}; available: {sorted(fields)}")
    return TabletopEnv(spec, dataclasses.replace(get_default_config(), **changes))


def physics_impl(env_cfg) -> str:
    """The simulator an env built from `env_cfg` outside the RL rollout steps: its `physics_impl`, MJX ('jax') for
    'auto' (the RL rollout resolves 'auto' itself: `vlajax.rl.rollout.rollout_physics`)."""
    return "jax" if env_cfg.physics_impl == "auto" else env_cfg.physics_impl


def config_from_env_config(env_cfg) -> dict[str, Any]:
    """Map a `vlajax.config.schema.EnvConfig` onto `TabletopConfig` overrides."""
    return {
        "obs_mode": env_cfg.obs_mode,
        "image_size": env_cfg.image_size,
        "cameras": tuple(env_cfg.cameras),
        "render_backend": env_cfg.render_backend,
        "physics_impl": physics_impl(env_cfg),
        "num_envs": env_cfg.num_envs,
        "n_substeps": env_cfg.action_repeat * TabletopConfig.n_substeps,
        "randomize": tuple((a, lo, hi) for a, (lo, hi) in perturb.parse_ranges(env_cfg.randomize).items()),
    }


def tasks_for(env_cfg) -> tuple[str, ...]:
    """The task names an `EnvConfig` selects: its `task`, or every task of its `suite`."""
    return (task_spec(env_cfg.task).name,) if env_cfg.task else suite(env_cfg.suite)
