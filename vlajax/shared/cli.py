"""One command-line convention for vlajax's tools (benches, `python -m vlajax.data`, experiments).

Like the trainers (`vlajax.train`), a tool's options are a frozen dataclass read by tyro: each
field is a `--kebab-case` flag, its comment is the help, `--help` renders through tyro, and
booleans are flags: `--debug` / `--no-debug`. A bad value or unknown flag exits with code 2;
`error(msg)` refuses a combination of values the same way, with one `error:` line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import tyro


def parse[T](cls: type[T], argv: Sequence[str] | None, *, prog: str | None = None, description: str | None = None) -> T:
    """`cls` filled from `argv` (None = `sys.argv[1:]`)."""
    return tyro.cli(cls, args=None if argv is None else list(argv), prog=prog, description=description)


def error(message: str) -> None:
    """Refuse the command line: `error: message` on stderr, exit code 2 (argparse's convention)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)
