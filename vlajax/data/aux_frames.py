"""Aux-only samples mixed into the demonstrations: `data.grounding_fraction`.

    frames = vlajax.data.demos.grounding_frames(cfg)          # rendered first frames, no actions
    extra = AuxFrameSource(frames["images"], frames["state"], frames["instructions"], target, weight,
                           horizon=H, action_dim=A)
    mixed = MixedSource(demos, extra, fraction=0.25)      # 25% of each epoch's records are extra's

An `AuxFrameSource` record has the keys and shapes of an `ActionChunkSource` record, with
zero actions and an all-False `action_mask`: the SFT loss (`vlajax.sft.loop.loss_fn`) takes its
action term over the masked steps only, so such a sample trains the `model.aux_target` head
and nothing else. `MixedSource` is one random-access source (a grain shuffle over it is still
global and its checkpoint a few integers): records [0, len(main)) are `main`'s, the rest cycle
through `extra` as often as `fraction` asks.
"""

from __future__ import annotations

import numpy as np

from vlajax.data.lerobot import DatasetError
from vlajax.data.source import ActionChunkSource, grasp_place_stats

__all__ = ["AuxFrameSource", "MixedSource", "grasp_place_frame_targets"]


class AuxFrameSource:
    """Random access to in-memory frames without actions (record layout: `vlajax.data.source`).

    images {camera: uint8 [M, h, w, 3]}, state float32 [M, S], instructions [M] str, aux_target
    float32 [M, D] (normalized like the demonstrations'), aux_frame_weight float32 [] or [M].
    Records: `actions` zeros [horizon, action_dim], `action_mask` all False, `task_index` and
    `episode_index` -1 (no dataset task), `frame_index` 0, `index` the frame's number."""

    def __init__(self, images: dict[str, np.ndarray], state: np.ndarray, instructions, aux_target: np.ndarray,
                 aux_frame_weight: float | np.ndarray, *, horizon: int, action_dim: int):
        m = len(instructions)
        sizes = {c: len(v) for c, v in images.items()} | {"state": len(state), "aux_target": len(aux_target)}
        if m == 0 or any(n != m for n in sizes.values()):
            raise ValueError(f"aux frames: {m} instructions but {sizes}")
        self.images = {c: np.asarray(v, np.uint8) for c, v in images.items()}
        self.cameras = tuple(sorted(self.images))
        self.state = np.asarray(state, np.float32)
        self.instructions = list(instructions)
        self.aux_target = np.asarray(aux_target, np.float32)
        self.aux_frame_weight = np.broadcast_to(np.asarray(aux_frame_weight, np.float32), (m,))
        self.horizon, self.action_dim = horizon, action_dim

    def __len__(self) -> int:
        return len(self.instructions)

    def __getitem__(self, index: int) -> dict:
        i = int(index)
        if not 0 <= i < len(self):
            raise IndexError(f"aux frame {i} outside [0, {len(self)})")
        return {
            "actions": np.zeros((self.horizon, self.action_dim), np.float32),
            "action_mask": np.zeros(self.horizon, bool),
            "state": self.state[i],
            "images": {c: v[i] for c, v in self.images.items()},
            "instruction": self.instructions[i],
            "task_index": np.int64(-1),
            "episode_index": np.int64(-1),
            "frame_index": np.int64(0),
            "index": np.int64(i),
            "aux_target": self.aux_target[i],
            "aux_frame_weight": self.aux_frame_weight[i],
        }

    def __repr__(self) -> str:
        return f"AuxFrameSource({len(self)} frames, cameras={self.cameras})"


class MixedSource:
    """`main`'s records, then `extra`'s cycled so that they make `fraction` of the whole.

    len = len(main) + round(fraction / (1 - fraction) * len(main)); record len(main) + j is
    `extra[j % len(extra)]` with `index` len(main) + j (unique: per-sample random transforms seed
    on it). `extra` must hold `main`'s cameras (more are dropped) and the same state size."""

    def __init__(self, main: ActionChunkSource, extra: AuxFrameSource, fraction: float):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must be in (0, 1), got {fraction}")
        missing = [c for c in main.cameras if c not in extra.cameras]
        if missing:
            raise DatasetError(f"aux frames lack the dataset's cameras {missing} (have {list(extra.cameras)})")
        if extra.state.shape[1] != main.state_dim:
            raise DatasetError(f"aux frames' state has {extra.state.shape[1]} dims, the dataset's "
                               f"{main.state_dim}")
        if (main.aux is None) or extra.aux_target.shape[1] != main.aux.shape[1]:
            raise DatasetError("aux frames need a dataset source with the same aux_target dims "
                               f"(dataset: {None if main.aux is None else main.aux.shape[1]}, "
                               f"frames: {extra.aux_target.shape[1]})")
        self.main, self.extra, self.fraction = main, extra, fraction
        self.num_extra = max(1, round(fraction / (1.0 - fraction) * len(main)))
        # what downstream reads of a source (make_loader, Bridge): the dataset's
        self.data, self.cameras, self.horizon = main.data, main.cameras, main.horizon
        self.action_key, self.state_key = main.action_key, main.state_key
        self.action_dim, self.state_dim = main.action_dim, main.state_dim

    def __len__(self) -> int:
        return len(self.main) + self.num_extra

    def __getitem__(self, index: int) -> dict:
        i = int(index)
        n = len(self.main)
        if i < n:
            return self.main[i]
        if i >= len(self):
            raise IndexError(f"record {i} outside [0, {len(self)})")
        rec = self.extra[(i - n) % len(self.extra)]
        rec["images"] = {c: rec["images"][c] for c in self.cameras}
        rec["index"] = np.int64(i)
        return rec

    def __repr__(self) -> str:
        return f"MixedSource({self.main!r}, {self.extra!r}, fraction={self.fraction})"


def grasp_place_frame_targets(raw: np.ndarray, grasp_xy: np.ndarray, place_xy: np.ndarray) -> np.ndarray:
    """`model.aux_target='grasp_place'` targets for frames without an episode: the named cube's xy
    [M, 2] as the grasp point and the square's xy [M, 2] as the place point (where the expert's
    fingertips close, within its 6 mm tolerance, and open), normalized with the statistics of the
    demonstrations' raw targets `raw` float32 [N, 4] (`vlajax.data.source.grasp_place_raw`). -> [M, 4]."""
    mean, std = grasp_place_stats(raw)
    out = np.concatenate([grasp_xy, place_xy], 1).astype(np.float32)
    if out.shape[1] != raw.shape[1]:
        raise ValueError(f"targets have {out.shape[1]} dims, the demonstrations' {raw.shape[1]}")
    return ((out - mean) / std).astype(np.float32)
