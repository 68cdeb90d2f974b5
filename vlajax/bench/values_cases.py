"""The cases of `python -m vlajax.bench values`, read from the schema, and their command lines.

A case is one command at a tiny size with one offered value set (or one combination of a pairing's values).
The offered values are every `Literal[...]` field (also `tuple[Literal[...], ...]`: each value alone) and
every `bool` field a command reads (the `TrainConfig` fields `vlajax.preflight.READS` says `demos`, `sft`,
`rl`, `eval` read; `vlajax.serve.app.ServeArgs` for `serve`; each benchmark's own `Args` for `bench.NAME`). A
field added tomorrow is a case tomorrow; nothing here lists values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import itertools
import os
import typing
import zlib
from typing import Any

from vlajax.bench import BENCHMARKS

TRAIN_COMMANDS = ("demos", "sft", "rl", "eval", "serve")
# every benchmark but this sweep itself, as `bench.NAME` (its own options are the runs' harness, not a workload)
BENCH_COMMANDS = tuple(f"bench.{name}" for name in BENCHMARKS if name != "values")
COMMANDS = TRAIN_COMMANDS + BENCH_COMMANDS
# field groups whose joint values reach different code: every combination is a case
PAIRINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "demos": (("env.physics_impl", "env.render_backend"),),
    "rl": (("pipeline.placement", "pipeline.streaming"), ("env.physics_impl", "env.render_backend"),
           ("model.action_head", "rl.algo", "model.flow_sampler")),
    "eval": (("env.physics_impl", "env.render_backend"),),
    "bench.env": (("physics_impl", "render"),),  # the simulator x with / without rendering
    "bench.rollout": (("heads", "physics"),),  # each action head on each simulator
    "bench.async": (("regimes", "modes"),),  # every loop mode in every regime
}
_EPISODE = {"env.task": "goal/press_button", "env.num_envs": 2, "env.episode_length": 20}
# command -> base name -> (preset, overrides); the tiny size that reaches the first update. A benchmark's base
# is its own flags (preset ''): the fewest envs, steps and repeats its checks accept.
BASES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "demos": {"main": ("sft-tiny", {"env.task": "goal/press_button", "env.num_envs": 2,
                                    "data.episodes_per_task": 1})},
    "sft": {"main": ("sft-tiny", {"sft.num_steps": 1, "sft.eval_every": -1, "data.batch_size": 4})},
    "rl": {"main": ("rl-debug", {"rl.num_iterations": 1, "rl.eval_every": -1}),
           # the VLA from pixels (model.* values; the head / algorithm / sampler and physics / renderer pairings)
           # (the smallest VLA that is still one: 4 patch tokens per camera, one block per tower, 2 denoising steps)
           "pixels": ("rl-debug", {"rl.num_iterations": 1, "rl.eval_every": -1, "env.obs_mode": "pixels",
                                   "env.num_envs": 2, "env.image_size": 16, "model.image_size": 16,
                                   "model.depth": 1, "model.vit_depth": 1, "model.num_denoise_steps": 2,
                                   "rl.rollout_length": 2, "rl.num_minibatches": 1, "rl.group_size": 2,
                                   "model.flow_sampler": "flow_sde", "model.value_head": "prefix"}),
           "async": ("rl-async-debug", {"rl.num_iterations": 1, "rl.eval_every": -1})},
    "eval": {"main": ("sft-tiny", {**_EPISODE, "sft.eval_episodes_per_task": 1})},
    "serve": {"main": ("", {"max_batch": 1})},
    "bench.env": {"main": ("", {"task": "goal/press_button", "num_envs": (2,), "image_size": 16, "steps": 2,
                                "repeats": 1})},
    "bench.packing": {"main": ("", {"data": ("synthetic",), "episodes_per_task": 1, "batches": 1, "repeats": 1})},
    "bench.async": {"main": ("", {"regimes": ("mjx",), "modes": ("sync",), "repeats": 1, "updates": 2, "envs": 2,
                                  "slots": 1, "horizon": 2, "width": 16})},
    "bench.rollout": {"main": ("", {"heads": ("flow",), "num_envs": 2, "decisions": 1, "repeats": 1,
                                    "episode_length": 20})},
    "bench.gpu-check": {"main": ("", {"dry_run": True, "rows": ("attention",), "deadline_s": 300})},
}
# (command, section or pairing's first field) -> the base its values run on (else 'main')
SECTION_BASE = {("rl", "model"): "pixels", ("rl", "pipeline"): "async", ("rl", "pipeline.placement"): "async",
                ("rl", "env.physics_impl"): "pixels", ("rl", "model.action_head"): "pixels"}
BASE_ORDER = ("main", "async", "pixels")  # cheapest first within a command


def bench_module(command: str):
    """The module of benchmark command `bench.NAME`."""
    from vlajax.bench.__main__ import _MODULES

    name = command.removeprefix("bench.")
    return importlib.import_module(f"vlajax.bench.{_MODULES.get(name, name)}")


def _offered(t) -> tuple | None:
    """The values a field of type `t` offers: a Literal's, a tuple of one Literal's (each alone), a bool's."""
    if typing.get_origin(t) is typing.Literal:
        return typing.get_args(t)
    if typing.get_origin(t) is tuple:
        args = typing.get_args(t)
        if len(args) == 2 and args[1] is Ellipsis and typing.get_origin(args[0]) is typing.Literal:
            return typing.get_args(args[0])
    if t is bool:
        return (True, False)
    return None


