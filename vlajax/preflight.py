"""Refusals before a command is imported, built or compiled (ConfigError): what depends on the device or on the
command, which the config alone cannot check. `vlajax.train.main` runs `preflight` for every command, and
`vlajax.libero.rl_train` for `rl --suite libero_*` (which `vlajax.train` dispatches before its own parse)."""

from __future__ import annotations

import dataclasses

from vlajax.config import ConfigError, TrainConfig


def preflight(cfg: TrainConfig, command: str = "", *, libero: bool = False) -> None:
    """Device- and command-dependent refusals, before the command is imported, built or compiled
    (ConfigError).

    Transformer Engine (`model.attention='te'`, `model.fp8='te'`) needs TE and a GPU. Joining
    the distributed job first keeps TE's import from starting the backend before it. `rl`
    refuses FP8 (its train states carry no FP8 collections; `vlajax.rl.setup.build` says so too).
    `data.grounding_fraction` is refused by every command but `sft`, the only one that reads it.
    `rl` on state observations (the MLP policy) refuses the `model.*` flags it does not read;
    `model.attention='cudnn'` needs a GPU (tests/foundation/test_every_value.py tries every value).
    `rl --suite libero_*` runs the same refusals after its own (`vlajax.libero.rl_train._check`) with
    `libero=True`: its policy is a VLA on LIBERO's workers, so the state-MLP check does not apply.
    """
    if command in ("smoke", "sft", "rl"):  # a fresh run (checkpoint.resume=false) over saved steps fails at a save
        cfg.checkpoint.check_fresh(cfg.output_dir)
    if command not in ("sft", "") and cfg.data.grounding_fraction > 0:
        raise ConfigError(f"data.grounding_fraction={cfg.data.grounding_fraction} is for sft (it mixes rendered "
                          f"frames into the SFT batches); the {command} command does not read it")
    if command == "rl" and cfg.model.fp8 == "flax":
        raise ConfigError("model.fp8='flax' is for sft: the RL train states carry no FP8 scale collections yet; "
                          "use model.fp8='none' for rl")
    wants = [f for f, v in (("model.attention", cfg.model.attention), ("model.fp8", cfg.model.fp8)) if v == "te"]
    if wants:
        from vlajax import distributed  # noqa: PLC0415 (jax only when needed)
        from vlajax.models.attention import te_available  # noqa: PLC0415

        distributed.initialize(cfg.distributed)
        if not te_available():
            raise ConfigError(f"{' and '.join(f + '=te' for f in wants)} needs Transformer Engine and a GPU (not "
                              "found here); use model.attention='xla' or 'auto', model.fp8='flax' or 'none'")
    if command == "rl" and cfg.pipeline.enabled:  # (here, not in the config: code builds configs in steps)
        _check_pipeline(cfg)
    if command == "rl" and cfg.env.obs_mode == "pixels" and not libero and not cfg.rl.init_from:
        _check_fresh_vla(cfg)  # (rl.init_from's head is the checkpoint's: check_checkpoints)
    if command == "rl" and cfg.env.obs_mode == "state" and not libero and (unread := _unread_by_mlp(cfg)):
        raise ConfigError(f"{', '.join(unread)}: env.obs_mode='state' trains the state MLP policy, which reads "
                          "only model.width, model.depth and model.action_horizon; drop the flag or use "
                          "env.obs_mode='pixels'")
    if cfg.model.attention == "cudnn":
        from vlajax import distributed  # noqa: PLC0415 (jax only when needed)

        distributed.initialize(cfg.distributed)
        import jax  # noqa: PLC0415

        if jax.default_backend() != "gpu":
            raise ConfigError(f"model.attention='cudnn' needs an NVIDIA GPU (this backend is "
                              f"{jax.default_backend()!r}); use model.attention='xla' or 'auto'")


def _check_fresh_vla(cfg: TrainConfig) -> None:
    """What `vlajax.rl.actors.vla_actor` would refuse once the fresh VLA is built (ConfigError)."""
    m = cfg.model
    if m.action_head == "flow" and m.flow_sampler == "ode":
        raise ConfigError("model.flow_sampler='ode' samples the flow head deterministically: RL needs the log-probs "
                          "of a stochastic sampler; use model.flow_sampler='flow_sde' or 'flow_noise' (or "
                          "model.action_head='tokens')")
    if cfg.rl.algo == "ppo" and cfg.rl.critic == "head" and m.value_head == "none":
        raise ConfigError("rl.algo='ppo' with rl.critic='head' reads the policy's value head, and "
                          "model.value_head='none' builds none: use model.value_head='prefix' or 'expert', or "
                          "rl.critic='privileged' (or rl.algo='grpo')")


def _check_pipeline(cfg: TrainConfig) -> None:
    """What the async `rl` loop would refuse only after compiling (ConfigError)."""
    p, rl = cfg.pipeline, cfg.rl
    if p.num_slots > 1 and rl.algo != "ppo":  # the env-slot rollout (vlajax.rl.async_workload)
        raise ConfigError(f"pipeline.num_slots={p.num_slots}: the slot rollout runs continuing envs (PPO with a "
                          "critic); GRPO's episodic groups run through collect: use pipeline.num_slots=1")
    if p.num_slots > 1 and cfg.env.num_envs % p.num_slots:
        raise ConfigError(f"env.num_envs={cfg.env.num_envs} does not split into pipeline.num_slots={p.num_slots}")
    if p.streaming and (rl.update_epochs, rl.num_minibatches) != (1, 1):
        raise ConfigError(f"pipeline.streaming needs rl.update_epochs=1 and rl.num_minibatches=1 (got "
                          f"{rl.update_epochs}, {rl.num_minibatches}): one update per global batch, started on its "
                          "first micro-batch")
    if p.streaming and rl.micro_batches != p.require_batches:
        raise ConfigError(f"pipeline.streaming needs rl.micro_batches=pipeline.require_batches (got "
                          f"{rl.micro_batches} vs {p.require_batches}): each micro-batch of the update is one that "
                          "arrives")


def _unread_by_mlp(cfg: TrainConfig) -> list[str]:
    """`model.*` flags set away from their defaults that the state MLP policy (`rl`, env.obs_mode='state') ignores."""
    read = {"width", "depth", "action_horizon"}
    default = type(cfg.model)()
    return [f"model.{f.name}={getattr(cfg.model, f.name)!r}" for f in dataclasses.fields(cfg.model)
            if f.name not in read and getattr(cfg.model, f.name) != getattr(default, f.name)]
