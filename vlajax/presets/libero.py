"""Asynchronous RL on LIBERO workers (`vlajax.libero.rl_train`; docs/libero.md, "Asynchronous RL on LIBERO").

    rl-pi05-libero         the GPU-pod recipe: openpi's pi0.5 (full size) from `rl.init_from` (an imported
                           pi05_libero or its SFT), GRPO over groups of 8 episodes of one initial state, 4
                           groups per update (32 episodes in flight), chunk 10 / replan 5 (openpi's LIBERO
                           example), VLM frozen (the expert trains), staleness 1 + partial rollout (the
                           planner's best mode for pi0.5 on LIBERO, colocated), one publication per update.
                           Run with `--suite libero_spatial --libero.workers 16 --libero.envs-per-worker 2`
                           (one worker per CPU core pair; docs/libero.md).
    rl-pi05-libero-dummy   the same chain at the openpi reference data's sizes (pi05 dummy) for this CPU's smoke:
                           groups of 2, short episodes (`--libero.max-steps`), 3 updates, a checkpoint each.

The env section is not read (the envs are LIBERO workers); `env.num_envs` is the episodes of one update
only to satisfy the config's group check.
"""

from __future__ import annotations

import dataclasses

from vlajax.config import AsyncConfig, CheckpointConfig, EnvConfig, LoggingConfig, RLConfig, TrainConfig, register
from vlajax.presets.openpi import _model


def _rl(dummy: bool) -> TrainConfig:
    g, groups = (2, 1) if dummy else (8, 4)
    model = dataclasses.replace(_model("pi05", dummy=dummy), trainable="expert")
    rl = RLConfig(algo="grpo", group_size=g, num_iterations=3 if dummy else 300, num_minibatches=1,
                  update_epochs=1, learning_rate=1e-5 if dummy else 1e-6, normalize_advantages="none",
                  dual_clip=0.0, eval_every=-1, chunk_steps=5)
    pipeline = AsyncConfig(enabled=True, staleness_threshold=1.0, partial_rollout=True, max_wait_ms=20.0,
                           require_batches=groups, queue_timeout_s=900.0, watchdog_s=900.0)
    name = "rl-pi05-libero" + ("-dummy" if dummy else "")
    return TrainConfig(name=name, output_dir=f"runs/{name}", model=model,
                       env=EnvConfig(suite="spatial", num_envs=g * groups, image_size=224), rl=rl, pipeline=pipeline,
                       checkpoint=CheckpointConfig(every_steps=1 if dummy else 20, max_to_keep=2, async_save=not dummy),
                       logging=LoggingConfig(every_steps=1, progress="none", tensorboard=False))


@register("rl-pi05-libero", "async GRPO of openpi's pi0.5 on LIBERO workers (--suite libero_*, --rl.init-from): "
                            "GPU pods")
def _rl_pi05_libero() -> TrainConfig:
    return _rl(dummy=False)


@register("rl-pi05-libero-dummy", "async GRPO of the dummy-size pi0.5 on LIBERO workers: this CPU's smoke of the chain")
def _rl_pi05_libero_dummy() -> TrainConfig:
    return _rl(dummy=True)