def schema_fields(cls: type, prefix: str = "") -> list[tuple[str, tuple]]:
    """(dotted field, its offered values) for every `Literal`, `tuple[Literal, ...]` and `bool` field of
    dataclass `cls`, recursively."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, tuple]] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += schema_fields(t, prefix + f.name + ".")
        elif (values := _offered(t)) is not None:
            out.append((prefix + f.name, values))
    return out


# fields that are the harness's, not a value of the workload: where a benchmark writes, and gpu-check's
# `--worker` (the rows in the calling process: what the bench's own parent process passes its child)
HARNESS_FIELDS = {"bench.gpu-check": ("worker",)}


def command_fields(command: str, schema: type | None = None) -> list[tuple[str, tuple]]:
    """The (field, values) of the sections `command` reads; `schema` replaces `TrainConfig` (tests)."""
    if command == "serve":
        from vlajax.serve.app import ServeArgs

        return [(f"serve.{k}", v) for k, v in schema_fields(schema or ServeArgs)]
    if command.startswith("bench."):
        skip = HARNESS_FIELDS.get(command, ())
        return [(k, v) for k, v in schema_fields(schema or bench_module(command).Args) if k not in skip]
    from vlajax.config.schema import TrainConfig
    from vlajax.preflight import reads

    # what the command reads is preflight's (`READS`): the flags it would refuse as unread are no case of it
    return [(k, v) for k, v in schema_fields(schema or TrainConfig) if reads(command, k)]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str  # 'rl.algo=grpo' or 'model.action_head=tokens,rl.algo=grpo,model.flow_sampler=ode'
    command: str  # one of COMMANDS
    base: str  # a key of BASES[command]
    values: tuple[tuple[str, Any], ...]  # (dotted field, value) set on top of the base


def _name(values) -> str:
    return ",".join(f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in values)


def expand(commands) -> list[str]:
    """`all` = every command, `bench` = every benchmark; the rest as named (unknown names raise ValueError)."""
    out: list[str] = []
    for c in commands:
        named = COMMANDS if c == "all" else BENCH_COMMANDS if c == "bench" else (c,)
        for n in named:
            if n not in COMMANDS:
                raise ValueError(f"unknown command {n!r}; available: all, bench, {', '.join(COMMANDS)}")
            if n not in out:
                out.append(n)
    return sorted(out, key=COMMANDS.index)


def cases(commands=COMMANDS, schema: type | None = None) -> list[Case]:
    """Every value of every field the commands read, alone, then every combination of each pairing."""
    out: list[Case] = []
    for command in commands:
        fields = dict(command_fields(command, schema))
        for field, values in fields.items():
            base = SECTION_BASE.get((command, field.split(".")[0]), "main")
            out += [Case(_name([(field, v)]), command, base, ((field, v),)) for v in values]
        for group in PAIRINGS.get(command, ()):
            if not all(f in fields for f in group):
                continue
            base = SECTION_BASE.get((command, group[0]), "main")
            for combo in itertools.product(*(fields[f] for f in group)):
                values = tuple(zip(group, combo, strict=True))
                out.append(Case(_name(values), command, base, values))
    seen: set[tuple[str, str]] = set()
    unique = []
    for c in out:  # a single value on the pairing's base is also one of its combinations' parts: keep both once
        if (c.command, c.name + "@" + c.base) not in seen:
            seen.add((c.command, c.name + "@" + c.base))
            unique.append(c)
    return unique


def subset(all_cases: list[Case], k: int, n: int) -> list[Case]:
    """The cases whose `command:name` hashes (crc32) to `k` mod `n`: a stable, spread slice."""
    return [c for c in all_cases if zlib.crc32(f"{c.command}:{c.name}".encode()) % n == k]


# ------------------------------------------------------------------------------------------
# Command lines
# ------------------------------------------------------------------------------------------


def _flag(field: str, value: Any) -> list[str]:
    """`--section.field VALUE` (a tuple: its values after the flag), or a boolean's flag `--section.field` /
    `--section.no-field`."""
    dotted = field.removeprefix("serve.").replace("_", "-")
    if isinstance(value, bool):
        head, _, last = dotted.rpartition(".")
        return ["--" + (head + "." if head else "") + ("" if value else "no-") + last]
    if isinstance(value, tuple):
        return ["--" + dotted, *map(str, value)]
    return ["--" + dotted, str(value)]


def out_dir(case: Case, work: str) -> str:
    return os.path.join(work, "runs", f"{case.command}-{zlib.crc32(case.name.encode()):08x}-{case.base}")


def module_argv(case: Case) -> list[str]:
    """`python -m ...` up to the case's own arguments."""
    if case.command == "serve":
        return ["-m", "vlajax.serve"]
    if case.command.startswith("bench."):
        return ["-m", "vlajax.bench", case.command.removeprefix("bench.")]
    return ["-m", "vlajax.train", case.command]


