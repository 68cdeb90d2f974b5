"""SFT presets: the demos -> sft -> eval chain on CPU.

    sft-tiny    the `tiny` model (action_dim 4) on a few short demos: tests and smoke runs
    sft-small   the CPU learning preset: ~1.5M params, 32x32 pixels, the `goal` suite; reaches
                >= 50% closed-loop success within 30 minutes of SFT on a 2-core CPU
                (docs/results.md). The `small` model (25M params, 64x64) cannot train
                that far in 30 minutes on 2 cores (~23 s per step), so this preset keeps
                DESIGN.md's CPU sizing.

Both read the env's native action (4: xyz delta + gripper) and proprioceptive state (8).
"""

from __future__ import annotations

from vlajax.config.schema import (
    CheckpointConfig,
    DataConfig,
    EnvConfig,
    LoggingConfig,
    ModelConfig,
    SFTConfig,
    TrainConfig,
    register,
)

# The CPU learning model: ViT 96x3 on 8x8 patches of 32x32 images (16 tokens per camera),
# a 4-layer 128-wide prefix transformer and a 96-wide flow expert; prefix 56 tokens.
SMALL_CPU_MODEL = ModelConfig(
    name="sft-small", image_size=32, patch_size=8, vit_width=96, vit_depth=3, vit_heads=4, vit_mlp_dim=192,
    width=128, depth=4, num_heads=4, num_kv_heads=2, head_dim=32, mlp_dim=384, expert_width=96,
    expert_mlp_dim=192, action_dim=4, action_horizon=8, num_denoise_steps=5, state_dim=8, max_text_len=16,
)


@register("sft-tiny", "tiny model, a few demos and steps: the demos -> sft -> eval test chain")
def _sft_tiny() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/sft-tiny",
        model=ModelConfig(name="tiny", action_dim=4, state_dim=8),
        env=EnvConfig(suite="goal", num_envs=4, image_size=32, episode_length=160),
        data=DataConfig(batch_size=8, episodes_per_task=2, num_threads=1, prefetch=2),
        sft=SFTConfig(num_steps=4, warmup_steps=1, eval_every=-1, eval_episodes_per_task=1),
        checkpoint=CheckpointConfig(every_steps=2),
        logging=LoggingConfig(every_steps=1, progress="plain"),
    )


@register("sft-small", "CPU learning preset: ~1.5M-param VLA, 32x32 pixels, goal suite, <= 30 min SFT on 2 cores")
def _sft_small() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/sft-small",
        model=SMALL_CPU_MODEL,
        env=EnvConfig(suite="goal", num_envs=50, image_size=32, episode_length=200),
        data=DataConfig(batch_size=32, episodes_per_task=100, num_threads=2, prefetch=4),
        sft=SFTConfig(num_steps=1500, learning_rate=5e-4, warmup_steps=100, end_lr_fraction=0.05,
                      weight_decay=1e-4, grad_clip=1.0, ema_decay=0.995, eval_every=-1,
                      eval_episodes_per_task=20, eval_replan_steps=4, time_limit_minutes=26.0),
        checkpoint=CheckpointConfig(every_steps=250, max_to_keep=2),
        logging=LoggingConfig(every_steps=25, progress="plain"),
    )
