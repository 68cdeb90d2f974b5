"""`python -m vlajax.bench NAME [--json PATH] ...` dispatches to `vlajax.bench.<NAME>.main`."""

import contextlib
import dataclasses
import difflib
import importlib
import sys
from typing import Literal

import tyro

from vlajax.bench import BENCHMARKS

_MODULES = {"async": "async_loops", "gpu-check": "gpu_check"}


def _help() -> None:
    """The dispatcher's help through tyro: NAME is one of the benchmarks (`NAME --help` has its options)."""
    fields = [("name", tyro.conf.Positional[Literal[tuple(BENCHMARKS)]],  # type: ignore[misc]
               dataclasses.field(metadata={"help": "the benchmark; `NAME --help` lists its options"}))]
    top = dataclasses.make_dataclass("Benchmark", fields, frozen=True)
    lines = [f"{name}: {desc}" for name, desc in BENCHMARKS.items()]
    with contextlib.suppress(SystemExit):
        tyro.cli(top, args=["--help"], prog="python -m vlajax.bench",
                 description="Benchmarks; each writes JSON (--json PATH).\n\n" + "\n\n".join(lines))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        _help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        close = difflib.get_close_matches(name, BENCHMARKS, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        print(f"error: unknown benchmark {name!r}{hint}; available: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"vlajax.bench.{_MODULES.get(name, name)}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("vlajax.bench."):
            print(f"error: benchmark {name!r} is not built yet", file=sys.stderr)
            return 2
        raise
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
