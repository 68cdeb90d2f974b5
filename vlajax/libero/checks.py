"""What `eval`, `rl` and `sft` refuse with a LIBERO suite before anything starts (ConfigError; `vlajax.preflight`
runs `check` after the flags a command does not read are refused).

    check(cfg, "eval")   # the suite's spelling, the pool backend, one policy, LIBERO-PRO axes, the LIBERO venv
    check(cfg, "rl")     # GRPO from rl.init_from, the worker pool as the one rollout lane, the LIBERO venv
    check(cfg, "sft")    # no in-loop evaluation (SFT's evaluates on the tabletop envs)

`pool_backend(cfg)` is the `--libero.*` pool settings as the pool takes them.
"""

from __future__ import annotations

import os

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.libero import protocol as P
from vlajax.libero.backend import PoolBackend
from vlajax.libero.launch import LiberoEnvMissing, libero_python
from vlajax.libero.suites import PRO_AXES, check_suite

__all__ = ["check", "pool_backend", "robustness_axes"]


def pool_backend(cfg: TrainConfig) -> PoolBackend:
    """Where the workers run and where they find this process's endpoint (`--libero.backend`, ...)."""
    lib = cfg.libero
    return PoolBackend(lib.backend, lib.ray_address, lib.bind, lib.advertise, lib.cpus_per_worker,
                       lib.ray_libero_venv, lib.ray_repo)


def robustness_axes(spec: str) -> tuple[str, ...]:
    """`libero.robustness` -> LIBERO-PRO axes ('' -> none, 'all' -> every one); ValueError for an unknown axis."""
    if not spec:
        return ()
    if spec == "all":
        return PRO_AXES
    axes = tuple(a.strip() for a in spec.split(",") if a.strip())
    bad = [a for a in axes if a not in PRO_AXES]
    if bad or not axes:
        raise ValueError(f"--robustness {spec!r}: LIBERO-PRO's axes are {', '.join(PRO_AXES)} (or 'all')")
    return axes


def check(cfg: TrainConfig, command: str) -> None:
    """ConfigError (one line) for what `command` cannot do on the LIBERO suite `cfg.env.suite`."""
    try:
        check_suite(cfg.env.suite)
        pool_backend(cfg).check()  # (ray: one TCP connection to the cluster's address)
        if not cfg.libero.max_steps:
            P.max_steps_for(cfg.env.suite)
        if command == "eval":
            _check_eval(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if command == "rl":
        _check_rl(cfg)
    if command == "sft" and cfg.sft.eval_every != -1:
        raise ConfigError(f"sft.eval_every={cfg.sft.eval_every} with the LIBERO suite {cfg.env.suite}: SFT's in-loop "
                          "evaluation runs the tabletop envs; set --sft.eval-every -1 and evaluate the checkpoint "
                          f"with `eval --suite {cfg.env.suite} --checkpoint <output_dir>/checkpoints`")
    if command in ("eval", "rl"):
        try:
            libero_python()
        except LiberoEnvMissing as e:
            raise ConfigError(str(e)) from None


def _check_eval(cfg: TrainConfig) -> None:
    lib, ckpt, server = cfg.libero, cfg.checkpoint.dir, cfg.sft.eval_policy_server
    if bool(ckpt) + bool(server) + lib.expert != 1:
        raise ValueError("give exactly one of --checkpoint DIR (served in-process), --policy-server ws://... and "
                         "--expert")
    if lib.expert and not cfg.env.suite.startswith("libero_spatial"):
        raise ValueError(f"--expert: the scripted expert knows libero_spatial's tasks only, not {cfg.env.suite}")
    if ckpt and not os.path.isdir(os.path.expanduser(ckpt)):
        raise ValueError(f"--checkpoint {ckpt}: not a directory")
    if server and not server.startswith(("ws://", "wss://")):
        raise ValueError(f"--policy-server {server!r}: must start with ws:// or wss://")
    robustness_axes(lib.robustness)


def _check_rl(cfg: TrainConfig) -> None:
    if cfg.rl.algo != "grpo":
        raise ConfigError(f"rl.algo={cfg.rl.algo!r}: RL on LIBERO workers runs GRPO (the episodes of a group share an "
                          "initial state; LIBERO's reward is its sparse success): --rl.algo grpo")
    if not cfg.rl.init_from:
        raise ConfigError("RL on LIBERO needs --rl.init-from: a policy directory that reads openpi's LIBERO keys (an "
                          "SFT run on LIBERO demos, or `python -m vlajax.policies.import_openpi --config "
                          "pi05_libero ...`'s output)")
    p = cfg.pipeline
    if p.num_slots != 1 or p.placement != "colocated":
        raise ConfigError("RL on LIBERO: the worker pool is the rollout lane (pipeline.num_slots=1, colocated); "
                          "scale with --libero.workers / --libero.envs-per-worker")
