"""Refusals before a command is imported, built or compiled (ConfigError): what depends on the device or on the
command, which the config alone cannot check. `vlajax.train.main` runs `preflight` for every command and suite
(a LIBERO suite's own refusals: `vlajax.libero.checks`)."""

from __future__ import annotations

import dataclasses
import os
import typing

from vlajax.config.schema import ConfigError, DataConfig, TrainConfig
from vlajax.libero import checks as libero_checks
from vlajax.libero.suites import is_libero


def preflight(cfg: TrainConfig, command: str = "", *, flags: list[str] | None = None) -> None:
    """Device- and command-dependent refusals, before the command is imported, built or compiled
    (ConfigError).

    Transformer Engine (`model.attention='te'`, `model.fp8='te'`) needs TE and a GPU. Joining
    the distributed job first keeps TE's import from starting the backend before it. `rl`
    refuses FP8 (its train states carry no FP8 collections; `vlajax.rl.setup.build` says so too).
    `data.grounding_fraction` is refused by every command but `sft`, the only one that reads it.
    `rl` on state observations (the MLP policy) refuses the `model.*` flags it does not read;
    `model.attention='cudnn'` needs a GPU (tests/foundation/test_every_value.py tries every value).
    A LIBERO suite (`env.suite` 'libero_*'): `eval`, `rl` and `sft` read the fields of `LIBERO_READS` and refuse
    what `vlajax.libero.checks` does (its policy is a VLA on LIBERO's workers, so the state-MLP checks do not apply).
    `flags` (the command line's overrides, after the command's aliases): each must be a field the command
    reads on that suite (`check_flags`). The checkpoint directories the command reads must hold what it needs
    (`check_checkpoints`).
    """
    libero = is_libero(cfg.env.suite) and command in LIBERO_READS
    if command in ("smoke", "sft", "rl"):  # a fresh run (checkpoint.resume=false) over saved steps fails at a save
        cfg.checkpoint.check_fresh(cfg.output_dir)
    if command not in ("sft", "") and cfg.data.grounding_fraction > 0:
        raise ConfigError(f"data.grounding_fraction={cfg.data.grounding_fraction} is for sft (it mixes rendered "
                          f"frames into the SFT batches); the {command} command does not read it")
    if flags is not None:
        check_flags(cfg, command, flags)
    if command == "demos" and not is_libero(cfg.env.suite):
        _check_tabletop_demos(cfg)
    if libero:
        libero_checks.check(cfg, command)
    check_checkpoints(cfg, command, libero=libero)
    if command == "rl" and cfg.model.fp8 == "flax":
        raise ConfigError("model.fp8='flax' is for sft: the RL train states carry no FP8 scale collections yet; "
                          "use model.fp8='none' for rl")
    wants = [f for f, v in (("model.attention", cfg.model.attention), ("model.fp8", cfg.model.fp8)) if v == "te"]
    if wants:
        from vlajax.models.attention import te_available  # noqa: PLC0415
        from vlajax.training import distributed  # noqa: PLC0415 (jax only when needed)

        distributed.initialize(cfg.distributed)
        if not te_available():
            raise ConfigError(f"{' and '.join(f + '=te' for f in wants)} needs Transformer Engine and a GPU (not "
                              "found here); use model.attention='xla' or 'auto', model.fp8='flax' or 'none'")
    if command == "rl" and cfg.pipeline.enabled:  # (here, not in the config: code builds configs in steps)
        _check_pipeline(cfg)
    if command == "rl" and cfg.env.obs_mode == "pixels" and not libero and not cfg.rl.init_from:
        _check_fresh_vla(cfg)  # (rl.init_from's head is the checkpoint's: check_checkpoints)
    if command == "rl" and cfg.env.obs_mode == "state" and not libero and cfg.rl.critic == "privileged":
        raise ConfigError("rl.critic='privileged' is for pixel policies (env.obs_mode='pixels'): the state MLP's own "
                          "critic already reads the privileged state; use rl.critic='head'")
    if command == "rl" and cfg.env.obs_mode == "state" and not libero and (unread := _unread_by_mlp(cfg)):
        raise ConfigError(f"{', '.join(unread)}: env.obs_mode='state' trains the state MLP policy, which reads "
                          "only model.width, model.depth and model.action_horizon; drop the flag or use "
                          "env.obs_mode='pixels'")
    evaluates = command in ("rl", "eval") or (command == "sft" and cfg.sft.eval_every != -1)
    if cfg.env.physics_impl == "warp" and evaluates:
        _check_warp_physics(cfg, command)
    if cfg.model.attention == "cudnn":
        from vlajax.training import distributed  # noqa: PLC0415 (jax only when needed)

        distributed.initialize(cfg.distributed)
        import jax  # noqa: PLC0415

        if jax.default_backend() != "gpu":
            raise ConfigError(f"model.attention='cudnn' needs an NVIDIA GPU (this backend is "
                              f"{jax.default_backend()!r}); use model.attention='xla' or 'auto'")


