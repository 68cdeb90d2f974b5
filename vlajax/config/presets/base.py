"""Base presets: `debug` (smallest everything, for smoke runs and tests) and `cpu-small` (the CPU learning
preset's sizes without a task family's choices)."""

from __future__ import annotations

from vlajax.config.schema import (
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


@register("debug", "smallest everything: 2-step smoke runs and tests")
def _debug() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/debug",
        env=EnvConfig(num_envs=8, image_size=32, episode_length=40),
        data=DataConfig(batch_size=8),
        sft=SFTConfig(num_steps=4, warmup_steps=1, eval_episodes_per_task=2),
        rl=RLConfig(num_iterations=2, rollout_length=4, group_size=4, num_minibatches=2),
        checkpoint=CheckpointConfig(every_steps=2),
        logging=LoggingConfig(every_steps=1, progress="plain"),
    )


@register("cpu-small", "the CPU learning preset: small model, 32x32 pixels, sized for 2 cores")
def _cpu_small() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/cpu-small",
        model=ModelConfig(name="small-cpu", width=128, depth=4, num_heads=4, num_kv_heads=2, head_dim=32,
                          mlp_dim=256, vit_width=96, vit_depth=3, expert_width=96),
        env=EnvConfig(num_envs=32, image_size=32, episode_length=120),
        data=DataConfig(batch_size=64),
        sft=SFTConfig(num_steps=3000, warmup_steps=200, eval_every=1000, eval_episodes_per_task=20),
        rl=RLConfig(num_iterations=200, rollout_length=16, group_size=8),
        checkpoint=CheckpointConfig(every_steps=250),
    )
