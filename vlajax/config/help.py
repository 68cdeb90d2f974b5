"""The `--help` of `python -m vlajax.train`: one line per config field, only the fields a command reads.

tyro's own help gives every field of every section two or more lines (630+ lines for each command); here a
field is one line -- `--section.field TYPE = VALUE  what it does` (its comment in `vlajax/config/*.py`) --
wrapped to the terminal, with the values of the chosen preset. `docs/config.md` lists every field.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import textwrap
import types
import typing
from collections.abc import Callable

from vlajax.config.reference import field_comments, sections
from vlajax.config.schema import TrainConfig

WIDTH = 100  # the width help is wrapped to when the terminal's is unknown (output to a pipe)


def width() -> int:
    """The terminal's width ($COLUMNS first), at least 60."""
    cols = os.environ.get("COLUMNS", "")
    return max(60, int(cols) if cols.isdigit() else shutil.get_terminal_size((WIDTH, 24)).columns)


def type_name(tp) -> str:
    """A field's type as a flag's metavar: `INT`, `{a,b}` for a Literal, `INT [INT ...]` for a tuple."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin in (typing.Union, types.UnionType):
        return "|".join(type_name(a) for a in args if a is not type(None)) + ("|None" if type(None) in args else "")
    if origin is tuple:
        return f"{type_name(args[0])} [...]" if args else "[...]"
    if tp is bool:
        return ""
    return getattr(tp, "__name__", str(tp)).upper()


def _value(v) -> str:
    if isinstance(v, tuple):
        return " ".join(map(str, v)) or "()"
    return repr(v) if isinstance(v, str) else str(v)


def _flag(path: str, tp, value) -> str:
    """`--section.field TYPE = VALUE` (a boolean: `--section.field = True`)."""
    name = "--" + path.replace("_", "-")
    meta = type_name(tp)
    return f"{name} {meta} = {_value(value)}" if meta else f"{name} = {value}"


def field_lines(cfg: TrainConfig, reads: Callable[[str], bool], cols: int) -> dict[str, list[str]]:
    """`{section: its lines}` for the fields `reads(dotted field)` accepts; top-level fields under ''. A model
    field for openpi's families only (its comment starts 'pi:' / 'pi05:') is left out when `cfg` is a VLA."""
    hints = {cls: typing.get_type_hints(cls) for cls in (TrainConfig, *(c for _, c in sections()))}
    out: dict[str, list[str]] = {}
    groups = [("", TrainConfig, cfg)] + [(name, cls, getattr(cfg, name)) for name, cls in sections()]
    for name, cls, obj in groups:
        comments = field_comments(cls)
        lines = []
        for f in dataclasses.fields(cls):
            value = getattr(obj, f.name)
            path = f"{name}.{f.name}" if name else f.name
            if dataclasses.is_dataclass(value) or not reads(path):
                continue
            comment = comments.get(f.name, "")
            if name == "model" and cfg.model.family == "vla" and comment.startswith(("pi:", "pi05:")):
                continue
            head = _flag(path, hints[cls][f.name], value)
            text = f"{head}  {comment}".rstrip()
            lines += textwrap.wrap(text, cols, initial_indent="  ", subsequent_indent="        ",
                                   break_on_hyphens=False, break_long_words=False)
        if lines:
            out[name] = lines
    return out


def _header(name: str, docs: dict[str, str], cols: int) -> list[str]:
    return textwrap.wrap(f"{name}: {docs[name]}", cols) if name else ["run:"]


def command_help(prog: str, description: str, cfg: TrainConfig, reads: Callable[[str], bool],
                 short_flags: tuple[tuple[str, str], ...] = ()) -> str:
    """The help of one command: usage, what it does, its short flags, then each section it reads."""
    cols = width()
    out = [f"usage: {prog} [--preset NAME] [--section.field VALUE ...]", "", *textwrap.wrap(description, cols), ""]
    if short_flags:
        out.append("short flags:")
        out += [f"  {a:22s} = {b}" for a, b in short_flags]
        out.append("")
    docs = {name: (cls.__doc__ or "").strip().split("\n")[0] for name, cls in sections()}
    for name, lines in field_lines(cfg, reads, cols).items():
        out += [*_header(name, docs, cols), *lines, ""]
    out.append("Booleans are flags (--x / --no-x). Every field, with what reads it: docs/config.md.")
    return "\n".join(out)


def fields_help(cfg: TrainConfig) -> str:
    """Every field of every section at `cfg`'s values (the top-level `--help`)."""
    cols = width()
    docs = {name: (cls.__doc__ or "").strip().split("\n")[0] for name, cls in sections()}
    out = []
    for name, lines in field_lines(cfg, lambda _: True, cols).items():
        out += [*_header(name, docs, cols), *lines, ""]
    out.append("Booleans are flags (--x / --no-x). `COMMAND --help` lists the fields a command reads.")
    return "\n".join(out)
