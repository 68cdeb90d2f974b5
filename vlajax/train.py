"""`python -m vlajax.train COMMAND [--preset NAME] [--section.field VALUE ...]`.

Commands run one phase of the VLA workflow on the config of a preset, with any field
overridden from the command line (tyro; `COMMAND --help` lists every field with its comment).
Every command validates the config and the device mesh before anything compiles, so a bad
preset name or a mesh that does not fit the devices exits non-zero with a one-line reason.

Multi-host: run the same command on every host; set `--distributed.coordinator-address`,
`--distributed.num-processes`, `--distributed.process-id` (or rely on SLURM / `JAX_COORDINATOR_ADDRESS`
auto-detection, see `vlajax.training.distributed`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import sys
import traceback
import typing
from collections.abc import Callable

import tyro

from vlajax.config.help import command_help, fields_help
from vlajax.config.schema import ConfigError, TrainConfig, get_config, parse_errors, preset_descriptions
from vlajax.libero.suites import check_suite, is_libero, looks_like_libero
from vlajax.preflight import preflight, reads

PROG = "python -m vlajax.train"
# Booleans are flags, as in every vlajax tool (`vlajax.shared.cli`): `--pipeline.enabled` / `--pipeline.no-enabled`.
# The old value spelling (`--pipeline.enabled true`, `--checkpoint.resume=false`) is still accepted with a
# deprecation warning (`_legacy_bools`); docs, tests and notebooks use the flags.
_TYRO_CONFIG = ()
DEFAULT_PRESET = "debug"


@dataclasses.dataclass(frozen=True)
class Command:
    description: str
    target: str  # "module:function" taking a TrainConfig and returning an exit code
    aliases: tuple[tuple[str, str], ...] = ()  # short flags rewritten to config fields before tyro
    bare: tuple[tuple[str, str], ...] = ()  # short flags that may stand alone: (flag, the value they then take)
    libero_target: str = ""  # "module:function" run instead when env.suite is a LIBERO suite (its worker processes)
    libero_aliases: tuple[tuple[str, str], ...] = ()  # with a LIBERO suite: short flags read before `aliases`


SUITE = (("--suite", "--env.suite"), ("--libero.suite", "--env.suite"))
# eval's short flags for LIBERO's episodes (docs/libero.md); with a tabletop suite they name libero.* fields,
# which preflight refuses there in one line
LIBERO_EVAL = tuple((f"--{name}", f"--libero.{name}") for name in (
    "tasks", "workers", "envs-per-worker", "replan-steps", "num-steps-wait", "max-steps", "render", "video",
    "no-video", "hang-timeout-s", "gl", "expert", "no-expert", "camera-size"))


COMMANDS: dict[str, Command] = {
    "smoke": Command(
        "foundation end-to-end check: sharded init, jitted steps, checkpoint, resume, logs", "vlajax.sft.smoke:run"
    ),
    "demos": Command("generate scripted demonstrations as a LeRobot v3.0 dataset", "vlajax.data.demos:run",
                     (*SUITE, ("--episodes-per-task", "--data.episodes-per-task"),
                      ("--out", "--data.dataset-dir")), libero_target="vlajax.libero.demos:command"),
    "sft": Command("supervised fine-tuning on demonstrations", "vlajax.sft.loop:run", SUITE),
    "rl": Command("reinforcement learning (PPO / GRPO, sync or async; a LIBERO suite: async GRPO on its workers)",
                  "vlajax.rl.command:run", SUITE, libero_target="vlajax.libero.rl_train:command"),
    "eval": Command("closed-loop evaluation in the simulator (a checkpoint, or --policy-server ws://HOST:PORT; "
                    "--robustness [SPEC]: per perturbation axis and level; a LIBERO suite: its fixed initial states "
                    "on worker processes)",
                    "vlajax.evaluation.robustness:eval_command",
                    (("--checkpoint", "--checkpoint.dir"), *SUITE,
                     ("--episodes-per-task", "--sft.eval-episodes-per-task"),
                     ("--policy-server", "--sft.eval-policy-server"), ("--robustness", "--env.robustness"),
                     ("--out", "--logging.eval-out"), ("--overwrite", "--logging.overwrite"), *LIBERO_EVAL),
                    (("--robustness", "all"),), libero_target="vlajax.libero.evaluate:command",
                    libero_aliases=(("--episodes-per-task", "--libero.episodes-per-task"),
                                    ("--robustness", "--libero.robustness"))),
}


def _top_help() -> str:
    lines = [
        f"usage: {PROG} COMMAND [--preset NAME] [overrides...]",
        "",
        "commands:",
        *(f"  {name:8s} {c.description}" for name, c in COMMANDS.items()),
        "",
        f"presets (--preset, default {DEFAULT_PRESET!r}):",
        *(f"  {name:12s} {desc}" for name, desc in preset_descriptions().items()),
        "",
        f"config fields (the same for every command; values of preset {DEFAULT_PRESET!r}):",
    ]
    return "\n".join(lines)


def _split_preset(args: list[str]) -> tuple[str, list[str]]:
    """Take `--preset NAME` / `--preset=NAME` out of `args`."""
    rest, preset, i = [], DEFAULT_PRESET, 0
    while i < len(args):
        a = args[i]
        if a == "--preset":
            if i + 1 >= len(args):
                raise ConfigError("--preset needs a name")
            preset, i = args[i + 1], i + 2
            continue
        if a.startswith("--preset="):
            preset = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return preset, rest


def _fill_bare(args: list[str], bare: tuple[tuple[str, str], ...]) -> list[str]:
    """`--robustness` standing alone (last, or before another flag) -> `--robustness all`."""
    table, out = dict(bare), []
    for i, a in enumerate(args):
        out.append(a)
        if a in table and (i + 1 == len(args) or args[i + 1].startswith("--")):
            out.append(table[a])
    return out


def _apply_aliases(args: list[str], aliases: tuple[tuple[str, str], ...]) -> list[str]:
    """`--suite goal` -> `--env.suite goal` (also `--suite=goal`) for a command's short flags."""
    table = dict(aliases)
    out = []
    for a in args:
        flag, sep, value = a.partition("=")
        out.append(table[flag] + sep + value if flag in table else a)
    return out