# DataConfig fields only LIBERO's recorder reads (vlajax.libero.demos): the tabletop `demos` needs their defaults
DEMOS_LIBERO_ONLY = ("demo_workers", "demo_image_size", "demo_max_steps", "demo_keep_failures")


def _check_tabletop_demos(cfg: TrainConfig) -> None:
    """What tabletop `demos` (vlajax.data.demos) refuses only after its imports: LIBERO-only fields, and
    data.demo_target_swap off the object suite (task names are 'suite/name': vlajax.envs.registry.SUITES)."""
    defaults = DataConfig()
    for name in DEMOS_LIBERO_ONLY:
        if getattr(cfg.data, name) != getattr(defaults, name):
            raise ConfigError(f"data.{name} is for demos on a LIBERO suite (--suite libero_spatial), "
                              f"not env.suite={cfg.env.suite!r}")
    picked = cfg.env.task or f"{cfg.env.suite}/"
    if cfg.data.demo_target_swap and not picked.startswith("object/"):
        raise ConfigError("data.demo_target_swap is for the object suite (cube 0 is the colour-named target); got "
                          + (f"env.task={cfg.env.task!r}" if cfg.env.task else f"env.suite={cfg.env.suite!r}")
                          + "; use env.suite='object' or an object/* task")


def _check_warp_physics(cfg: TrainConfig, command: str) -> None:
    """MJX-Warp (GPU pods, docs/envs.md) off a GPU: the episodes' done / reset merges of its Data fail there (a
    traceback after the first compile), so refuse it first."""
    from vlajax.training import distributed  # noqa: PLC0415 (jax only when needed)

    distributed.initialize(cfg.distributed)
    import jax  # noqa: PLC0415

    if jax.default_backend() != "gpu":
        raise ConfigError(f"env.physics_impl='warp' (MJX-Warp) runs {command}'s episodes only on an NVIDIA GPU (this "
                          f"backend is {jax.default_backend()!r}); use env.physics_impl='jax' (MJX), 'c' or 'auto'")


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


def _check_placement(cfg: TrainConfig) -> None:
    """A disaggregated / hybrid placement must split this host's devices rollout:train (`vlajax.pipeline.placement`,
    which the async loop builds only after its imports and set-up)."""
    p = cfg.pipeline
    from vlajax.training import distributed  # noqa: PLC0415 (jax only when needed)

    distributed.initialize(cfg.distributed)
    import jax  # noqa: PLC0415

    from vlajax.pipeline.placement import rollout_share  # noqa: PLC0415

    n = jax.local_device_count()
    here = f"pipeline.placement={p.placement!r} splits this host's {n} {jax.default_backend()} device(s)"
    hint = "; use pipeline.placement='colocated'" + (" (one device cannot be split)" if n == 1 else "")
    try:
        n_roll = rollout_share(n, p.placement_ratio)
    except ConfigError as e:
        raise ConfigError(f"{here} by pipeline.placement_ratio={p.placement_ratio!r}: {e}{hint}") from None
    if p.placement == "disaggregated" and n_roll == n:
        raise ConfigError(f"{here} by pipeline.placement_ratio={p.placement_ratio!r} and leaves none for "
                          f"training{hint}")


def _check_pipeline(cfg: TrainConfig) -> None:
    """What the async `rl` loop would refuse only after compiling (ConfigError)."""
    p, rl = cfg.pipeline, cfg.rl
    if p.placement != "colocated":
        _check_placement(cfg)
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


