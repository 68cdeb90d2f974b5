"""Asynchronous RL on LIBERO workers (`vlajax.libero.rl_train`; docs/libero-training.md).

    rl-pi05-libero         the GPU-pod recipe: openpi's pi0.5 (full size) from `rl.init_from` (an imported
                           pi05_libero or its SFT), GRPO over groups of 8 episodes of one initial state, 4
                           groups per update (32 episodes in flight), chunk 10 / replan 5 (openpi's LIBERO
                           example), VLM frozen (the expert trains), staleness 1 + partial rollout (the
                           planner's best mode for pi0.5 on LIBERO, colocated), one publication per update.
                           Run with `--suite libero_spatial --libero.workers 16 --libero.envs-per-worker 2`
                           (one worker per CPU core pair; docs/libero-training.md).
    rl-pi05-libero-dummy   the same chain at the openpi reference data's sizes (pi05 dummy) for this CPU's smoke:
                           groups of 2, short episodes (`--libero.max-steps`), 3 updates, a checkpoint each.

The env section is not read (the envs are LIBERO workers); `env.num_envs` is the episodes of one update
only to satisfy the config's group check.

SFT on LIBERO demonstrations (`demos --suite libero_spatial`: openpi's LIBERO layout, `image` and
`wrist_image`, `state` [8], `actions` [7], 10 fps):

    sft-libero-small       our `vla` family at `sft-small`'s CPU widths for LIBERO: 7-dim actions (OSC_POSE
                           delta + gripper), 8-dim state, both cameras at 64 x 64 (the size the policy reads
                           and the LIBERO workers should render at: `LIBERO_IMAGE_SIZE`), 16 x 16 patches
                           (16 tokens a camera, as sft-small's 8 x 8 on 32 x 32), a 32-token instruction
                           (LIBERO's longer sentences, spelled with byte fallback where a word is not in the
                           packaged vocabulary), a chunk of 10 (openpi's pi05_libero horizon) replanned every 5.
    sft-libero-tiny        the same embodiment on the `tiny` widths at 32 x 32: the LIBERO quickstart's smoke size
                           (a wiring check, not a learning run).

RL from such an SFT checkpoint (`--rl.init-from <sft>/checkpoints`; the architecture comes from the checkpoint):

    rl-grpo-libero-small   GRPO on LIBERO's sparse success reward with the token head, asynchronous at staleness 1
                           with partial rollout and decoupled PPO (proximal log-probs recomputed), groups of 4
                           episodes of one (task, initial state), 2 groups per update, chunk 10 replanned every 5,
                           rollouts at temperature 0.5 with a KL penalty of 0.04 to the SFT policy (the tabletop
                           quickstart's recipe, experiments/quickstart/README.md), one checkpoint per update.
"""

from __future__ import annotations

import dataclasses

from vlajax.config.presets.openpi import _model
from vlajax.config.presets.sft import SMALL_CPU_MODEL
from vlajax.config.schema import (
    AsyncConfig,
    CheckpointConfig,
    DataConfig,
    EnvConfig,
    LoggingConfig,
    ModelConfig,
    RLConfig,
    SFTConfig,
    TrainConfig,
    register,
)

LIBERO_IMAGE_SIZE = 64  # what sft-libero-small reads from both cameras (and what its LIBERO workers render)

# sft-small's widths on LIBERO's embodiment and both cameras (16 patches each at 64 x 64 with 16 x 16 patches)
LIBERO_SMALL_MODEL = dataclasses.replace(
    SMALL_CPU_MODEL, name="sft-libero-small", image_size=LIBERO_IMAGE_SIZE, patch_size=16, action_dim=7,
    state_dim=8, action_horizon=10, max_text_len=32, num_cameras=2)


# T_max of the LIBERO endpoint's adaptive batching (`pipeline.max_wait_ms`): the longest a slot still stepping holds
# the others' batch -- about one replan chunk of LIBERO steps on a CPU (the metrics' step_s_p50 / step_s_mean), so
# worker slots in lockstep share one forward; a slot between episodes is not waited for
LIBERO_T_MAX_MS = 250.0


