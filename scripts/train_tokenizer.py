"""A tiny SentencePiece prompt tokenizer trained on the tabletop tasks' instructions.

    .venv/bin/python scripts/train_tokenizer.py OUT.model [--vocab-size 1000]

For the dummy π presets' `model.tokenizer_path` (real π checkpoints bring their own tokenizer).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import tyro

from vlajax.envs.tabletop import tasks
from vlajax.models.sp_tokenizer import PromptTokenizer, train_tiny_model
from vlajax.shared import cli


@dataclasses.dataclass(frozen=True)
class TokenizerArgs:
    """The command line of `main` (`--help` lists every option with its comment)."""

    out: tyro.conf.Positional[str]  # the .model file to write
    vocab_size: int = 1000  # pieces at most (the dummy presets take 1,024)


def main(argv: Sequence[str] | None = None) -> int:
    """`scripts/train_tokenizer.py OUT.model [--vocab-size N]`: a tiny SentencePiece model
    trained on the tabletop tasks' instructions (for the dummy presets' `model.tokenizer_path`)."""

    args = cli.parse(TokenizerArgs, argv, prog="scripts/train_tokenizer.py", description=main.__doc__)
    texts = sorted({i for t in tasks.TASKS for i in t.instructions()})
    path = train_tiny_model(args.out, texts, args.vocab_size)
    print(f"wrote {path} ({PromptTokenizer.load(path, 1).vocab_size} pieces)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