# ------------------------------------------------------------------------------------------
# Flags a command does not read
# ------------------------------------------------------------------------------------------

# What each command reads of the config: a dotted field ('seed', 'model.flow_x1'), or a prefix ending in '.' (a
# whole section) or '_' (a group of fields: 'sft.eval_'). A flag the user passes that no entry of its command covers
# is refused (`check_flags`): the command would run as if it were not there. Presets may set any field; only the
# command line's flags are checked.
READS: dict[str, tuple[str, ...]] = {
    # the foundation check: a toy student on the mesh, SFT's optimizer fields, checkpoints and logs; the model's
    # head counts only for the config's mesh.tp divisibility check
    "smoke": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.num_heads", "model.num_kv_heads",
              "data.batch_size", "sft.num_steps", "sft.learning_rate", "sft.warmup_steps", "sft.end_lr_fraction",
              "sft.weight_decay", "sft.grad_clip", "checkpoint.", "logging.tensorboard", "logging.every_steps",
              "logging.progress", "logging.verbose", "distributed."),
    # scripted episodes of the env into a dataset (vlajax.data.demos)
    "demos": ("seed", "output_dir", "compilation_cache_dir", "env.", "data.dataset_dir", "data.episodes_per_task",
              "data.demo_", "data.video", "logging.progress", "logging.verbose", "logging.heartbeat_s"),
    "sft": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.", "env.", "data.", "sft.",
            "checkpoint.", "logging.", "distributed."),
    # (data.camera_map: a pi policy from fresh weights puts the env cameras in openpi's image slots with it)
    "rl": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.", "env.", "rl.", "pipeline.",
           "checkpoint.", "logging.", "distributed.", "data.camera_map"),
    # a checkpoint's policy (its model from policy.json; the sampling fields may be changed:
    # vlajax.evaluation.closed_loop.SAMPLING_FIELDS) on the env, or a policy server
    "eval": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.flow_x1", "model.num_denoise_steps",
             "env.", "sft.eval_", "checkpoint.dir", "logging.verbose", "logging.eval_out", "logging.overwrite"),
}
# (command, prefix) -> the boolean field without which that command does not read the prefix's other fields
READ_WHEN: dict[tuple[str, str], str] = {("rl", "pipeline."): "pipeline.enabled"}


def config_fields(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted field of the config ('seed', 'model.width', ...), recursively."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += config_fields(hints[f.name], prefix + f.name + ".")
        else:
            out.append(prefix + f.name)
    return out


def passed_fields(args: list[str]) -> list[tuple[str, str]]:
    """(flag as given, dotted field) of each config flag in `args` (after a command's aliases):
    `--rl.group-size 4` -> ('--rl.group-size', 'rl.group_size'); `--pipeline.no-enabled` -> pipeline.enabled."""
    known = set(config_fields())
    out = []
    for a in args:
        if not a.startswith("--"):
            continue
        flag = a.partition("=")[0]
        head, _, last = flag[2:].replace("-", "_").rpartition(".")
        field = (head + "." if head else "") + last
        if field not in known and last.startswith("no_"):
            field = (head + "." if head else "") + last[3:]
        if field in known:
            out.append((flag, field))
    return out


LIBERO_POOL = ("libero.tasks", "libero.workers", "libero.envs_per_worker", "libero.max_steps", "libero.num_steps_wait",
               "libero.env_seed", "libero.camera_size", "libero.hang_timeout_s", "libero.gl", "libero.backend",
               "libero.ray_address", "libero.bind", "libero.advertise", "libero.cpus_per_worker",
               "libero.ray_libero_venv", "libero.ray_repo", "libero.episodes_per_task")
# What eval / rl / sft read with a LIBERO suite (`env.suite` 'libero_*'): entries as in READS, and '-entry' for
# what a wider entry covers but the command does not read there; the longest entry that covers a field decides.
LIBERO_READS: dict[str, tuple[str, ...]] = {
    # a policy (served in-process, or a server) or the scripted expert on LIBERO's fixed initial states
    "eval": ("env.suite", "checkpoint.dir", "sft.eval_policy_server", "logging.verbose", "logging.eval_out",
             "libero.", "-libero.train_inits"),
    # async GRPO on LIBERO's workers from rl.init_from (vlajax.libero.rl_train); its evaluations: libero.*
    "rl": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.", "env.suite", "rl.",
           "-rl.eval_episodes_per_task", "-rl.eval_seed", "pipeline.", "checkpoint.", "logging.", "distributed.",
           *LIBERO_POOL, "libero.train_inits"),
    # on LIBERO demos (openpi's layout); no in-loop evaluation (vlajax.libero.checks)
    "sft": ("name", "seed", "output_dir", "compilation_cache_dir", "mesh.", "model.", "env.suite", "data.",
            "-data.grounding_fraction", "sft.", "-sft.eval_", "sft.eval_every", "checkpoint.", "logging.",
            "distributed."),
}


