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
    sample_mask bool [N] (False = empty slot), aux_target float32 [N, D] and aux_frame_weight
    float32 [N] (the auxiliary loss's weight; only when the samples have them)
  layout of the prefix transformer's input rows (R rows of T tokens):
    prefix_index int32 [R, T]   source of each token in the flattened per-sample prefix [N * length]
    segment_ids  int32 [R, T]   1, 2, ... per sample within a row; 0 = padding
    positions    int32 [R, T]   0 .. n-1 within each sample (what the unpacked prefix uses)
    sample_row, sample_segment int32 [N]   the row and segment id holding sample n (0, 0 if empty)
    sample_start, sample_tokens int32 [N]  where sample n's tokens start in its row, and how many
                                           (fixed: 0 and `length`, holes included)

  fixed    R = N, T = length; row n is sample n's layout as is (holes are segment 0).
  dynamic  R = N, T = the longest prefix in the batch rounded up to `seq_multiple`; each row
           holds its sample's tokens compacted to the front.
  packed   R rows of T tokens hold up to N samples, first-fit in arrival order, at most
           `max_segments` per row; a batch is emitted when the next sample fits nowhere (its
           tokens or the N slots are full), so the number of samples per batch varies.

A batch may be several independent packing `groups` concatenated along dim 0 (a group's rows
hold only its own samples); with one group per device the gathers below stay on-device.

The model consumes a batch as `emb = embed_prefix(obs)` [N, length, W] ->
`gather_prefix(emb, prefix_index, segment_ids, groups)` [R, T, W] -> `encode_prefix(x,
segment_ids, positions)`: attention with segment ids is then exactly per sample. The action
suffix of sample n attends to `rows_to_samples(cache arrays, segment_ids, sample_row,
sample_segment, groups)`: its row's keys/values, segment 1 on its own tokens only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import grain
import numpy as np

__all__ = [
    "PrefixSpec", "Batching", "collate", "layout", "PackedBatchDataset", "gather_prefix", "scatter_prefix",
    "rows_to_samples",
]

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
        **({"aux_target": stack("aux_target", np.float32), "aux_frame_weight": stack("aux_frame_weight", np.float32)}
           if "aux_target" in samples[0] else {}),
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
    start = np.zeros(n_slots, np.int32)
    count = np.zeros(n_slots, np.int32)
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
        sample_row[i], sample_seg[i], start[i], count[i] = r, nseg[r], a, k
    return {"prefix_index": index, "segment_ids": seg, "positions": pos,
            "sample_row": sample_row, "sample_segment": sample_seg, "sample_start": start, "sample_tokens": count}


def fixed_layout(valid: np.ndarray, num_samples: int) -> dict[str, np.ndarray]:
    """One sample per row, tokens where the model's layout puts them (holes = segment 0)."""
    n, length = valid.shape
    seg = valid.astype(np.int32)
    seg[num_samples:] = 0
    pos = np.where(seg > 0, np.cumsum(seg, axis=1) - 1, 0).astype(np.int32)
    index = (np.arange(n)[:, None] * length + np.arange(length)[None]).astype(np.int32)
    live = np.arange(n) < num_samples
    return {"prefix_index": index, "segment_ids": seg, "positions": pos,
            "sample_row": np.arange(n, dtype=np.int32), "sample_segment": live.astype(np.int32),
            "sample_start": np.zeros(n, np.int32), "sample_tokens": np.where(live, length, 0).astype(np.int32)}


# ------------------------------------------------------------------------------------------
# The batching iterator (grain), checkpointable
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Packing:
    spec: PrefixSpec
    mode: Batching
    slots: int  # N sample slots per group
    rows: int  # R rows per group (packed)
    row_len: int  # T (packed)
    max_segments: int  # samples per row at most (packed)
    groups: int  # independent groups per batch, concatenated along dim 0


class _BatchIterator(grain.DatasetIterator):
    """Builds batches from a sample stream. State = the parent's state at the batch's first sample."""

    def __init__(self, parent: grain.DatasetIterator, p: _Packing):
        super().__init__(parent)
        self._p = p
        self._start = parent.get_state()
        self._carry: tuple[dict, int, Any] | None = None  # (sample, tokens, state before it): read, not batched
        self._done = False

    def _read(self) -> tuple[dict, int, Any] | None:
        if self._carry is not None:
            item, self._carry = self._carry, None
            return item
        if self._done:
            return None
        before = self._parent.get_state()
        try:
            smp = next(self._parent)
        except StopIteration:
            self._done = True
            return None
        return smp, self._p.spec.num_tokens(smp), before

    def _fill(self) -> tuple[list[dict], list[int], Any]:
        """One group's samples and their rows -> (samples, rows, parent state before the first)."""
        p = self._p
        samples: list[dict] = []
        rows: list[int] = []
        first_state = None
        fill = np.zeros(max(p.rows, 1), np.int64)
        segs = np.zeros(max(p.rows, 1), np.int64)
        while len(samples) < p.slots:
            item = self._read()
            if item is None:
                break
            smp, k, before = item
            if p.mode == "packed":
                if k > p.row_len:
                    raise ValueError(f"a sample of {k} prefix tokens cannot fit a packed row of {p.row_len}")
                free = np.flatnonzero((fill + k <= p.row_len) & (segs < p.max_segments))
                if len(free) == 0:
                    self._carry = item
                    break
                r = int(free[0])
                fill[r] += k
                segs[r] += 1
            else:
                r = len(rows)
            if first_state is None:
                first_state = before
            samples.append(smp)
            rows.append(r)
        return samples, rows, first_state

    def __next__(self) -> dict[str, Any]:
        groups = [self._fill() for _ in range(self._p.groups)]
        if not groups[0][0]:
            raise StopIteration
        self._start = self._carry[2] if self._carry is not None else self._parent.get_state()
        return self._assemble([(g[0], g[1]) for g in groups])

    def _assemble(self, groups: list[tuple[list[dict], list[int]]]) -> dict[str, Any]:
        p = self._p
        template = None
        parts = []
        valids = []
        for samples, _ in groups:
            valid = np.zeros((p.slots, p.spec.length), bool)
            for i, smp in enumerate(samples):
                valid[i] = p.spec.valid(smp)
            valids.append(valid)
        if p.mode == "dynamic":
            longest = max(int(v.sum(1).max()) for v in valids)
            t = -(-longest // p.spec.seq_multiple) * p.spec.seq_multiple
        for (samples, rows), valid in zip(groups, valids):
            if samples:
                batch = collate(samples, p.spec, p.slots)
                template = template or batch
            else:  # the stream ended: an all-empty group shaped like the first
                batch = _zeros_like_batch(template)
                batch["index"] = np.full(p.slots, -1, np.int32)
            if p.mode == "fixed":
                batch.update(fixed_layout(valid, len(samples)))
            elif p.mode == "dynamic":
                batch.update(layout(valid, rows, p.slots, t))
            else:
                batch.update(layout(valid, rows, p.rows, p.row_len))
            parts.append(batch)
        return _concat_groups(parts, p.slots * p.spec.length)

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._start}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._start = state["parent"]
        self._carry = None
        self._done = False


def _zeros_like_batch(tree: dict[str, Any]) -> dict[str, Any]:
    """Zeros shaped like a (nested dict) batch."""
    return {k: _zeros_like_batch(v) if isinstance(v, dict) else np.zeros_like(v) for k, v in tree.items()}


def _concat_groups(parts: list[dict[str, Any]], group_tokens: int) -> dict[str, Any]:
    """Concatenate groups along dim 0; layout indices of group g are offset to address the batch."""
    if len(parts) == 1:
        return parts[0]
    rows = parts[0]["segment_ids"].shape[0]
    out: dict[str, Any] = {}
    for k, v in parts[0].items():
        if isinstance(v, dict):
            out[k] = {c: np.concatenate([p[k][c] for p in parts]) for c in v}
        elif k == "prefix_index":
            out[k] = np.concatenate([p[k] + np.int32(g * group_tokens) for g, p in enumerate(parts)])
        elif k == "sample_row":
            out[k] = np.concatenate([p[k] + np.int32(g * rows) for g, p in enumerate(parts)])
        else:
            out[k] = np.concatenate([p[k] for p in parts])
    return out


class PackedBatchDataset(grain.IterDataset):
    """Batches from a sample stream, in one of the three modes.

    fixed/dynamic: `slots` samples per group (the last batch may have empty slots).
    packed: `rows` x `row_len` tokens per group hold up to `slots` samples, at most
    `max_segments` per row. `groups` independent groups are concatenated along dim 0; a
    group's rows reference only its own samples, so with groups = the data shards of a
    process, `gather_prefix(..., groups=...)` never leaves a device.
    """

    def __init__(self, parent: grain.IterDataset, spec: PrefixSpec, mode: Batching, slots: int, *,
                 rows: int = 0, row_len: int = 0, max_segments: int = 0, groups: int = 1):
        super().__init__(parent)
        if mode not in ("fixed", "dynamic", "packed"):
            raise ValueError(f"unknown batching mode {mode!r}")
        if groups < 1 or slots % groups or rows % groups:
            raise ValueError(f"groups={groups} must divide slots={slots} and rows={rows}")
        if mode == "packed":
            row_len = row_len or 2 * spec.length
            rows = rows or slots
            max_segments = max_segments or slots
            if row_len < spec.length:
                raise ValueError(f"packed row length {row_len} < the longest possible prefix {spec.length}")
        self._p = _Packing(spec, mode, slots // groups, rows // groups, row_len, max_segments, groups)

    @property
    def spec(self) -> PrefixSpec:
        return self._p.spec

    def __iter__(self) -> _BatchIterator:
        return _BatchIterator(self._parent.__iter__(), self._p)


# ------------------------------------------------------------------------------------------
# Model-side helpers (jax)
# ------------------------------------------------------------------------------------------


def gather_prefix(emb, prefix_index, segment_ids, groups: int = 1):
    """Per-sample prefix embeddings [N, L, W] -> packed rows [R, T, W] (padding zeroed).

    With `groups` > 1 (the batch's packing groups), each group gathers from its own samples
    only: under a `dp` sharding of dim 0 with groups aligned to shards, no data crosses devices.
    """
    import jax
    import jax.numpy as jnp

    n, length, w = emb.shape
    r, t = prefix_index.shape
    e = emb.reshape(groups, (n // groups) * length, w)
    idx = prefix_index.reshape(groups, r // groups, t) - (jnp.arange(groups) * (n // groups) * length)[:, None, None]
    rows = jax.vmap(lambda a, i: jnp.take(a, i, axis=0, mode="clip"))(e, idx).reshape(r, t, w)
    return jnp.where((segment_ids > 0)[..., None], rows, 0).astype(emb.dtype)


def scatter_prefix(rows, prefix_index, segment_ids, num_samples: int, length: int):
    """Inverse of `gather_prefix`: packed rows [R, T, W] -> per-sample [N, L, W] (holes zero)."""
    import jax.numpy as jnp

    w = rows.shape[-1]
    idx = jnp.where(segment_ids > 0, prefix_index, num_samples * length)  # padding -> a dropped extra row
    out = jnp.zeros((num_samples * length + 1, w), rows.dtype).at[idx.reshape(-1)].set(rows.reshape(-1, w))
    return out[:-1].reshape(num_samples, length, w)


def rows_to_samples(rows_tree, segment_ids, sample_row, sample_segment, groups: int = 1, *,
                    sample_start=None, length: int | None = None):
    """Per-row prefix results -> per-sample views, for the action suffix of packed batches.

    rows_tree: arrays with leading dims [R, T] (e.g. each layer's keys/values [R, T, KVH, D]
    and the row positions [R, T]). Returns the same arrays per sample and int32 segment ids
    that are 1 exactly on sample n's own prefix tokens. A suffix that attends to these with
    segment id 1 and positions starting at the sample's token count sees what it would see
    after the sample's unpacked prefix. `groups` as in `gather_prefix` (no collectives when
    the groups match the dp shards).

    Without `sample_start`: each sample gets its whole row, [N, T, ...]. With `sample_start`
    (the batch's int32 [N]) and `length` (>= any sample's token count, e.g. the model's
    `prefix_len`): only the `length` tokens from the sample's start, [N, length, ...], so the
    suffix attends to as many keys as in the unpacked model, not to the whole packed row.
    """
    import jax
    import jax.numpy as jnp

    r, t = segment_ids.shape
    n = sample_row.shape[0]
    row_local = sample_row.reshape(groups, n // groups) - (jnp.arange(groups) * (r // groups))[:, None]
    if sample_start is None:
        flat_idx = row_local[..., None] * t + jnp.arange(t)  # [G, N/G, T]: the whole row
    else:
        flat_idx = (row_local * t + sample_start.reshape(groups, n // groups))[..., None] + jnp.arange(length)

    def take(x):
        xg = x.reshape(groups, (r // groups) * t, *x.shape[2:])
        out = jax.vmap(lambda a, i: jnp.take(a, i, axis=0, mode="clip"))(xg, flat_idx)
        return out.reshape(n, flat_idx.shape[-1], *x.shape[2:])

    own = take(segment_ids) == sample_segment[:, None]
    if sample_start is not None:  # a window running past its row's end reads the next row: not ours
        own &= (sample_start[:, None] + jnp.arange(length)) < t
    own &= (sample_segment[:, None] > 0)
    return jax.tree.map(take, rows_tree), own.astype(jnp.int32)
