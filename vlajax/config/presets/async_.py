"""Async RL presets (`python -m vlajax.train rl --preset NAME`; needs the `rl` command's dispatch
to `vlajax.rl.async_loop.run_async` when `pipeline.enabled`, see `vlajax.rl.command`).

- `rl-async-debug`: `rl-debug` through the pipeline: 2 env slots, staleness 1, streaming,
  partial rollout (one PPO epoch over one minibatch per update, as streaming requires).
- `rl-async-mlp-state`: the state-observation MLP task of `rl-mlp-state` with 4 slots of 16 envs,
  staleness 1, streaming and partial rollout (4 micro-batches per update).
"""

import dataclasses

from vlajax.config.schema import AsyncConfig, TrainConfig, get_config, register


def _async(base: str, output_dir: str, slots: int, **rl) -> TrainConfig:
    cfg = get_config(base)
    return dataclasses.replace(
        cfg, output_dir=output_dir,
        # streaming is the non-streaming update only without global advantage standardization
        rl=dataclasses.replace(cfg.rl, update_epochs=1, num_minibatches=1, micro_batches=slots,
                               normalize_advantages="none", **rl),
        pipeline=AsyncConfig(enabled=True, num_slots=slots, require_batches=slots, staleness_threshold=1.0,
                             streaming=True, partial_rollout=True, use_rollout_log_probs=False))


@register("rl-async-debug", "RL smoke through the async pipeline: 2 slots, staleness 1, streaming, partial")
def _rl_async_debug() -> TrainConfig:
    return _async("rl-debug", "runs/rl-async-debug", 2)


@register("rl-async-mlp-state", "PPO (state MLP, goal/press_button) through the async pipeline, 4 slots")
def _rl_async_mlp_state() -> TrainConfig:
    return _async("rl-mlp-state", "runs/rl-async-mlp-state", 4)
