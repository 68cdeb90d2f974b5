"""A grain `RandomAccessDataSource` of action-chunk training samples from a LeRobot dataset.

Record i is frame i of the dataset (global index). `source[i]` is a dict:

    actions       float32 [H, A]   actions of frames i .. i+H-1 of the same episode; past the
                                   episode end the last action is repeated
    action_mask   bool [H]         False where the window ran past the episode end
    state         float32 [S]      proprioceptive state of frame i
    images        {camera: uint8 [h, w, 3]}   camera name = feature key minus 'observation.images.'
    instruction   str              the task string of frame i
    task_index    int64 []
    episode_index, frame_index, index   int64 []

Access is random (O(1) per record), so grain shuffles are global and an iterator checkpoint is
a few integers. Records are built on demand; images are decoded from PNG per access.
"""

from __future__ import annotations

import numpy as np

from vlajax.data.lerobot import DatasetError, LeRobotData

__all__ = ["ActionChunkSource", "camera_name", "IMAGE_PREFIX"]

IMAGE_PREFIX = "observation.images."


def camera_name(feature_key: str) -> str:
    """'observation.images.agentview' -> 'agentview' (other keys are kept whole)."""
    return feature_key[len(IMAGE_PREFIX):] if feature_key.startswith(IMAGE_PREFIX) else feature_key


class ActionChunkSource:
    """Random access to action-chunk windows of `data` (see the module docstring for records)."""

    def __init__(
        self,
        data: LeRobotData,
        horizon: int,
        *,
        action_key: str = "action",
        state_key: str = "observation.state",
        cameras: tuple[str, ...] | None = None,
    ):
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        info = f"{data.root}/meta/info.json"
        for key in (action_key, state_key):
            if key not in data.columns:
                raise DatasetError(f"{info}: the dataset has no feature {key!r} (features: {sorted(data.features)})")
        by_name = {camera_name(k): k for k in data.cameras}
        cameras = tuple(sorted(by_name)) if cameras is None else tuple(cameras)
        unknown = [c for c in cameras if c not in by_name]
        if unknown:
            raise DatasetError(f"{info}: cameras {unknown} are not in the dataset (have {sorted(by_name)})")
        self.data, self.horizon = data, horizon
        self.cameras = cameras
        self._camera_keys = {c: by_name[c] for c in cameras}
        self._actions = np.asarray(data.columns[action_key], np.float32).reshape(len(data), -1)
        self._state = np.asarray(data.columns[state_key], np.float32).reshape(len(data), -1)
        self._episode_end = data.episode_to[data.episode_of]  # [N] exclusive end of each frame's episode
        self.action_key, self.state_key = action_key, state_key

    @property
    def action_dim(self) -> int:
        return self._actions.shape[1]

    @property
    def state_dim(self) -> int:
        return self._state.shape[1]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict:
        i = int(index)
        if not 0 <= i < len(self):
            raise IndexError(f"record {i} outside [0, {len(self)})")
        idx = i + np.arange(self.horizon)
        end = int(self._episode_end[i])
        mask = idx < end
        cols = self.data.columns
        return {
            "actions": self._actions[np.minimum(idx, end - 1)],
            "action_mask": mask,
            "state": self._state[i],
            "images": {c: self.data.image(k, i) for c, k in self._camera_keys.items()},
            "instruction": self.data.task(i),
            "task_index": np.int64(cols["task_index"][i]),
            "episode_index": np.int64(cols["episode_index"][i]),
            "frame_index": np.int64(cols["frame_index"][i]),
            "index": np.int64(i),
        }

    def __repr__(self) -> str:  # grain uses it to check a restored DataLoader reads the same source
        return f"ActionChunkSource({self.data.root!r}, horizon={self.horizon}, cameras={self.cameras})"