def _bool_flags(cls: type = TrainConfig, prefix: str = "--") -> set[str]:
    """The flag of every boolean config field, as tyro spells it (`--pipeline.enabled`)."""
    hints = typing.get_type_hints(cls)
    out = set()
    for f in dataclasses.fields(cls):
        name = prefix + f.name.replace("_", "-")
        if dataclasses.is_dataclass(hints[f.name]):
            out |= _bool_flags(hints[f.name], name + ".")
        elif hints[f.name] is bool:
            out.add(name)
    return out


def _legacy_bools(args: list[str]) -> list[str]:
    """`--x true` / `--x=false` (the old spelling) -> `--x` / `--no-x`, with a deprecation warning on stderr."""
    flags, out, old, i = _bool_flags(), [], [], 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in flags and not eq and i + 1 < len(args):
            value = args[i + 1]
        if flag in flags and value.lower() in ("true", "false"):
            head, _, last = flag[2:].rpartition(".")
            new = flag if value.lower() == "true" else "--" + (head + "." if head else "") + "no-" + last
            old.append(f"{flag}{'=' if eq else ' '}{value} -> {new}")
            out.append(new)
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    if old:
        print(f"warning: booleans are flags now; the value spelling is deprecated ({'; '.join(old)})",
              file=sys.stderr, flush=True)
    return out


def _suite_given(args: list[str]) -> str | None:
    """The value of the last `--suite` / `--env.suite` / `--libero.suite` among `args` (None when absent)."""
    found = None
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in ("--suite", "--env.suite", "--libero.suite"):
            found = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    return found


