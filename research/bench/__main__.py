"""`python -m research.bench NAME [--json PATH] ...` runs `research.bench.<NAME>.main`."""

import difflib
import importlib
import sys

from research.bench import BENCHMARKS


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m research.bench NAME [options]\n\nbenchmarks:")
        print("\n".join(f"  {n:16s} {d}" for n, d in BENCHMARKS.items()))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        close = difflib.get_close_matches(name, BENCHMARKS, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        print(f"error: unknown benchmark {name!r}{hint}; available: {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    return int(importlib.import_module(f"research.bench.{name}").main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