# what a LIBERO suite takes instead of a tabletop field (check_flags' hint)
LIBERO_INSTEAD = {"seed": "--libero.env-seed", "env.num_envs": "--libero.workers, --libero.envs-per-worker",
                  "env.image_size": "--libero.camera-size", "env.episode_length": "--libero.max-steps",
                  "env.robustness": "--robustness (libero.robustness)", "rl.eval_seed": "--libero.env-seed",
                  "sft.eval_episodes_per_task": "--episodes-per-task (libero.episodes_per_task)",
                  "rl.eval_episodes_per_task": "--libero.episodes-per-task", "env.task": "--libero.tasks",
                  "sft.eval_replan_steps": "--replan-steps (libero.replan_steps)",
                  "libero.replan_steps": "the chunk steps executed per request are --rl.chunk-steps"}


def _covers(entry: str, field: str) -> bool:
    return field == entry or (entry[-1] in "._" and field.startswith(entry))


def _covering(command: str, field: str, libero: bool = False) -> str | None:
    """The entry of the command's table (READS, or LIBERO_READS with `libero`) that covers `field`, or None (also
    when the deciding entry is an exclusion)."""
    if libero:
        hits = [e for e in LIBERO_READS[command] if _covers(e.lstrip("-"), field)]
        best = max(hits, key=lambda e: len(e.lstrip("-")), default=None)
        return None if best is None or best.startswith("-") else best
    for r in READS[command]:
        if _covers(r, field):
            return r
    return None


def _libero(command: str, cfg: TrainConfig | None) -> bool:
    return cfg is not None and command in LIBERO_READS and is_libero(cfg.env.suite)


def reads(command: str, field: str, cfg: TrainConfig | None = None) -> bool:
    """Whether `command` reads config field `field` (with `cfg`: on its suite, and under the conditions of
    READ_WHEN)."""
    libero = _libero(command, cfg)
    entry = _covering(command, field, libero)
    if entry is None:
        return False
    cond = None if libero else READ_WHEN.get((command, entry))
    if cond is None or cfg is None or field == cond:
        return True
    section, _, name = cond.partition(".")
    return bool(getattr(getattr(cfg, section), name))


def check_flags(cfg: TrainConfig, command: str, args: list[str]) -> None:
    """ConfigError naming the flags of `args` that `command` does not read on `cfg`'s suite (READS / LIBERO_READS,
    READ_WHEN), with who reads them."""
    if command not in READS:
        return
    unread = [(flag, f) for flag, f in passed_fields(args) if not reads(command, f, cfg)]
    if not unread:
        return
    libero = _libero(command, cfg)
    notes = []
    for flag, f in unread:
        entry = _covering(command, f, libero)
        if entry is not None:  # read only under a condition
            cond = READ_WHEN[(command, entry)]
            notes.append(f"{flag} is read only with --{cond.replace('_', '-')}")
            continue
        if libero and f.startswith("libero."):
            by = [c for c in LIBERO_READS if _covering(c, f, True)]
            instead = f" ({command}: {LIBERO_INSTEAD[f]})" if f in LIBERO_INSTEAD else ""
            notes.append((f"{flag} is read by {' / '.join(by)}" if by else f"{flag} by no command") + instead)
            continue
        if libero:  # a tabletop field
            by = [c for c in READS if reads(c, f)]
            where = f"read by {' / '.join(by)} on the tabletop suites" if by else "read by no command"
            instead = LIBERO_INSTEAD.get(f, "the --libero.* fields")
            notes.append(f"{flag} is {where}; with a LIBERO suite the episodes run on LIBERO's workers: {instead}")
            continue
        by = [c for c in LIBERO_READS if _covering(c, f, True)] if f.startswith("libero.") else []
        if by:
            notes.append(f"{flag} is read by {' / '.join(by)} with a LIBERO suite (--suite libero_*), not with "
                         f"{cfg.env.suite!r}")
            continue
        by = [c for c in READS if c != command and reads(c, f)]
        notes.append(f"{flag} is read by {' / '.join(by)}" if by else f"{flag} by no command")
    flags = ", ".join(flag for flag, _ in unread)
    on = f" with the LIBERO suite {cfg.env.suite}" if libero else ""
    raise ConfigError(f"{flags}: the {command} command does not read {'it' if len(unread) == 1 else 'them'}{on} "
                      f"({'; '.join(notes)}); drop {'it' if len(unread) == 1 else 'them'}")


