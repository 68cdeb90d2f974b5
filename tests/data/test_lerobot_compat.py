"""What our writer produces opens in the real `lerobot` library with the same frames and tasks.

lerobot is torch-based and lives in its own venv (docs/data.md shows how to make one); point
`VLAJAX_LEROBOT_PYTHON` at its python. Without it the test is skipped. Video frames are
decoded by lerobot's own frame selection (over PyAV, see lerobot_dump.py), so they must hash
equal to what our reader decodes.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import numpy as np
import pytest

from vlajax.data.lerobot import LeRobotData

from .helpers import FIXTURE, write_dataset

PYTHON = os.environ.get("VLAJAX_LEROBOT_PYTHON", "")


@pytest.mark.skipif(not os.path.isfile(PYTHON), reason="set VLAJAX_LEROBOT_PYTHON to a python with lerobot")
@pytest.mark.parametrize("video, split", [(False, False), (True, False), (True, True)],
                         ids=["png", "video", "video-many-files"])
def test_lerobot_opens_what_we_write(tmp_path, video, split):
    tasks = ["put the red cube in the bowl", "push the green block left", "put the red cube in the bowl",
             "open the drawer"]
    sizes = dict(data_files_size_in_mb=0, video_files_size_in_mb=0, chunks_size=2) if split else {}
    root = write_dataset(str(tmp_path / "ds"), lengths=(6, 7, 8, 5), tasks=tasks, video=video, **sizes)
    out = subprocess.run([PYTHON, os.path.join(os.path.dirname(__file__), "lerobot_dump.py"), root],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    ours = LeRobotData(root)
    assert (got["num_frames"], got["num_episodes"], got["fps"]) == (ours.num_frames, 4, 10)
    assert got["tasks"] == ours.tasks == ["put the red cube in the bowl", "push the green block left",
                                          "open the drawer"]
    assert got["camera_keys"] == ours.cameras
    assert set(got["stats_keys"]) == set(ours.features)
    for i, f in enumerate(got["frames"]):
        assert f["task"] == ours.task(i)
        for key in ("index", "episode_index", "frame_index", "task_index"):
            assert f[key] == int(ours.columns[key][i]), (i, key)
        np.testing.assert_array_equal(np.float32(f["action"]), ours.columns["action"][i])
        np.testing.assert_array_equal(np.float32(f["observation.state"]), ours.columns["observation.state"][i])
        assert abs(f["timestamp"] - float(ours.columns["timestamp"][i])) < 1e-6
        for cam in ours.cameras:
            assert f[cam] == hashlib.sha256(ours.image(cam, i).tobytes()).hexdigest(), (i, cam)


@pytest.mark.skipif(not os.path.isfile(PYTHON), reason="set VLAJAX_LEROBOT_PYTHON to a python with lerobot")
def test_lerobot_and_our_reader_agree_on_the_fixture():
    out = subprocess.run([PYTHON, os.path.join(os.path.dirname(__file__), "lerobot_dump.py"), FIXTURE],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got, ours = json.loads(out.stdout), LeRobotData(FIXTURE)
    assert got["tasks"] == ours.tasks and got["num_frames"] == ours.num_frames == 21
    for i, f in enumerate(got["frames"]):
        np.testing.assert_array_equal(np.float32(f["action"]), ours.columns["action"][i])
        for cam in ours.cameras:
            assert f[cam] == hashlib.sha256(ours.image(cam, i).tobytes()).hexdigest(), (i, cam)
