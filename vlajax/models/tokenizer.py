"""A text tokenizer that ships with the package: a small word vocabulary with a byte fallback.

No vocabulary files, no downloads. Text is lower-cased and split into words and punctuation;
a word in `WORDS` (tabletop-manipulation vocabulary) is one token, any other word is spelled
as UTF-8 byte tokens. Ids: 0 = pad, 1 = bos, 2 = eos, 3..258 = bytes, 259.. = words, so
`VOCAB_SIZE` <= 512 (the default `ModelConfig.vocab_size`). Typical instructions
("put the red cube in the bowl") take about 8 tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

PAD, BOS, EOS = 0, 1, 2
_BYTE0 = 3
_WORD_TEXT = """
    a an the this that it its them these those and or then to of on in into onto inside under over above
    below behind front next near left right top bottom middle center side back far close up down out off
    between from with without at by for is are be all both each other another one two three first second
    last pick place put push pull open close turn lift lower move slide stack unstack grasp grab drop insert
    rotate flip press hold release reach touch stir pour wipe hang set give bring take red green blue yellow
    black white orange purple pink brown gray grey block blocks cube cubes ball sphere box bowl plate cup
    mug bottle can jar lid drawer cabinet door microwave stove shelf rack basket tray table peg hole target
    goal object objects item items handle knob button switch marker ketchup butter cheese sauce book caddy
    small large big tall short round square long empty full
"""
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_WORD_TEXT.split()))
_WORD0 = _BYTE0 + 256
VOCAB_SIZE = _WORD0 + len(WORDS)
_WORD_ID = {w: _WORD0 + i for i, w in enumerate(WORDS)}
_SPLIT = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def _tokens(text: str) -> list[int]:
    out: list[int] = []
    for i, word in enumerate(_SPLIT.findall(text.lower())):
        if word in _WORD_ID:
            out.append(_WORD_ID[word])
        else:  # spelled out; a leading space byte keeps word boundaries decodable
            out.extend(b + _BYTE0 for b in ((" " if i else "") + word).encode("utf-8"))
    return out


def encode(text: str, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """`(ids int32 [max_len], mask bool [max_len])`: bos + tokens (+ eos if it fits), truncated, padded."""
    ids = ([BOS] + _tokens(text) + [EOS])[:max_len]
    out = np.full((max_len,), PAD, np.int32)
    out[: len(ids)] = ids
    return out, out != PAD


def encode_batch(texts: Sequence[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """`(ids int32 [B, max_len], mask bool [B, max_len])` for a batch of instructions."""
    pairs = [encode(t, max_len) for t in texts]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def decode(ids: Sequence[int] | np.ndarray) -> str:
    """Text of `ids` (lower case; specials dropped; words separated by single spaces)."""
    parts: list[str] = []
    buf = bytearray()
    for i in np.asarray(ids).reshape(-1).tolist():
        if _BYTE0 <= i < _WORD0:
            buf.append(i - _BYTE0)
            continue
        if buf:
            parts.append(buf.decode("utf-8", errors="replace").strip())
            buf = bytearray()
        if i >= _WORD0:
            parts.append(WORDS[i - _WORD0])
    if buf:
        parts.append(buf.decode("utf-8", errors="replace").strip())
    return " ".join(p for p in parts if p)