# ------------------------------------------------------------------------------------------
# What a command's checkpoint directories hold
# ------------------------------------------------------------------------------------------


def _import_hint(ident) -> str:
    """The import command for a raw openpi checkpoint (its config guessed from its family and asset ids)."""
    fam = ident.openpi_family or "pi05"
    robots = [r for r in ("libero", "droid", "aloha") if any(r in a for a in ident.asset_ids)]
    config = f"{fam}_{robots[0]}" if robots else f"<openpi config, e.g. {fam}_libero>"
    return (f"import it first: python -m vlajax.policies.import_openpi --checkpoint {ident.directory} --config "
            f"{config} --out <new dir> (the size is read from its shapes), then pass <new dir>")


def _not_a_policy(flag: str, ident, takes: str) -> None:
    """ConfigError for a directory that holds no usable policy for `flag` (raw openpi, a run dir, nothing)."""
    named = f"{flag}{' ' if flag.startswith('--') else '='}{ident.directory}"
    if ident.kind == "openpi-raw":
        raise ConfigError(f"{named}: {ident.describe()}; {_import_hint(ident)}")
    if ident.kind == "run-dir":
        raise ConfigError(f"{named}: {ident.describe()}; pass {os.path.join(ident.directory, 'checkpoints')}")
    if ident.kind in ("missing", "empty", "unknown"):
        raise ConfigError(f"{named}: {ident.describe()}; {flag} takes {takes}")


def _model_diffs(there, here) -> list[str]:
    """`model.<field>: <there> there, <here> here` for every model field but the label that differs."""
    return [f"model.{f.name}: {getattr(there, f.name)!r} there, {getattr(here, f.name)!r} here"
            for f in dataclasses.fields(here) if f.name != "name" and getattr(there, f.name) != getattr(here, f.name)]