def _rewrite(command: str, args: list[str]) -> tuple[str, list[str], bool]:
    """(preset, the config flags as tyro reads them, whether the suite is a LIBERO one): `--preset` taken out, the
    command's short flags rewritten -- its LIBERO ones first when the suite (given, or the preset's) is LIBERO's.
    A suite meant as a LIBERO one in another spelling is refused here, in one line listing the suites."""
    preset, rest = _split_preset(args)
    suite = _suite_given(rest)
    if suite is not None and not suite.startswith("libero_") and looks_like_libero(suite):
        try:
            check_suite(suite)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    c = COMMANDS[command]
    libero = is_libero(suite if suite is not None else get_config(preset).env.suite)
    rest = _fill_bare(rest, c.bare)
    if libero:
        rest = _apply_aliases(rest, c.libero_aliases)
    return preset, _apply_aliases(rest, c.aliases), libero


def parse(command: str, args: list[str]) -> TrainConfig:
    """The config for `command` from `--preset` and overrides. Raises ConfigError / SystemExit."""
    preset, rest, _ = _rewrite(command, args)
    rest = _legacy_bools(rest)
    base = get_config(preset)
    with parse_errors():  # a contradiction is one `error:` line, not tyro's box
        return tyro.cli(
            TrainConfig,
            default=base,
            args=rest,
            prog=f"{PROG} {command} --preset {preset}",
            description=f"{COMMANDS[command].description}. Fields default to preset {preset!r}.",
            config=_TYRO_CONFIG,
        )


def overrides(command: str, args: list[str]) -> list[str]:
    """The command line's config flags as `parse` reads them (`--preset` taken out, the command's aliases applied)."""
    return _rewrite(command, args)[1]


def _resolve(command: str, cfg: TrainConfig) -> Callable[[TrainConfig], int]:
    """The command's function: its LIBERO one when `cfg.env.suite` is a LIBERO suite and the command has one."""
    c = COMMANDS[command]
    libero = is_libero(cfg.env.suite) and c.libero_target
    module, fn = (c.libero_target if libero else c.target).split(":")
    try:
        return getattr(importlib.import_module(module), fn)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise ConfigError(f"the {command!r} command is not built yet (module {module} is missing)") from e
        raise


def _stop_request(command: str) -> contextlib.AbstractContextManager:
    """`sft` and `rl` own SIGTERM / Ctrl-C from before their imports (`vlajax.training.preemption`); others keep the
    default."""
    if command not in ("sft", "rl"):
        return contextlib.nullcontext()
    from vlajax.training.preemption import stop_request  # noqa: PLC0415 (jax only when needed)

    return stop_request(command)


def _command_help(command: str, args: list[str]) -> int:
    """`COMMAND --help`: the fields the command reads, one line each, at the preset's values and the overrides."""
    try:
        cfg = parse(command, [a for a in args if a not in ("-h", "--help")])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    c = COMMANDS[command]
    print(command_help(f"{PROG} {command}", f"{c.description}. Values: preset {cfg.name!r}.", cfg,
                       lambda field: reads(command, field, cfg), c.aliases))
    return 0


def _verbose(args: list[str]) -> bool:
    """`--logging.verbose` among `args` (the last of it and `--logging.no-verbose` wins)."""
    flags = [a for a in args if a in ("--logging.verbose", "--logging.no-verbose")]
    return bool(flags) and flags[-1] == "--logging.verbose"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        print(fields_help(get_config(DEFAULT_PRESET)))
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=2)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        print(f"error: unknown command {command!r}{hint} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    if "-h" in rest or "--help" in rest:
        return _command_help(command, rest)
    from vlajax.training.logging import setup_console  # noqa: PLC0415 (it imports jax: not for --help or a typo)

    setup_console(verbose=_verbose(rest))  # before anything starts JAX: its backend probing lines stay off
    try:
        cfg = parse(command, rest)
        preflight(cfg, command, flags=overrides(command, rest))  # flags the command does not read are refused
        with _stop_request(command):  # a signal from here on stops the run cleanly (docs/reliability.md)
            run = _resolve(command, cfg)
            return int(run(cfg) or 0)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a run that failed: its traceback, then one line that says what and where
        traceback.print_exc()
        where = "; ".join(getattr(e, "__notes__", []))
        print(f"error: {command}: {type(e).__name__}: {e}" + (f" ({where})" if where else ""), file=sys.stderr,
              flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
