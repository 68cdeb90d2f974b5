"""A small synthetic LeRobot dataset in the demos' layout (2 cameras, state 8, action 4), and
the `sft-tiny` config pointed at it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vlajax.config.schema import get_config
from vlajax.data.writer import LeRobotWriter, policy_features

TEXTS = ["press the button", "put the red cube in the blue square", "stack the green cube on the red cube",
         "push the yellow cube into the white square"]


def write_dataset(root: str, episodes: int = 8, length: int = 12, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    with LeRobotWriter(root, fps=50, features=policy_features(("agentview", "wrist"), 32, 8, 4)) as w:
        for e in range(episodes):
            t = np.arange(length, dtype=np.float32)[:, None]
            state = (rng.standard_normal((1, 8)) + 0.1 * t).astype(np.float32)
            action = np.clip(np.tanh(state[:, :4] + 0.05 * rng.standard_normal((length, 4))), -1, 1)
            w.add_episode({
                "observation.images.agentview": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.images.wrist": rng.integers(0, 256, (length, 32, 32, 3), dtype=np.uint8),
                "observation.state": state, "action": action.astype(np.float32),
            }, task=TEXTS[e % len(TEXTS)])
    return root


@pytest.fixture(scope="session")
def synthetic_dataset(tmp_path_factory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("sft-data") / "demos"))


def tiny_config(dataset: str, out: str, **sft):
    cfg = get_config("sft-tiny")
    return cfg.replace(
        output_dir=out, compilation_cache_dir="",
        data=dataclasses.replace(cfg.data, dataset_dir=dataset, num_threads=0, prefetch=0),
        sft=dataclasses.replace(cfg.sft, **sft),
        checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False),
        logging=dataclasses.replace(cfg.logging, progress="none", tensorboard=True),
    )
