"""SentencePiece prompts for the π0 / π0.5 families (openpi's `PaligemmaTokenizer` formats).

The model file is the PaliGemma SentencePiece model (`paligemma_tokenizer.model`, 257,152
pieces) or any SentencePiece model whose ids fit `model.vocab_size`. Prompt formats (openpi):

    π0     bos + encode(clean(prompt)) + encode("\\n")                    ("\\n" = start of answer)
    π0.5   bos + encode(f"Task: {clean(prompt)}, State: {s_0} {s_1} ... {s_n-1};\\nAction: ")

`clean` strips the prompt and turns '_' and newlines into spaces; `s_i` is the normalized
state's bin in 256 uniform bins over [-1, 1] (`np.digitize(state, linspace(-1, 1, 257)[:-1]) - 1`,
so a value below -1 gives -1 and one at or above 1 - 2/256 gives 255). Ids are padded with 0
(mask False) or truncated to `max_len` (mask all True).

    tok = PromptTokenizer.load(path, max_len)            # FileNotFoundError names the path
    ids, mask = tok.pi0("pick up the cube")              # int32 [max_len], bool [max_len]
    ids, mask = tok.pi05("pick up the cube", state)      # state float [S] (normalized)
    table = StatePromptTable.build(tok, prompts)         # jit-able π0.5 prompts
    ids, mask = table.tokens(prompt_index, state)        # int [B], float [B, S] -> [B, max_len] (traced)

`StatePromptTable` exists because π0.5's prompt changes with the state at every control step
inside the jitted RL rollout. It holds the token ids of the prompt head `"Task: ..., State:"`
of every prompt and of every bin string as it follows a space, both in the middle (`" 17"`)
and at the end (`" 17;\\nAction: "`), and concatenates them with a static-shape scatter.
That equals the host tokenizer when SentencePiece starts a new piece at every space (its
default `split_by_whitespace`; PaliGemma's model does): `build` checks it on every bin value
in both places and on every prompt, and raises if the model merges across a space. It can
still differ from the host path where the two normalize the state differently: the jitted
normalization rounds in float32 in its own order, so a value within ~1e-7 of a bin edge may
land in the neighbouring bin (the host path of SFT uses numpy).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["NUM_STATE_BINS", "PromptTokenizer", "StatePromptTable", "clean_prompt", "discretize_state"]

NUM_STATE_BINS = 256
_EDGES = np.linspace(-1.0, 1.0, NUM_STATE_BINS + 1)[:-1]  # exact dyadic values: float32 == float64
_BIN_VALUES = tuple(range(-1, NUM_STATE_BINS))  # every value `discretize_state` can return
_ANCHOR = "State:"  # text before a continuation when encoding it in context


def clean_prompt(text: str) -> str:
    """openpi's prompt cleaning: strip, '_' and newlines -> spaces."""
    return text.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state) -> np.ndarray:
    """Normalized state float [..., S] -> int64 bins in [-1, 255] (openpi's π0.5 convention)."""
    return np.digitize(np.asarray(state, np.float32), bins=_EDGES) - 1