def _same_state(saved: TrainConfig, cfg: TrainConfig, cameras: tuple[str, ...]) -> bool:
    """Whether the train states of `saved` and `cfg` have the same leaves and shapes (traced, not compiled)."""
    import jax  # noqa: PLC0415

    from vlajax.policies.run_files import init_fn  # noqa: PLC0415

    def shapes(c):  # by path: the state's static fields (its optimizer's functions) never compare equal
        tree = jax.eval_shape(init_fn(c, cameras), jax.random.key(0))
        return {jax.tree_util.keystr(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}

    try:
        return shapes(saved) == shapes(cfg)
    except ValueError:  # one side does not build at all (it says so when built)
        return False


def _check_sft_resume(cfg: TrainConfig, own: str) -> None:
    """sft resuming into `own`: it must hold an SFT run whose train state this model restores into."""
    from vlajax.policies.run_files import config_from_dict, identify  # noqa: PLC0415

    ident = identify(own)
    new = "pass a new --output-dir (or --checkpoint.dir) for a new run"
    if ident.kind in ("rl", "async-rl"):
        raise ConfigError(f"{own} holds {ident.describe()}, which sft would resume: {new}; that run continues with "
                          f"`python -m vlajax.train rl{' --pipeline.enabled' if ident.kind == 'async-rl' else ''}` "
                          "and its --output-dir")
    if ident.kind == "openpi-import":
        raise ConfigError(f"{own} holds {ident.describe()}, which sft would resume: {new} with "
                          f"--sft.init-from {own} to fine-tune it")
    if ident.kind != "sft":
        return
    with open(os.path.join(own, "config.json")) as f:
        import json  # noqa: PLC0415

        saved = config_from_dict(json.load(f))
    diffs = _model_diffs(saved.model, cfg.model)
    ema = (saved.sft.ema_decay > 0) != (cfg.sft.ema_decay > 0)
    if ema:
        diffs.append(f"sft.ema_decay: {saved.sft.ema_decay} there, {cfg.sft.ema_decay} here (an EMA in the state or "
                     "not)")
    if not diffs or (not ema and _same_state(saved, cfg, ident.cameras)):
        return
    raise ConfigError(f"{own} holds {ident.describe()}, which sft would resume, but its train state does not fit "
                      f"this command's ({'; '.join(diffs[:3])}{'; ...' if len(diffs) > 3 else ''}): {new}, or resume "
                      "it with its own model flags")


def _check_sft_source(cfg: TrainConfig) -> None:
    """sft.init_from: an SFT run or an imported openpi checkpoint of this model's head and family."""
    from vlajax.policies.run_files import identify  # noqa: PLC0415

    ident = identify(cfg.sft.init_from)
    _not_a_policy("sft.init_from", ident, "an SFT run's checkpoints or an imported openpi checkpoint")
    if ident.kind in ("rl", "async-rl"):
        raise ConfigError(f"sft.init_from={ident.directory}: {ident.describe()}; sft.init_from takes an SFT run's "
                          "checkpoints or an imported openpi checkpoint (an RL run's train state holds its env's "
                          "too): start from the SFT run it began from, or evaluate / serve this one")
    m, here = ident.model, cfg.model
    if (m.family, m.action_head) != (here.family, here.action_head):
        want = (f"--model.action-head {m.action_head}" if m.family == here.family else
                f"a {m.family} preset (--preset {m.family}-dummy or {m.family})")
        raise ConfigError(f"sft.init_from={ident.directory}: {ident.describe()}; this sft's model is "
                          f"{here.family} with the {here.action_head} head, whose weights do not fit: {want}")


def _check_rl_resume(cfg: TrainConfig, own: str) -> None:
    """rl resuming into `own`: it must hold a run of this loop (sync / async)."""
    from vlajax.policies.run_files import identify  # noqa: PLC0415

    ident = identify(own)
    want = "async-rl" if cfg.pipeline.enabled else "rl"
    if ident.kind not in ("sft", "openpi-import", "rl", "async-rl") or ident.kind == want:
        return
    new = "pass a new --output-dir (or --checkpoint.dir) for a new run"
    if ident.kind in ("sft", "openpi-import"):
        raise ConfigError(f"{own} holds {ident.describe()}, which rl would resume as its own: {new} and start from it "
                          f"with --rl.init-from {own}")
    flag = "--pipeline.enabled" if ident.kind == "async-rl" else "--pipeline.no-enabled"
    raise ConfigError(f"{own} holds {ident.describe()}, which this {'async' if cfg.pipeline.enabled else 'sync'} rl "
                      f"would resume (their states differ): resume it with {flag}, or {new}")


def _check_rl_source(cfg: TrainConfig, libero: bool) -> None:
    """rl.init_from: an SFT run (or an imported openpi policy) whose head this preset's RL samples."""
    from vlajax.policies.run_files import identify  # noqa: PLC0415

    ident = identify(cfg.rl.init_from)
    if libero:  # LIBERO's loop takes any policy on LIBERO's keys and checks it itself (vlajax.libero.rl_train)
        if ident.kind == "openpi-raw":
            _not_a_policy("rl.init_from", ident, "")
        return
    _not_a_policy("rl.init_from", ident, "an SFT run's checkpoints (<run>/checkpoints)")
    d, what = ident.directory, ident.describe()
    if ident.kind in ("rl", "async-rl"):
        raise ConfigError(f"rl.init_from={d}: {what}; rl.init_from takes an SFT run's checkpoints: to continue "
                          "that run, rerun its command with its --output-dir (it resumes)")
    if ident.robot:
        from vlajax.config.openpi import ROBOTS  # noqa: PLC0415

        dims = ROBOTS[ident.robot].action_dims if ident.robot in ROBOTS else "its"
        raise ConfigError(f"rl.init_from={d}: {what}: it answers in the {ident.robot} robot's {dims}-dim actions, not "
                          f"this env's; fine-tune it on the env's data first (sft --sft.init-from {d}, with "
                          "--sft.delta-actions off if it learned delta actions), or run RL on its robot (rl --preset "
                          "rl-pi05-libero --suite libero_*, docs/libero-training.md)")
    m, here = ident.model, cfg.model
    if m.action_head == "flow" and here.flow_sampler == "ode":
        raise ConfigError(f"rl.init_from={d}: {what}; --preset {cfg.name} samples a flow head with "
                          "model.flow_sampler='ode', which has no log-probs for RL: use --preset rl-grpo-flow or "
                          "rl-ppo-flow (or --model.flow-sampler flow_sde)")
    if m.action_head == "tokens" and here.action_head == "flow" and here.flow_sampler != "ode":
        raise ConfigError(f"rl.init_from={d}: {what}; --preset {cfg.name} is set up for a flow head "
                          f"(model.flow_sampler={here.flow_sampler!r}): use --preset rl-grpo-tokens")


def _check_eval_checkpoint(cfg: TrainConfig, libero: bool = False) -> None:
    """eval --checkpoint: a policy (any run's checkpoints or an imported one) whose robot keys the suite has (a
    LIBERO suite: its workers send openpi's LIBERO keys to whatever the policy reads, `vlajax.serve`)."""
    from vlajax.policies.run_files import identify  # noqa: PLC0415

    directory = cfg.checkpoint.dir if libero else cfg.checkpoint.directory(cfg.output_dir)
    parent = os.path.dirname(directory)
    if os.path.basename(directory).isdigit() and os.path.isfile(os.path.join(parent, "policy.json")):
        directory = parent  # one step of a run: <dir>/<step>
    ident = identify(directory)
    _not_a_policy("--checkpoint", ident, "a run's checkpoints (<run>/checkpoints) or an imported openpi checkpoint")
    if ident.robot and not libero:  # (the tabletop suites)
        from vlajax.config.openpi import ROBOTS  # noqa: PLC0415

        dims = ROBOTS[ident.robot].action_dims if ident.robot in ROBOTS else "its"
        where = ("evaluate it on LIBERO: eval --checkpoint {d} --suite libero_spatial (docs/libero.md)"
                 if ident.robot == "libero" else f"no simulator here runs the {ident.robot} robot")
        raise ConfigError(f"--checkpoint {ident.directory}: {ident.describe()}: it reads the {ident.robot} robot's "
                          f"observation keys and answers in its {dims}-dim actions; the tabletop suite "
                          f"{cfg.env.suite!r} has neither: {where.format(d=ident.directory)}, or fine-tune it on the "
                          f"env's data first (sft --sft.init-from {ident.directory} --sft.delta-actions off)")


def check_checkpoints(cfg: TrainConfig, command: str, *, libero: bool = False) -> None:
    """The checkpoint directories `command` reads are what it needs (`vlajax.policies.run_files.identify`: the kind of
    run that wrote one, its head, its robot keys), before anything is built: one ConfigError naming the
    directory, what it holds and the command or preset that fits."""
    from vlajax.config.run import checkpoint_steps  # noqa: PLC0415

    own = cfg.checkpoint.directory(cfg.output_dir)
    resuming = command in ("sft", "rl") and cfg.checkpoint.resume and bool(checkpoint_steps(own))
    if command == "sft":
        if resuming:
            _check_sft_resume(cfg, own)
        if cfg.sft.init_from:
            _check_sft_source(cfg)
    elif command == "rl":
        if resuming and not libero:  # (LIBERO's loop is always the async one)
            _check_rl_resume(cfg, own)
        if cfg.rl.init_from:
            _check_rl_source(cfg, libero)
    elif command == "eval" and not cfg.sft.eval_policy_server and not (libero and not cfg.checkpoint.dir):
        _check_eval_checkpoint(cfg, libero)  # (a LIBERO eval reads --checkpoint DIR only; --expert reads none)
