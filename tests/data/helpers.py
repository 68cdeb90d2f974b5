"""Small datasets for the data tests, written with `LeRobotWriter` (content mirrors the fixture)."""

from __future__ import annotations

import json
import os

import numpy as np

from vlajax.data.writer import LeRobotWriter, image_feature, video_feature

# Written by the real lerobot 0.6.1, kept in the repository (provenance: tests/fixtures/README.md).
FIXTURE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "fixtures", "lerobot-v3.0-images"))
TASKS = ("pick up the red cube and place it in the bowl", "push the green block to the left")
LENGTHS = (6, 7, 8)
AGENT, WRIST = "observation.images.agentview", "observation.images.wrist"


def fixture_action(e: int, t: int) -> np.ndarray:
    """The fixture README's known action of frame t in episode e."""
    return (np.arange(7) * 0.1 + e + t * 0.01).astype(np.float32)


def features(size: int = 32, video: bool = False) -> dict:
    camera = video_feature if video else image_feature
    return {
        "observation.state": {"dtype": "float32", "shape": [8], "names": None},
        "action": {"dtype": "float32", "shape": [7], "names": None},
        AGENT: camera(size, size),
        WRIST: camera(size, size),
    }


def episode(e: int, n: int, size: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + e)
    t = np.arange(n)
    return {
        "observation.state": rng.standard_normal((n, 8)).astype(np.float32),
        "action": np.stack([fixture_action(e, i) for i in t]),
        AGENT: rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
        WRIST: np.broadcast_to((10 * t).astype(np.uint8)[:, None, None, None], (n, size, size, 3)).copy(),
    }


def write_dataset(root: str, lengths=LENGTHS, tasks=None, size: int = 32, video: bool = False, **kw) -> str:
    """The fixture's content (3 episodes 6/7/8 frames at 10 fps, tasks 0, 1, 0) written by our writer."""
    tasks = tasks or [TASKS[e % 2] for e in range(len(lengths))]
    with LeRobotWriter(root, fps=10, features=features(size, video), **kw) as w:
        for e, n in enumerate(lengths):
            w.add_episode(episode(e, n, size), task=tasks[e])
    return root


def load_json(path):
    with open(path) as f:
        return json.load(f)


def save_json(path, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f)