def argv(case: Case, work: str, prereq: dict[str, str]) -> list[str]:
    """The case's arguments after `module_argv(case)`."""
    preset, base = BASES[case.command][case.base]
    merged = {**base, **dict(case.values)}
    out = out_dir(case, work)
    flags = lambda m: list(itertools.chain.from_iterable(_flag(k, v) for k, v in m.items()))  # noqa: E731
    if case.command == "serve":
        return ["--checkpoint", prereq["checkpoint"], "--port", "0", *flags(merged)]
    if case.command.startswith("bench."):
        names = {f.name for f in dataclasses.fields(bench_module(case.command).Args)}
        where = (["--json", os.path.join(out, "result.json")] if "json" in names
                 else ["--out", out] if "out" in names else [])
        return where + flags(merged)
    args = ["--preset", preset, "--output-dir", out, "--compilation-cache-dir", prereq.get("cache", "")]
    if case.command == "demos":
        merged.setdefault("data.dataset_dir", os.path.join(out, "demos"))
    if case.command == "sft":
        merged.setdefault("data.dataset_dir", prereq["dataset"])
    if case.command == "eval":
        merged.setdefault("checkpoint.dir", prereq["checkpoint"])
    return args + flags(merged)


def _parse_tool(cls: type, args: list[str], check=None) -> tuple[str, str, Any]:
    """A tool's command line read by tyro (and its `check`, which refuses with one `error:` line, exit 2)."""
    import tyro

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            a = tyro.cli(cls, args=args)
            if check is not None:
                check(a)
    except ValueError as e:
        return "refused", f"error: {e}", None
    except SystemExit as e:
        if e.code != 2:
            raise
        line = next((ln for ln in err.getvalue().splitlines() if ln.startswith("error:")),
                    "error: the command line parser refused it (exit 2)")
        return "refused", line, None
    return "ok", "", a


def validate(command: str, args: list[str]) -> tuple[str, str, Any]:
    """What the command checks before it imports or compiles anything: ('ok', '', config) or ('refused', its
    error line, None); any other exception is ('traceback', its line, None). Training commands: `parse` +
    `preflight` as `vlajax.train.main`; serve: `ServeArgs` and its `check`; a benchmark: its `Args` and its
    `_check` where it has one (the rest of its checks run first thing in its `main`)."""
    from vlajax.config.schema import ConfigError
    from vlajax.train import overrides, parse, preflight

    try:
        if command == "serve":
            from vlajax.serve.app import ServeArgs

            return _parse_tool(ServeArgs, args, lambda a: a.check())
        if command.startswith("bench."):
            module = bench_module(command)
            return _parse_tool(module.Args, args, getattr(module, "_check", None))
        cfg = parse(command, args)
        preflight(cfg, command, flags=overrides(command, args))  # as main: flags the command does not read refused
    except ConfigError as e:
        return "refused", f"error: {e}", None
    except SystemExit as e:  # tyro's own refusal of a value (exit 2); any other exit is this sweep's
        if e.code != 2:
            raise
        return "refused", "error: the command line parser refused it (exit 2)", None
    except Exception as e:  # noqa: BLE001 (a crash in validation is what the sweep reports)
        return "traceback", f"{type(e).__name__}: {e}", None
    return "ok", "", cfg


def config_key(command: str, cfg: Any) -> str:
    """Identical keys = identical runs (where they write aside)."""
    if command == "serve":
        return repr(dataclasses.replace(cfg, checkpoint=""))
    if command.startswith("bench."):
        return repr({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in ("json", "out")})
    return repr(dataclasses.replace(cfg, output_dir="", name=""))
