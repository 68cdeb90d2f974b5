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
    aux_target    float32 [D]      only with `aux=`: the frame's auxiliary target (`grasp_place_targets`)
    aux_frame_weight float32 []    only with `aux=`: the auxiliary loss's weight on this frame (0 = not counted)

Access is random (O(1) per record), so grain shuffles are global and an iterator checkpoint is
a few integers. Records are built on demand; images are decoded from PNG per access.
"""

from __future__ import annotations

import numpy as np

from vlajax.data.lerobot import DatasetError, LeRobotData, layout_keys

__all__ = ["ActionChunkSource", "camera_name", "grasp_place_raw", "grasp_place_stats", "grasp_place_targets",
           "IMAGE_PREFIX"]

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
        action_key: str | None = None,  # None: the dataset's layout's (`lerobot.layout_keys`)
        state_key: str | None = None,
        cameras: tuple[str, ...] | None = None,
        aux: np.ndarray | None = None,
        aux_frame_weight: np.ndarray | None = None,
    ):
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        info = f"{data.root}/meta/info.json"
        default_action, default_state = layout_keys(data.features)
        action_key, state_key = action_key or default_action, state_key or default_state
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
        if aux is not None and len(aux) != len(data):
            raise ValueError(f"aux has {len(aux)} rows for {len(data)} frames")
        self.aux = None if aux is None else np.asarray(aux, np.float32)
        weight = np.ones(len(data), np.float32) if aux_frame_weight is None else aux_frame_weight
        self.aux_frame_weight = None if aux is None else np.asarray(weight, np.float32)

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
        extra = {} if self.aux is None else {"aux_target": self.aux[i], "aux_frame_weight": self.aux_frame_weight[i]}
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
            **extra,
        }

    def __repr__(self) -> str:  # grain uses it to check a restored DataLoader reads the same source
        return f"ActionChunkSource({self.data.root!r}, horizon={self.horizon}, cameras={self.cameras})"


START_RADIUS = 0.02  # m: 'grasp_place_start' trains on frames whose fingertip xy is this close to the first one


def grasp_place_targets(source: ActionChunkSource) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`model.aux_target='grasp_place'` of every frame -> (float32 [N, 4] normalized per dim over the
    frames, bool [N] True before the episode's grasp frame, bool [N] True while the fingertip xy is
    within `START_RADIUS` of the episode's first frame and before the grasp). The raw targets:
    `grasp_place_raw`."""
    raw, before, start = grasp_place_raw(source)
    mean, std = grasp_place_stats(raw)
    return (raw - mean) / std, before, start


def grasp_place_stats(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The normalization of `grasp_place_targets`: per-dim mean and std (floored at 1e-6) [4] of the raw
    targets float32 [N, 4] (`grasp_place_raw`); anything predicted in those units maps back with them."""
    return raw.mean(0), np.maximum(raw.std(0), 1e-6)


def grasp_place_raw(source: ActionChunkSource) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`grasp_place_targets` before normalization: float32 [N, 4] in metres, and the two masks.

    Per episode (tabletop layout: state[:2] = fingertip-centre xy, action[3] > 0 = close the
    gripper): state[:2] at the first frame whose action closes the gripper (where the expert grasps
    the target cube), then state[:2] at the episode's last frame (where it placed it). Both are
    fixed for the whole episode, so they are a function of the initial scene and the instruction
    only. (Heights are left out: the grasp and placement heights are constant up to noise, which
    normalization would blow up to unit variance.) An episode that never closes its gripper is an
    error (its grasp point is undefined). The mask is what `'grasp_place_pregrasp'` trains on: after
    the grasp the gripper's own position in the images gives the grasp point away. That of
    `'grasp_place_start'` is the third: the expert heads for the target from the first step, so
    within a few frames the gripper's position tells the target's side; only the first frames
    (~3 per episode in the object demos) show nothing but the scene and the instruction."""
    d = source.data
    actions, state = source._actions, source._state
    if actions.shape[1] < 4 or state.shape[1] < 2:
        raise DatasetError(f"{d.root}: model.aux_target='grasp_place' needs action[3] (gripper) and state[:2] "
                           f"(fingertip xy); the dataset has {actions.shape[1]} action, {state.shape[1]} state dims")
    out = np.zeros((len(d), 4), np.float32)
    before = np.zeros(len(d), bool)
    start = np.zeros(len(d), bool)
    for e, (a, b) in enumerate(zip(d.episode_from.tolist(), d.episode_to.tolist())):
        closed = np.flatnonzero(actions[a:b, 3] > 0)
        if not len(closed):
            raise DatasetError(f"{d.root}: episode {e} never closes the gripper (action[3] > 0): "
                               "model.aux_target='grasp_place' needs a grasp in every episode")
        out[a:b, :2] = state[a + closed[0], :2]
        out[a:b, 2:] = state[b - 1, :2]
        before[a:a + closed[0]] = True
        near = np.linalg.norm(state[a:b, :2] - state[a, :2], axis=1) < START_RADIUS
        start[a:b] = near & before[a:b]
    return out, before, start
