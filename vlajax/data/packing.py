"""Batching variable-length prefixes: fixed padding, dynamic padding and sequence packing.

A sample's prefix is [patches of each present camera] + [instruction tokens] + [state token],
laid out as the model's `VLA.embed_prefix` does: every camera of `PrefixSpec.cameras` (sorted)
owns a block of `tokens_per_camera` slots, then `text_len` text slots, then the state slot,
then padding up to `length` (= `ModelConfig.prefix_len`). A dropped camera's block and unused
text slots are holes. Every mode emits the same keys; only the layout arrays differ:

  per sample slot n < N (numpy):
    images {cam: uint8 [N, h, w, 3]}, image_masks {cam: bool [N]}, tokens int32 [N, text_len],
    token_mask bool [N, text_len], state float32 [N, S], actions float32 [N, H, A],
    action_mask bool [N, H], task_index int32 [N], index int32 [N] (record; -1 = empty slot),
    sample_mask bool [N] (False = empty slot)
  layout of the prefix transformer's input rows (R rows of T tokens):
    prefix_index int32 [R, T]   source of each token in the flattened per-sample prefix [N * length]
    segment_ids  int32 [R, T]   1, 2, ... per sample within a row; 0 = padding
    positions    int32 [R, T]   0 .. n-1 within each sample (what the unpacked prefix uses)
    sample_row, sample_segment int32 [N]   the row and segment id holding sample n (0, 0 if empty)

  fixed    R = N, T = length; row n is sample n's layout as is (holes are segment 0).
  dynamic  R = N, T = the longest prefix in the batch rounded up to `seq_multiple`; each row
           holds its sample's tokens compacted to the front.
  packed   R rows of T tokens hold up to N samples, first-fit in arrival order, at most
           `max_segments` per row; a batch is emitted when the next sample fits nowhere (its
           tokens or the N slots are full), so the number of samples per batch varies.

The model consumes a batch as `emb = embed_prefix(obs)` [N, length, W] ->
`gather_prefix(emb, prefix_index, segment_ids)` [R, T, W] -> `encode_prefix(x, segment_ids,
positions)`: attention with segment ids is then exactly per sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import grain
import numpy as np

__all__ = ["PrefixSpec", "Batching", "collate", "layout", "PackedBatchDataset", "gather_prefix", "scatter_prefix"]

Batching = Literal["fixed", "dynamic", "packed"]


@dataclasses.dataclass(frozen=True)
class PrefixSpec:
    """Where a sample's prefix tokens sit (see the module docstring)."""

    cameras: tuple[str, ...]  # every camera the model has room for, sorted
    image_size: int  # square side of every camera image
    tokens_per_camera: int  # ViT patches per image
    text_len: int  # instruction token slots
    state_token: bool = True  # one state token after the text
    length: int = 0  # padded prefix length (0 = the raw length rounded up to seq_multiple)
    seq_multiple: int = 1  # dynamic rows are rounded up to a multiple of this

    def __post_init__(self):
        if tuple(sorted(self.cameras)) != tuple(self.cameras):
            raise ValueError(f"PrefixSpec.cameras must be sorted (the model reads them sorted): {self.cameras}")
        raw = len(self.cameras) * self.tokens_per_camera + self.text_len + int(self.state_token)
        if self.length == 0:
            object.__setattr__(self, "length", -(-raw // self.seq_multiple) * self.seq_multiple)
        if self.length < raw:
            raise ValueError(f"PrefixSpec.length={self.length} < {raw} tokens of cameras + text + state")

    @classmethod
    def from_model(cls, cfg, cameras: Sequence[str]) -> PrefixSpec:
        """The layout of `vlajax.models.VLA.embed_prefix` for a `ModelConfig` and camera names."""
        cams = tuple(sorted(cameras))
        if len(cams) > cfg.num_cameras:
            raise ValueError(f"{len(cams)} cameras {cams} but model.num_cameras={cfg.num_cameras}")
        return cls(cams, cfg.image_size, (cfg.image_size // cfg.patch_size) ** 2, cfg.max_text_len,
                   cfg.use_state_token, cfg.prefix_len, cfg.seq_multiple)

    def valid(self, sample: dict) -> np.ndarray:
        """bool [length]: which prefix slots of `sample` hold a token."""
        p = self.tokens_per_camera
        out = np.zeros(self.length, bool)
        for k, c in enumerate(self.cameras):
            out[k * p:(k + 1) * p] = c in sample["images"]
        t0 = len(self.cameras) * p
        out[t0:t0 + self.text_len] = np.asarray(sample["token_mask"], bool)[: self.text_len]
        if self.state_token:
            out[t0 + self.text_len] = True
        return out

    def num_tokens(self, sample: dict) -> int:
        return int(self.valid(sample).sum())


# ------------------------------------------------------------------------------------------
# Per-sample arrays and layouts (numpy, host side)
# ------------------------------------------------------------------------------------------


def collate(samples: Sequence[dict], spec: PrefixSpec, slots: int) -> dict[str, Any]:
    """Stack `samples` into `slots` sample slots (the rest empty). Keys: see the module docstring."""
    if not 0 < len(samples) <= slots:
        raise ValueError(f"{len(samples)} samples for {slots} slots")
    n, s = spec.image_size, spec
    pad = slots - len(samples)

    def stack(key, dtype):
        x = np.stack([np.asarray(smp[key], dtype) for smp in samples])
        return np.concatenate([x, np.zeros((pad, *x.shape[1:]), dtype)]) if pad else x

    images, masks = {}, {}
    for c in s.cameras:
        img = np.zeros((slots, n, n, 3), np.uint8)
        m = np.zeros((slots,), bool)
        for i, smp in enumerate(samples):
            if c in smp["images"]:
                v = smp["images"][c]
                if v.shape != (n, n, 3):
                    raise ValueError(f"camera {c!r} image has shape {v.shape}, expected {(n, n, 3)} (resize it)")
                img[i], m[i] = v, True
        images[c], masks[c] = img, m
    extra = [c for smp in samples for c in smp["images"] if c not in s.cameras]
    if extra:
        raise ValueError(f"cameras {sorted(set(extra))} are not in PrefixSpec.cameras {s.cameras}")
    return {
        "images": images, "image_masks": masks,
        "tokens": stack("tokens", np.int32), "token_mask": stack("token_mask", bool),
        "state": stack("state", np.float32), "actions": stack("actions", np.float32),
        "action_mask": stack("action_mask", bool), "task_index": stack("task_index", np.int32),
        "index": np.concatenate([np.asarray([smp["index"] for smp in samples], np.int32),
                                 np.full(pad, -1, np.int32)]),
        "sample_mask": np.arange(slots) < len(samples),
    }


def layout(valid: np.ndarray, rows: Sequence[int], num_rows: int, row_len: int) -> dict[str, np.ndarray]:
    """Layout arrays for samples `valid` bool [n, L] placed in `rows[i]` (in order), compacted.

    Returns prefix_index / segment_ids / positions int32 [num_rows, row_len] and
    sample_row / sample_segment int32 [n] (n = number of sample slots; slots past
    len(rows) are empty).
    """
    n_slots, length = valid.shape
    index = np.zeros((num_rows, row_len), np.int32)
    seg = np.zeros((num_rows, row_len), np.int32)
    pos = np.zeros((num_rows, row_len), np.int32)
    fill = np.zeros(num_rows, np.int64)
    nseg = np.zeros(num_rows, np.int32)
    sample_row = np.zeros(n_slots, np.int32)
    sample_seg = np.zeros(n_slots, np.int32)
    for i, r in enumerate(rows):
        slots = np.flatnonzero(valid[i])
        k, a = len(slots), int(fill[r])
        if a + k > row_len:
            raise ValueError(f"row {r} overflows: {a} + {k} tokens > row length {row_len}")
        nseg[r] += 1
        index[r, a:a + k] = i * length + slots
        seg[r, a:a + k] = nseg[r]
        pos[r, a:a + k] = np.arange(k)
        fill[r] += k
        sample_row[i], sample_seg[i] = r, nseg[r]
    return {"prefix_index": index, "segment_ids": seg, "positions": pos,
            "sample_row": sample_row, "sample_segment": sample_seg}


def fixed_layout(valid: np.ndarray, num_samples: int) -> dict[str, np.ndarray]:
    """One sample per row, tokens where the model's layout puts them (holes = segment 0)."""
    n, length = valid.shape
    seg = valid.astype(np.int32)
    seg[num_samples:] = 0
    pos = np.where(seg > 0, np.cumsum(seg, axis=1) - 1, 0).astype(np.int32)
    index = (np.arange(n)[:, None] * length + np.arange(length)[None]).astype(np.int32)
    live = np.arange(n) < num_samples
    return {"prefix_index": index, "segment_ids": seg, "positions": pos,
            "sample_row": np.arange(n, dtype=np.int32), "sample_segment": live.astype(np.int32)}


# ------------------------------------------------------------------------------------------
# The batching iterator (grain), checkpointable
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Packing:
    spec: PrefixSpec
    mode: Batching
    slots: int  # N sample slots per batch
    rows: int  # R (packed)
    row_len: int  # T (packed)
    max_segments: int  # samples per row at most (packed)


class _BatchIterator(grain.DatasetIterator):
    """Builds batches from a sample stream. State = the parent's state at the batch's first sample."""

    def __init__(self, parent: grain.DatasetIterator, p: _Packing):
        super().__init__(parent)
        self._p = p
        self._start = parent.get_state()
        self._carry: tuple[dict, int] | None = None  # (sample, its token count) read but not yet batched

    def __next__(self) -> dict[str, Any]:
        p = self._p
        samples: list[dict] = []
        rows: list[int] = []
        fill = np.zeros(max(p.rows, 1), np.int64)
        segs = np.zeros(max(p.rows, 1), np.int64)
        while len(samples) < p.slots:
            if self._carry is not None:
                smp, k = self._carry
                self._carry = None
            else:
                before = self._parent.get_state()
                try:
                    smp = next(self._parent)
                except StopIteration:
                    if not samples:
                        raise
                    break
                k = p.spec.num_tokens(smp)
                if not samples:
                    self._start = before
            if p.mode != "packed":
                samples.append(smp)
                rows.append(len(rows))
                continue
            if k > p.row_len:
                raise ValueError(f"a sample of {k} prefix tokens cannot fit a packed row of {p.row_len}")
            free = np.flatnonzero((fill + k <= p.row_len) & (segs < p.max_segments))
            if len(free) == 0:
                self._carry = (smp, k)
                self._start = before
                break
            r = int(free[0])
            fill[r] += k
            segs[r] += 1
            samples.append(smp)
            rows.append(r)
        if self._carry is None:  # the next batch starts at whatever the parent yields next
            self._start = self._parent.get_state()
        return self._assemble(samples, rows)

    def _assemble(self, samples: list[dict], rows: list[int]) -> dict[str, Any]:
        p = self._p
        batch = collate(samples, p.spec, p.slots)
        valid = np.zeros((p.slots, p.spec.length), bool)
        for i, smp in enumerate(samples):
            valid[i] = p.spec.valid(smp)
        if p.mode == "fixed":
            batch.update(fixed_layout(valid, len(samples)))
        elif p.mode == "dynamic":
            longest = int(valid.sum(1).max())
            t = -(-longest // p.spec.seq_multiple) * p.spec.seq_multiple
            batch.update(layout(valid, rows, p.slots, t))
        else:
            batch.update(layout(valid, rows, p.rows, p.row_len))
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._start}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._start = state["parent"]
        self._carry = None


class PackedBatchDataset(grain.IterDataset):
    """Batches of `slots` sample slots from a sample stream, in one of the three modes.

    fixed/dynamic: exactly `slots` samples per batch (the last may be short: empty slots).
    packed: `rows` x `row_len` tokens, up to `slots` samples, at most `max_segments` per row.
    """

    def __init__(self, parent: grain.IterDataset, spec: PrefixSpec, mode: Batching, slots: int, *,
                 rows: int = 0, row_len: int = 0, max_segments: int = 0):
        super().__init__(parent)
        if mode not in ("fixed", "dynamic", "packed"):
            raise ValueError(f"unknown batching mode {mode!r}")
        if mode == "packed":
            row_len = row_len or 2 * spec.length
            rows = rows or slots
            max_segments = max_segments or slots
            if row_len < spec.length:
                raise ValueError(f"packed row length {row_len} < the longest possible prefix {spec.length}")
        self._p = _Packing(spec, mode, slots, rows, row_len, max_segments)

    @property
    def spec(self) -> PrefixSpec:
        return self._p.spec

    def __iter__(self) -> _BatchIterator:
        return _BatchIterator(self._parent.__iter__(), self._p)


# ------------------------------------------------------------------------------------------
# Model-side helpers (jax)
# ------------------------------------------------------------------------------------------


def gather_prefix(emb, prefix_index, segment_ids):
    """Per-sample prefix embeddings [N, L, W] -> packed rows [R, T, W] (padding zeroed)."""
    import jax.numpy as jnp

    n, length, w = emb.shape
    rows = jnp.take(emb.reshape(n * length, w), prefix_index, axis=0)
    return jnp.where((segment_ids > 0)[..., None], rows, 0).astype(emb.dtype)


def scatter_prefix(rows, prefix_index, segment_ids, num_samples: int, length: int):
    """Inverse of `gather_prefix`: packed rows [R, T, W] -> per-sample [N, L, W] (holes zero)."""
    import jax.numpy as jnp

    w = rows.shape[-1]
    idx = jnp.where(segment_ids > 0, prefix_index, num_samples * length)  # padding -> a dropped extra row
    out = jnp.zeros((num_samples * length + 1, w), rows.dtype).at[idx.reshape(-1)].set(rows.reshape(-1, w))
    return out[:-1].reshape(num_samples, length, w)
