"""RL presets (`python -m vlajax.train rl --preset NAME`), keyed by what they train.

- `rl-debug`: state observations, the MLP policy, 2 tiny PPO iterations (tests, smoke runs).
- `rl-mlp-state`: the state-observation MLP preset used for the brax peer comparison
  (`research/bench/rl_peer.py`): one task, chunk of 1 (brax acts per step), 64x64 tanh MLPs.
- `rl-grpo-tokens`: GRPO with the token head from pixels, started from an SFT checkpoint
  (`--rl.init-from runs/<sft>/checkpoints`; the SFT run's `data.action_norm` must let the bins
  reach every action: `auto` = `min_max` for tokens); no critic; 32 envs in 8 groups of 4;
  `make quickstart` runs it asynchronously.
- `rl-grpo-flow`: the same GRPO with the flow head (`flow_sde`), at a lower learning rate
  (the flow policy moves ~17x more in KL per update at the same rate;
  experiments/rl-from-pixels/README.md).
- `rl-ppo-flow`: PPO with the flow head and the privileged critic (an MLP on the simulator
  state, its own learning rate, 5 critic-only warm-up iterations), from an SFT checkpoint;
  48 decisions per env per iteration (about one episode).
Both flow presets start the sampler at x_1 = 0 and make only its last denoising step
stochastic (`flow_sde_steps='last'`): every bit of the chunk's randomness is then scored by the
log-prob, exactly.
All three use the potential-based `progress` reward (success bonus + change of the shaped terms);
docs/results.md, "RL from pixels", has what they reached.
The pixel presets take the model architecture from the SFT checkpoint (`sft-small`: H = 8, of
which `rl.chunk_steps = 4` are executed per decision, as in its evaluation); their `model`
section only sets the RL-specific head fields (sampler, noise level, value head).
"""

import dataclasses

from vlajax.config.schema import (
    AsyncConfig,
    CheckpointConfig,
    EnvConfig,
    LoggingConfig,
    ModelConfig,
    RLConfig,
    TrainConfig,
    register,
)


@register("rl-debug", "RL smoke: state obs, MLP policy, 2 PPO iterations on goal/press_button")
def _rl_debug() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/rl-debug",
        model=ModelConfig(width=32, depth=2, action_horizon=2),
        env=EnvConfig(suite="goal", task="goal/press_button", obs_mode="state", num_envs=8, episode_length=20),
        rl=RLConfig(num_iterations=2, rollout_length=4, num_minibatches=2, update_epochs=1, eval_every=0,
                    eval_episodes_per_task=2),
        checkpoint=CheckpointConfig(every_steps=1),
        logging=LoggingConfig(every_steps=1, progress="plain"),
    )


@register("rl-mlp-state", "PPO with the state-observation MLP (brax peer comparison): goal/press_button")
def _rl_mlp_state() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/rl-mlp-state",
        model=ModelConfig(width=64, depth=2, action_horizon=1),
        env=EnvConfig(suite="goal", task="goal/press_button", obs_mode="state", num_envs=64, episode_length=100),
        rl=RLConfig(num_iterations=50, rollout_length=20, num_minibatches=4, update_epochs=4, learning_rate=3e-4,
                    gamma=0.97, dual_clip=0.0, clip_high=0.2, entropy_coef=1e-3, eval_every=10,
                    eval_episodes_per_task=20),
        checkpoint=CheckpointConfig(every_steps=10),
        logging=LoggingConfig(every_steps=1),
    )


def _pixels_env(num_envs: int) -> EnvConfig:
    """The `sft-small` evaluation setting: goal suite, two 32x32 cameras, 200-step episodes."""
    return EnvConfig(suite="goal", obs_mode="pixels", num_envs=num_envs, image_size=32, episode_length=200)


def _grpo_pixels(output_dir: str, model: ModelConfig, learning_rate: float) -> TrainConfig:
    """GRPO from pixels: 32 envs in 8 groups of 4 sharing an initial state (tasks dealt to the
    groups in turn: 2 groups per goal task), one episode each."""
    return TrainConfig(
        output_dir=output_dir,
        model=model,
        env=_pixels_env(32),
        rl=RLConfig(algo="grpo", group_size=4, num_iterations=200, num_minibatches=4, update_epochs=1,
                    learning_rate=learning_rate, normalize_advantages="none", dual_clip=0.0, eval_every=5,
                    eval_episodes_per_task=20, chunk_steps=4, reward="progress"),
        checkpoint=CheckpointConfig(every_steps=5),
        logging=LoggingConfig(every_steps=1),
    )


@register("rl-grpo-tokens", "GRPO, token head, pixels, progress reward, from an SFT checkpoint (--rl.init-from)")
def _rl_grpo_tokens() -> TrainConfig:
    cfg = _grpo_pixels("runs/rl-grpo-tokens", ModelConfig(action_head="tokens", value_head="none"), 5e-5)
    # the sync loop by default; `--pipeline.enabled` runs async at staleness 1, which learns as much as sync
    # (experiments/async-equivalence/README.md); staleness 2 learns less
    pipeline = AsyncConfig(
        staleness_threshold=1.0,
        # False: decoupled PPO, the proximal log-probs recomputed by the learner
        use_rollout_log_probs=False)
    # 'decision': one ratio per chunk. The quickstart adds temperature 0.5 and kl_coef 0.04 on top of this preset
    # (experiments/quickstart/README.md)
    return dataclasses.replace(cfg, pipeline=pipeline, rl=dataclasses.replace(cfg.rl, ratio_level="decision"))


@register("rl-grpo-flow", "GRPO, flow head (flow_sde), pixels, progress reward, from an SFT checkpoint")
def _rl_grpo_flow() -> TrainConfig:
    # pipeline: the AsyncConfig defaults (staleness 0): async GRPO with the flow head has no equivalence test
    return _grpo_pixels("runs/rl-grpo-flow", _flow_rl_model("none"), 1.5e-5)


def _flow_rl_model(value_head: str) -> ModelConfig:
    """The flow head's RL sampler: x_1 = 0, one SDE step at the end (std 0.11 at noise 0.5)."""
    return ModelConfig(flow_sampler="flow_sde", noise_level=0.5, flow_x1="zeros", flow_sde_steps="last",
                       value_head=value_head)


@register("rl-ppo-flow", "PPO, flow head (flow_sde) + privileged critic, pixels, from an SFT checkpoint")
def _rl_ppo_flow() -> TrainConfig:
    return TrainConfig(
        output_dir="runs/rl-ppo-flow",
        model=_flow_rl_model("none"),
        env=_pixels_env(32),
        # ratio_level 'decision' (the default): one ratio per chunk
        rl=RLConfig(algo="ppo", num_iterations=300, rollout_length=48, num_minibatches=4, update_epochs=1,
                    learning_rate=1e-5, value_learning_rate=1e-3, critic_warmup_iterations=5, gamma=0.99,
                    critic="privileged", normalize_advantages="batch", eval_every=5, eval_episodes_per_task=20,
                    chunk_steps=4, reward="progress"),
        checkpoint=CheckpointConfig(every_steps=5),
        logging=LoggingConfig(every_steps=1),
        # the sync loop by default; `--pipeline.enabled` runs staleness 1 with decoupled PPO, which learns as much
        # as sync on this preset (experiments/async-equivalence/README.md)
        pipeline=AsyncConfig(staleness_threshold=1.0, use_rollout_log_probs=False),
    )