def _rl(dummy: bool) -> TrainConfig:
    g, groups = (2, 1) if dummy else (8, 4)
    model = dataclasses.replace(_model("pi05", dummy=dummy), trainable="expert")
    rl = RLConfig(algo="grpo", group_size=g, num_iterations=3 if dummy else 300, num_minibatches=1,
                  update_epochs=1, learning_rate=1e-5 if dummy else 1e-6, normalize_advantages="none",
                  dual_clip=0.0, eval_every=-1, chunk_steps=5)
    pipeline = AsyncConfig(enabled=True, staleness_threshold=1.0, partial_rollout=True, max_wait_ms=LIBERO_T_MAX_MS,
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


@register("sft-libero-small", "CPU VLA for LIBERO demos (openpi's layout): 7-dim actions, 8-dim state, both "
                              "cameras at 64x64, sft-small's widths")
def _sft_libero_small() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/sft-libero-small",
        model=LIBERO_SMALL_MODEL,
        env=EnvConfig(suite="libero_spatial", num_envs=10, image_size=LIBERO_IMAGE_SIZE),
        data=DataConfig(batch_size=32, episodes_per_task=20, num_threads=2, prefetch=4,
                        demo_image_size=LIBERO_IMAGE_SIZE),
        sft=SFTConfig(num_steps=1500, learning_rate=5e-4, warmup_steps=100, end_lr_fraction=0.05,
                      weight_decay=1e-4, grad_clip=1.0, ema_decay=0.995, eval_every=-1,
                      eval_episodes_per_task=5, eval_replan_steps=5),
        checkpoint=CheckpointConfig(every_steps=250, max_to_keep=2),
        logging=LoggingConfig(every_steps=25, progress="plain"),
    )


LIBERO_TINY_MODEL = ModelConfig(name="tiny", image_size=32, patch_size=8, action_dim=7, state_dim=8, action_horizon=10,
                                max_text_len=32, num_cameras=2)


@register("sft-libero-tiny", "tiny VLA for LIBERO demos at 32x32 (the LIBERO quickstart's smoke size)")
def _sft_libero_tiny() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/sft-libero-tiny",
        model=LIBERO_TINY_MODEL,
        env=EnvConfig(suite="libero_spatial", num_envs=2, image_size=32),
        data=DataConfig(batch_size=8, episodes_per_task=1, num_threads=1, prefetch=2, demo_image_size=32),
        sft=SFTConfig(num_steps=4, warmup_steps=1, eval_every=-1, eval_episodes_per_task=1),
        checkpoint=CheckpointConfig(every_steps=2),
        logging=LoggingConfig(every_steps=1, progress="plain"),
    )


@register("rl-grpo-libero-small", "async GRPO (staleness 1) of a LIBERO SFT checkpoint (sft-libero-small, token "
                                  "head) on LIBERO's success reward: --suite libero_spatial --rl.init-from")
def _rl_grpo_libero_small() -> TrainConfig:
    g, groups = 4, 2
    rl = RLConfig(algo="grpo", group_size=g, num_iterations=8, num_minibatches=1, update_epochs=1,
                  learning_rate=5e-5, normalize_advantages="none", dual_clip=0.0, eval_every=-1, chunk_steps=5,
                  temperature=0.5, kl_coef=0.04, reward="success")
    pipeline = AsyncConfig(enabled=True, staleness_threshold=1.0, partial_rollout=True, use_rollout_log_probs=False,
                           max_wait_ms=LIBERO_T_MAX_MS, require_batches=groups, queue_timeout_s=900.0, watchdog_s=900.0)
    return TrainConfig(name="rl-grpo-libero-small", output_dir="runs/rl-grpo-libero-small",
                       model=ModelConfig(action_head="tokens", value_head="none"),
                       env=EnvConfig(suite="spatial", num_envs=g * groups, image_size=LIBERO_IMAGE_SIZE), rl=rl,
                       pipeline=pipeline, checkpoint=CheckpointConfig(every_steps=1, max_to_keep=2),
                       logging=LoggingConfig(every_steps=1, progress="none", tensorboard=False))