def _pad(ids: list[int], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    ids = ids[:max_len]
    out = np.zeros((max_len,), np.int32)
    out[: len(ids)] = ids
    return out, np.arange(max_len) < len(ids)


class PromptTokenizer:
    """A SentencePiece model and openpi's π0 / π0.5 prompt formats (module docstring)."""

    def __init__(self, model_proto: bytes, max_len: int, path: str = "<bytes>"):
        import sentencepiece

        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self.max_len = max_len
        self.path = path

    @classmethod
    def load(cls, path: str, max_len: int) -> PromptTokenizer:
        """From a `.model` file; a missing file raises FileNotFoundError with one line naming it."""
        path = os.path.expanduser(path)
        if not path or not os.path.isfile(path):
            raise FileNotFoundError(f"model.tokenizer_path={path!r}: no SentencePiece model file there (π0/π0.5 "
                                    "need openpi's paligemma_tokenizer.model, or a model with ids < model.vocab_size)")
        with open(path, "rb") as f:
            return cls(f.read(), max_len, path)

    @property
    def vocab_size(self) -> int:
        return int(self.sp.vocab_size())

    def encode(self, text: str, bos: bool = False) -> list[int]:
        return list(self.sp.encode(text, add_bos=bos))

    def continuation(self, text: str) -> list[int]:
        """Ids of `text` as it follows `"State:"` in a prompt (the anchor's own ids removed)."""
        head, full = self.encode(_ANCHOR), self.encode(_ANCHOR + text)
        if full[: len(head)] != head:
            raise ValueError(f"{self.path}: the tokenizer merges {_ANCHOR!r} with {text!r}; the jit-able π0.5 "
                             "prompt needs pieces that start at spaces")
        return full[len(head):]

    def pi0_ids(self, prompt: str) -> list[int]:
        return self.encode(clean_prompt(prompt), bos=True) + self.encode("\n")

    def pi05_ids(self, prompt: str, state) -> list[int]:
        bins = " ".join(map(str, discretize_state(state).reshape(-1).tolist()))
        return self.encode(f"Task: {clean_prompt(prompt)}, State: {bins};\nAction: ", bos=True)

    def pi0(self, prompt: str) -> tuple[np.ndarray, np.ndarray]:
        """π0 prompt -> (ids int32 [max_len], mask bool [max_len])."""
        return _pad(self.pi0_ids(prompt), self.max_len)

    def pi05(self, prompt: str, state) -> tuple[np.ndarray, np.ndarray]:
        """π0.5 prompt with the discretized normalized state float [S] -> (ids, mask) [max_len]."""
        return _pad(self.pi05_ids(prompt, state), self.max_len)

    def batch_pi0(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """[P] prompts -> (ids int32 [P, max_len], mask bool [P, max_len])."""
        pairs = [self.pi0(p) for p in prompts]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def _ragged(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(1, max(len(r) for r in rows))
    out = np.zeros((len(rows), width), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.asarray([len(r) for r in rows], np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class StatePromptTable:
    """Jit-able π0.5 prompts: constant id tables, concatenated per row by a static-shape scatter.

    head [P, Lh] / head_len [P]: bos + `"Task: {prompt}, State:"` of each prompt;
    mid [257, Lm] / mid_len: `" {b}"` for b = -1 .. 255 (index b + 1); last [257, Ll] /
    last_len: `" {b};\\nAction: "`.
    """

    head: np.ndarray
    head_len: np.ndarray
    mid: np.ndarray
    mid_len: np.ndarray
    last: np.ndarray
    last_len: np.ndarray
    max_len: int

    @classmethod
    def build(cls, tok: PromptTokenizer, prompts: Sequence[str], state_dim: int = 8,
              seed: int = 0) -> StatePromptTable:
        """Tables for `prompts`, checked against `tok.pi05` (every bin value in the middle and at
        the end of a `state_dim` state, and every prompt with a random state); ValueError if any differ."""
        if state_dim < 1:
            raise ValueError(f"the π0.5 prompt needs a state of >= 1 dims, got {state_dim}")
        heads = [tok.encode(f"Task: {clean_prompt(p)}, State:", bos=True) for p in prompts]
        mids = [tok.continuation(f" {b}") for b in _BIN_VALUES]
        lasts = [tok.continuation(f" {b};\nAction: ") for b in _BIN_VALUES]
        table = cls(*_ragged(heads), *_ragged(mids), *_ragged(lasts), tok.max_len)
        table._check(tok, prompts, state_dim, seed)
        return table

    def _check(self, tok: PromptTokenizer, prompts: Sequence[str], state_dim: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        centres = (np.asarray(_BIN_VALUES, np.float32) + 0.5) / 128.0 - 1.0  # bin b's centre (b = -1: below -1)
        cases = []
        for k, b in enumerate(centres):  # every bin value in every place of the state
            s = rng.uniform(-1, 1, state_dim).astype(np.float32)
            s[k % state_dim] = b
            cases.append((k % len(prompts), s))
        cases += [(i, rng.uniform(-1.1, 1.1, state_dim).astype(np.float32)) for i in range(len(prompts))]
        idx = np.asarray([c[0] for c in cases], np.int32)
        states = np.stack([c[1] for c in cases])
        ids, mask = jax.device_get(jax.jit(self.tokens)(idx, states))
        for row, (i, s) in enumerate(cases):
            want_ids, want_mask = tok.pi05(prompts[i], s)
            if not (np.array_equal(ids[row], want_ids) and np.array_equal(mask[row], want_mask)):
                raise ValueError(f"{tok.path}: the jit-able π0.5 prompt differs from the tokenizer's for "
                                 f"{prompts[i]!r} with state bins {discretize_state(s).tolist()} (the model merges "
                                 "pieces across spaces)")

    def tokens(self, prompt_index, state) -> tuple[jax.Array, jax.Array]:
        """prompt_index int [B], normalized state float [B, S] -> (ids int32 [B, max_len], mask bool [B, max_len])."""
        state = jnp.asarray(state, jnp.float32)
        bins = jnp.digitize(state, jnp.asarray(_EDGES, jnp.float32)).astype(jnp.int32)  # = discretize_state + 1
        p = jnp.asarray(prompt_index, jnp.int32)
        head, hlen = jnp.asarray(self.head)[p], jnp.asarray(self.head_len)[p]  # [B, Lh], [B]
        mid, mlen = jnp.asarray(self.mid)[bins[:, :-1]], jnp.asarray(self.mid_len)[bins[:, :-1]]  # [B, S-1, Lm]
        last, llen = jnp.asarray(self.last)[bins[:, -1]], jnp.asarray(self.last_len)[bins[:, -1]]  # [B, Ll]
        lens = jnp.concatenate([hlen[:, None], mlen, llen[:, None]], axis=1)  # [B, S + 1] segment lengths
        starts = jnp.cumsum(lens, axis=1) - lens
        vals, pos = [], []
        for ids, start, n in ((head[:, None], starts[:, :1], hlen[:, None]), (mid, starts[:, 1:-1], mlen),
                              (last[:, None], starts[:, -1:], llen[:, None])):  # ids [B, k, L], start/n [B, k]
            j = jnp.arange(ids.shape[-1])
            at = jnp.where(j < n[..., None], start[..., None] + j, self.max_len)  # padding -> out of range
            vals.append(ids.reshape(ids.shape[0], -1))
            pos.append(at.reshape(at.shape[0], -1))
        vals, pos = jnp.concatenate(vals, axis=1), jnp.concatenate(pos, axis=1)
        # positions >= max_len are dropped: the pieces' padding and openpi's truncation
        out = jax.vmap(lambda v, q: jnp.zeros((self.max_len,), jnp.int32).at[q].set(v, mode="drop"))(vals, pos)
        return out, jnp.arange(self.max_len)[None] < jnp.sum(lens, axis=1)[:, None]


def train_tiny_model(path: str, texts: Sequence[str], vocab_size: int = 1000) -> str:
    """Train a small BPE SentencePiece model on `texts` plus π0.5 prompt material; write `path`.

    For tests and the dummy presets (the reference data's vocabulary is 1,024): PaliGemma-like
    options (identity normalization, no dummy prefix, digits split, byte fallback; pad 0,
    eos 1, bos 2, unk 3). -> path.
    """
    import io

    import sentencepiece

    rng = np.random.default_rng(0)
    lines = [clean_prompt(t) for t in texts]
    lines += [f"Task: {clean_prompt(t)}, State: {' '.join(map(str, rng.integers(-1, 256, 8)))};\nAction: "
              for t in texts for _ in range(4)]
    lines += [" ".join(map(str, _BIN_VALUES[i:i + 16])) for i in range(0, len(_BIN_VALUES), 16)]
    buf = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4), model_writer=buf, vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, character_coverage=1.0, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        hard_vocab_limit=False, minloglevel=2)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return path
