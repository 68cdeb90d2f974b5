"""What the LIBERO worker and its parent agree on: conventions, the wire keys and the channel.

Imported by BOTH sides: the worker in the LIBERO venv (numpy, PIL, msgpack -- no jax, nothing of
our .venv) and the parent in our .venv. Nothing here imports libero or jax; the resize with pad is
`vlajax.shared.resize_pad`'s (numpy and PIL only), re-exported here.

Conventions (openpi's LIBERO example, examples/libero/main.py; our code):

    cameras       agentview + robot0_eye_in_hand rendered at 256 x 256, rotated 180 degrees
                  (`img[::-1, ::-1]`), resized with zero padding to 224 (PIL bilinear)
    state         float32 [8]: eef pos (3) + axis-angle of the eef quaternion (3) + gripper qpos (2)
    action        float [7]: OSC_POSE delta (6) + gripper (1, -1 open / +1 close); a chunk [H, >=7]
                  from the policy, its first `replan_steps` actions executed, then a new request
    wait          the first `num_steps_wait` (10) steps send DUMMY_ACTION (objects settle)
    step limits   MAX_STEPS per suite (spatial 220, object 280, goal 300, libero_10 520, libero_90 400),
                  counted after the wait; success = LIBERO's `done` (its BDDL goal check)

Policy requests (openpi websocket protocol, msgpack-numpy) carry openpi's keys plus extras an
ordinary openpi server ignores and an RL server records (`EXTRA_KEYS`).

Channel (parent <-> worker), one JSON object per line:

    parent -> worker (stdin)   {"cmd": "episode", **Episode fields}   |   {"cmd": "exit"}
    worker -> parent (fd 3 when given, else the original stdout; library prints go to stderr)
        {"event": "hello", "pid", "python", "gl"}               worker ready
        {"event": "building", "id", "suite", "task"}            env build started (26-83 s)
        {"event": "built", "id", "seconds"}
        {"event": "progress", "id", "step"}                     after every policy call / 20 steps
        {"event": "result", "id", **result}                     episode finished (see worker.Slot.result;
                                                                'record': the .rec.npz path of a recorded one)
        {"event": "error", "id", "message"}                     episode failed (exception); not retried
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np

from vlajax.shared.resize_pad import resize_with_pad
from vlajax.shared.robots import PROMPT, camera_keys, state_key

__all__ = ["DEMO_INITS", "DUMMY_ACTION", "EVAL_INITS", "EXTRA_KEYS", "MAX_STEPS", "Episode", "axis_angle",
           "camera_size_for", "convert_image", "declared_image_size", "make_request", "max_steps_for", "read_line",
           "resize_with_pad", "send_line", "state_vector", "write_atomic_npy", "write_line"]

DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)
ACTION_DIM = 7
STATE_DIM = 8
CAMERAS = ("agentview", "robot0_eye_in_hand")  # robosuite camera names; obs keys are f"{name}_image"
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
# LIBERO's 50 fixed initial states per task, split: demonstrations are recorded from DEMO_INITS only, so an
# evaluation on EVAL_INITS never starts from a scene a demonstration showed
DEMO_INITS, EVAL_INITS = range(25, 50), range(0, 25)
# openpi's LIBERO keys (what `vlajax.serve --keys libero` and openpi's pi05_libero read)
IMAGE_KEY, WRIST_KEY = camera_keys("libero")["agentview"], camera_keys("libero")["wrist"]
STATE_KEY, PROMPT_KEY = state_key("libero"), PROMPT
# extras for an RL server; an openpi server ignores keys it does not read
EXTRA_KEYS = {"episode": "libero/episode_id",  # str: the parent's episode id
              "step": "libero/step",  # int: env steps taken after the wait
              "reward": "libero/reward",  # float: reward of the last env step (LIBERO: 1.0 on success)
              "done": "libero/done",  # bool: the episode ended (this request's actions are not executed)
              "success": "libero/success"}  # bool: LIBERO's goal check at this step


OPENPI_RENDER_SIZE = 256  # openpi's LIBERO_ENV_RESOLUTION: rendered, then resized with pad to its 224


def camera_size_for(image_size: int) -> int:
    """The render side for a policy that reads `image_size` px images: openpi's 224 px policies get LIBERO's 256
    resized with pad (openpi's LIBERO example, as they were trained); any other size is rendered at that size,
    so the policy sees the pixels its demos were recorded with (`demos` renders at `data.demo_image_size`)."""
    return OPENPI_RENDER_SIZE if 224 <= image_size <= OPENPI_RENDER_SIZE else image_size


def declared_image_size(metadata: dict[str, Any]) -> int:
    """The agentview image side a policy server declares in its metadata (224 when it declares none)."""
    obs = metadata.get("observation", {}) if isinstance(metadata, dict) else {}
    shape = (obs.get(IMAGE_KEY) or {}).get("shape") if isinstance(obs, dict) else None
    return int(shape[0]) if shape else 224


def max_steps_for(suite: str) -> int:
    """The step limit of a suite (LIBERO-PRO variants `libero_spatial_swap` ... take their base's)."""
    for base in sorted(MAX_STEPS, key=len, reverse=True):
        if suite == base or suite.startswith(base + "_"):
            return MAX_STEPS[base]
    raise ValueError(f"no step limit for suite {suite!r} (bases: {', '.join(MAX_STEPS)})")


@dataclasses.dataclass(frozen=True)
class Episode:
    """One episode a worker runs: LIBERO's fixed initial state `init` of task `task` of `suite`."""

    id: str
    suite: str
    task: int
    init: int
    max_steps: int = 0  # 0 = the suite's limit
    num_steps_wait: int = 10
    replan_steps: int = 5
    camera_size: int = 256  # render size (openpi's LIBERO_ENV_RESOLUTION)
    resize: int = 224  # policy image size (resize-with-pad); the server's declared size wins when it has one
    seed: int = 7  # env.seed (openpi: it affects object positions even with a fixed initial state)
    # 'server' (openpi-protocol requests) | 'dummy' (DUMMY_ACTION throughout) | 'expert' (libero_spatial's
    # scripted expert from the object poses, vlajax.libero.expert); the last two need no server
    policy: str = "server"
    cameras: bool = True  # False: physics + controller only (no renderer; 'dummy' policy only)
    render: str = "policy"  # 'policy': render only the frames a request reads | 'all': every step (openpi)
    video: bool = True  # keep the agentview images the requests carried (one per request) -> frames file
    wrist_video: bool = False  # ... and the wrist images (<frames>.wrist.npy)
    hard_reset: bool = True  # robosuite's hard reset (reload model + renderer each episode; LIBERO's default)
    report_terminal: bool = False  # send one last request with libero/done = True (RL servers record it)
    # keep every step after the wait -- both cameras at camera_size as the policy sees them before its resize
    # (rotated 180 degrees), state [8], the executed action [7] -> <frames_dir>/<id>.rec.npz (needs render 'all')
    record: bool = False

    def __post_init__(self):
        if self.policy not in ("server", "dummy", "expert"):
            raise ValueError(f"episode policy must be 'server', 'dummy' or 'expert', got {self.policy!r}")
        if self.render not in ("policy", "all"):
            raise ValueError(f"render must be 'policy' or 'all', got {self.render!r}")
        if not self.cameras and self.policy == "server":
            raise ValueError("a policy-server episode needs cameras")
        if self.record and (self.render != "all" or not self.cameras):
            raise ValueError("a recorded episode renders every step: render='all' with cameras")
        if self.replan_steps < 1 or self.num_steps_wait < 0 or self.max_steps < 0:
            raise ValueError("replan_steps >= 1, num_steps_wait >= 0, max_steps >= 0")

    @property
    def limit(self) -> int:
        return self.max_steps or max_steps_for(self.suite)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Episode:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ------------------------------------------------------------------ observation conversion


def axis_angle(quat: np.ndarray) -> np.ndarray:
    """Axis-angle float64 [3] of a unit quaternion (x, y, z, w) [4] (robosuite's convention)."""
    q = np.array(quat, dtype=np.float64)
    w = min(max(q[3], -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def state_vector(obs: dict[str, np.ndarray]) -> np.ndarray:
    """float32 [8]: eef pos, axis-angle(eef quat), gripper qpos of a LIBERO observation."""
    return np.concatenate([obs["robot0_eef_pos"], axis_angle(obs["robot0_eef_quat"]),
                           obs["robot0_gripper_qpos"]]).astype(np.float32)


def convert_image(img: np.ndarray, size: int) -> np.ndarray:
    """A rendered LIBERO camera image uint8 [H, W, 3] -> what the policy reads: rotated 180 degrees,
    resized with padding to uint8 [size, size, 3]."""
    return resize_with_pad(np.ascontiguousarray(img[::-1, ::-1]), size, size)


def make_request(obs: dict[str, np.ndarray], prompt: str, size: int, extras: dict[str, Any]) -> dict[str, Any]:
    """One policy request (openpi's LIBERO keys + `EXTRA_KEYS`) from a LIBERO observation."""
    req = {IMAGE_KEY: convert_image(obs["agentview_image"], size),
           WRIST_KEY: convert_image(obs["robot0_eye_in_hand_image"], size),
           STATE_KEY: state_vector(obs), PROMPT_KEY: prompt}
    req.update({EXTRA_KEYS[k]: v for k, v in extras.items()})
    return req


# ------------------------------------------------------------------ channel


def write_line(stream, obj: dict[str, Any]) -> None:
    """One JSON line, flushed (the channel's unit)."""
    stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
    stream.flush()


def send_line(pipe, obj: dict[str, Any]) -> bool:
    """`write_line` on a binary pipe (a worker's stdin); False when the other end is gone."""
    try:
        pipe.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
        pipe.flush()
        return True
    except (BrokenPipeError, OSError, ValueError):
        return False


def read_line(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object of one channel line, or None for a line that is not one (stray output)."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def write_atomic_npy(path: str, array: np.ndarray) -> str:
    """`np.save` to a temporary file in the same directory, then rename: readers never see half a file."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
    os.replace(tmp, path)
    return path
