"""openpi's π0 / π0.5 families: import -> SFT -> RL -> eval (docs/models.md, "Bring your openpi checkpoint").

    pi0-dummy, pi05-dummy   the reference data's sizes (`../shared/fixtures/openpi`): both Gemma
                            experts at openpi's `dummy` size, SigLIP mu/14 with 2 blocks, a 1,024-piece
                            vocabulary, action dim 32, horizon 10, 224x224 images; CPU tests and smoke
                            runs. `model.tokenizer_path` must name a SentencePiece model with ids < 1024
                            (`scripts/train_tokenizer.py OUT.model` trains one on the tasks).
    pi0, pi05               openpi's full sizes (PaliGemma gemma_2b + gemma_300m expert, SigLIP
                            So400m/14, 257,152 pieces, bf16) for GPU pods; the tokenizer is openpi's
                            `paligemma_tokenizer.model` at its cache path.
    pi0-lora, pi05-lora     the same with openpi's LoRA fine-tuning (`pi0_libero_low_mem_finetune`):
                            rank 16 on the VLM's Gemma, 32 on the action expert's, only the factors
                            and the non-Gemma parts train (`model.trainable='lora'`), no EMA.

Every preset: fixed batching (the π prefix is not packed), images resized with pad into openpi's
slots (`data.camera_map`: agentview -> base_0_rgb, wrist -> left_wrist_0_rgb), state and actions
zero-padded to 32 dims; normalization as openpi (π0: z-score, π0.5: quantiles); the flow starts
from Gaussian noise as openpi's `sample_actions` (`model.flow_x1='normal'`: eval, serving and the
rollout draw it); RL samples with flow_sde (the last step stochastic, its log-prob exact given the
stored x_1), GRPO over groups of 4 with the progress reward.
"""

from __future__ import annotations

import dataclasses

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

PALIGEMMA_TOKENIZER = "~/.cache/openpi/big_vision/paligemma_tokenizer.model"  # where openpi downloads it


def _model(family: str, *, dummy: bool) -> ModelConfig:
    pi05 = family == "pi05"
    common = dict(
        family=family, image_size=224, num_cameras=3, action_dim=32, state_dim=32,
        max_text_len=200 if pi05 else 48, num_denoise_steps=10, seq_multiple=8,
        flow_sampler="flow_sde", noise_level=0.5, flow_x1="normal", flow_sde_steps="last", value_head="none",
    )
    if dummy:
        return ModelConfig(name=f"{family}-dummy", paligemma_variant="dummy", action_expert_variant="dummy",
                           siglip_variant="mu/14", siglip_depth=2, vocab_size=1024, action_horizon=10,
                           tokenizer_path="", **common)
    return ModelConfig(name=family, paligemma_variant="gemma_2b", action_expert_variant="gemma_300m",
                       siglip_variant="So400m/14", vocab_size=257_152, action_horizon=10 if pi05 else 50,
                       dtype="bfloat16", remat=True, tokenizer_path=PALIGEMMA_TOKENIZER, **common)


def _config(family: str, *, dummy: bool) -> TrainConfig:
    pi05 = family == "pi05"
    norm = "quantile" if pi05 else "mean_std"
    name = f"{family}-dummy" if dummy else family
    if dummy:
        env = EnvConfig(suite="goal", num_envs=4, image_size=32, episode_length=40)
        data = DataConfig(batch_size=4, batching="fixed", episodes_per_task=2, num_threads=0, prefetch=0,
                          action_norm=norm, state_norm=norm)
        sft = SFTConfig(num_steps=20, learning_rate=1e-4, warmup_steps=2, eval_every=-1, eval_episodes_per_task=1)
        rl = RLConfig(algo="grpo", group_size=2, num_iterations=2, num_minibatches=1, update_epochs=1,
                      learning_rate=1e-5, normalize_advantages="none", dual_clip=0.0, eval_every=0,
                      eval_episodes_per_task=1, reward="progress")
        log = LoggingConfig(every_steps=1, progress="plain", tensorboard=False)
        ckpt = CheckpointConfig(every_steps=10, max_to_keep=1, async_save=False)
    else:  # openpi's fine-tuning recipe (AdamW, peak 5e-5 after warmup, grad clip 1, EMA 0.999)
        env = EnvConfig(suite="goal", num_envs=64, image_size=224, episode_length=200)
        data = DataConfig(batch_size=256, batching="fixed", num_threads=8, prefetch=4, action_norm=norm,
                          state_norm=norm)
        sft = SFTConfig(num_steps=30_000, learning_rate=5e-5, warmup_steps=1_000, end_lr_fraction=1.0,
                        weight_decay=1e-10, grad_clip=1.0, ema_decay=0.999, eval_every=5_000)
        rl = RLConfig(algo="grpo", group_size=4, num_iterations=300, num_minibatches=4, update_epochs=1,
                      learning_rate=1e-6, normalize_advantages="none", dual_clip=0.0, eval_every=10,
                      eval_episodes_per_task=20, chunk_steps=5 if pi05 else 10, reward="progress")
        log = LoggingConfig(every_steps=10)
        ckpt = CheckpointConfig(every_steps=1_000, max_to_keep=2)
    return TrainConfig(output_dir=f"runs/{name}", model=_model(family, dummy=dummy), env=env, data=data, sft=sft,
                       rl=rl, checkpoint=ckpt, logging=log)


@register("pi0-dummy", "π0 at the openpi reference data's sizes (dummy Gemma, SigLIP mu/14 x2): CPU tests")
def _pi0_dummy() -> TrainConfig:
    return _config("pi0", dummy=True)


@register("pi05-dummy", "π0.5 at the openpi reference data's sizes (dummy Gemma, SigLIP mu/14 x2): CPU tests")
def _pi05_dummy() -> TrainConfig:
    return _config("pi05", dummy=True)


@register("pi0", "π0 at openpi's sizes (PaliGemma 2B + 300M expert, SigLIP So400m/14, bf16): GPU pods")
def _pi0() -> TrainConfig:
    return _config("pi0", dummy=False)


@register("pi05", "π0.5 at openpi's sizes (PaliGemma 2B + 300M adaRMS expert, state in the prompt): GPU pods")
def _pi05() -> TrainConfig:
    return _config("pi05", dummy=False)


def _lora(family: str) -> TrainConfig:
    """openpi's low-memory fine-tuning: gemma_2b_lora (rank 16) + gemma_300m_lora (rank 32), no EMA."""
    cfg = _config(family, dummy=False)
    model = dataclasses.replace(cfg.model, name=f"{family}-lora", lora_rank=16, expert_lora_rank=32,
                                trainable="lora")
    return cfg.replace(model=model, output_dir=f"runs/{family}-lora",
                       sft=dataclasses.replace(cfg.sft, ema_decay=0.0))


@register("pi0-lora", "π0 at openpi's sizes with its LoRA fine-tuning (ranks 16 / 32, factors train): GPU pods")
def _pi0_lora() -> TrainConfig:
    return _lora("pi0")


@register("pi05-lora", "π0.5 at openpi's sizes with its LoRA fine-tuning (ranks 16 / 32, factors train): GPU pods")
def _pi05_lora() -> TrainConfig:
    return _lora("pi05")
