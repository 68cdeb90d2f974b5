"""`demos --suite libero_spatial`: the scripted LIBERO expert recorded on real LIBERO workers into a LeRobot
v3.0 dataset in openpi's LIBERO layout, read back by our reader and our SFT loader (and by the real
`lerobot` when VLAJAX_LEROBOT_PYTHON points at a python that has it; tests/data/test_lerobot_compat.py).

The recording runs once per module (one env build, 2 short episodes at 32 x 32); without the LIBERO venv
those tests skip (VLAJAX_LIBERO_REQUIRED=1, as `make test` sets it, makes that a failure)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import json
import os
import subprocess

import numpy as np
import pytest

from tests.libero.libero_env import venv_or_skip
from vlajax import train
from vlajax.data.lerobot import LeRobotData, layout_keys
from vlajax.libero import demos as D
from vlajax.libero import protocol as P

LEROBOT = os.environ.get("VLAJAX_LEROBOT_PYTHON", "")
DUMP = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "lerobot_dump.py")


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = train.main(argv)
    return code, err.getvalue()


def test_wilson_interval():
    assert D.wilson(0, 0) == (0.0, 1.0)
    lo, hi = D.wilson(5, 5)
    assert hi == 1.0 and lo == pytest.approx(0.566, abs=1e-3)  # the textbook 5/5 interval
    lo, hi = D.wilson(4, 8)
    assert lo == pytest.approx(0.215, abs=1e-3) and hi == pytest.approx(0.785, abs=1e-3)


@pytest.mark.parametrize("args, needle", [
    (["--suite", "libero_object"], "libero_spatial's tasks only"),
    (["--suite", "libero_spatial", "--episodes-per-task", "26"], "1..25"),
    (["--suite", "libero_spatial", "--episodes-per-task", "2", "--data.demo-workers", "0"], "data.demo_workers"),
    (["--suite", "libero_spatial", "--episodes-per-task", "2", "--data.demo-perturb-prob", "0.1"], "tabletop"),
    (["--suite", "libero_spatial", "--episodes-per-task", "2", "--env.task", "drawer"], "indices"),
    (["--suite", "goal", "--data.demo-keep-failures"], "LIBERO suite"),
])
def test_bad_flags_are_one_error_line(tmp_path, args, needle):
    code, err = _main(["demos", *args, "--out", str(tmp_path / "ds")])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert not os.path.exists(tmp_path / "ds")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """`demos` on task 0, 2 episodes, 32 x 32, capped at 12 steps (too short to succeed) with failures
    kept; the workers' own records kept beside it."""
    venv_or_skip()
    from vlajax.config.schema import DataConfig, EnvConfig, TrainConfig

    root = tmp_path_factory.mktemp("libero_demos")
    cfg = TrainConfig(env=EnvConfig(suite="libero_spatial", task="0"),
                      data=DataConfig(episodes_per_task=2, demo_image_size=32, demo_max_steps=12,
                                      demo_keep_failures=True, demo_workers=1))
    out = str(root / "ds")
    summary = D.generate(cfg, out, keep_records=str(root / "records"))
    return out, str(root / "records"), summary


def test_the_dataset_has_openpi_s_libero_layout(recorded):
    out, _, summary = recorded
    with open(os.path.join(out, "meta", "info.json")) as fh:
        info = json.load(fh)
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10 and info["robot_type"] == "panda"
    f = info["features"]
    assert f["image"] == f["wrist_image"] == {"dtype": "image", "shape": [32, 32, 3],
                                              "names": ["height", "width", "channel"]}
    assert f["state"] == {"dtype": "float32", "shape": [8], "names": ["state"]}
    assert f["actions"] == {"dtype": "float32", "shape": [7], "names": ["actions"]}
    assert [(e["init"], e["success"], e["written"]) for e in summary["episodes"]] == [
        (P.DEMO_INITS[0], False, True), (P.DEMO_INITS[1], False, True)]  # 12 steps: failures, kept by the flag
    with open(os.path.join(out, "demos.json")) as fh:
        assert json.load(fh)["tasks"]["0"]["tried"] == 2


def test_the_dataset_holds_what_the_workers_recorded(recorded):
    out, records, _ = recorded
    data = LeRobotData(out)
    assert layout_keys(data.features) == ("actions", "state")
    assert data.num_episodes == 2 and data.num_frames == 24
    assert data.tasks == ["pick up the black bowl between the plate and the ramekin and place it on the plate"]
    for e, init in enumerate(P.DEMO_INITS[:2]):
        with np.load(os.path.join(records, f"libero_spatial-t0-i{init}.rec.npz"), allow_pickle=False) as z:
            rec = {k: z[k] for k in D.FEATURES_OF}
        a, b = data.episode_from[e], data.episode_to[e]
        np.testing.assert_array_equal(data.columns["actions"][a:b], rec["actions"])
        np.testing.assert_array_equal(data.columns["state"][a:b], rec["state"])
        for cam in ("image", "wrist_image"):
            np.testing.assert_array_equal(np.stack([data.image(cam, i) for i in range(a, b)]), rec[cam])
        assert rec["image"].std() > 5  # a rendered scene, not a blank frame
        # the expert moves toward the bowl from the first step; the gripper command is open throughout
        assert np.abs(rec["actions"][:, :3]).max() > 0.5 and np.all(rec["actions"][:, 6] == -1.0)
    assert not glob.glob(os.path.join(os.path.dirname(out), "libero-demos-*"))  # the scratch files are gone


def test_our_sft_loader_builds_a_batch_from_it(recorded):
    import dataclasses

    from vlajax.config.schema import get_config
    from vlajax.data.build import make_loader

    out, _, _ = recorded
    cfg = get_config("debug")  # 7 action dims, 8 state dims, 2 cameras of 32 x 32
    cfg = cfg.replace(data=dataclasses.replace(cfg.data, dataset_dir=out, batch_size=4, batching="fixed"))
    loader, info = make_loader(cfg, None)
    batch = next(loader)
    loader.close()
    assert info.cameras == ("image", "wrist_image") and set(batch["images"]) == {"image", "wrist_image"}
    assert np.shape(batch["actions"]) == (4, cfg.model.action_horizon, 7)
    assert np.shape(batch["images"]["image"])[0] == 4


@pytest.mark.skipif(not os.path.isfile(LEROBOT), reason="set VLAJAX_LEROBOT_PYTHON to a python with lerobot")
def test_lerobot_reads_the_recorded_frames(recorded):
    out, _, _ = recorded
    res = subprocess.run([LEROBOT, DUMP, out], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got, ours = json.loads(res.stdout), LeRobotData(out)
    assert (got["num_frames"], got["num_episodes"], got["fps"]) == (24, 2, 10)
    assert got["camera_keys"] == ["image", "wrist_image"] and got["tasks"] == ours.tasks
    for i, f in enumerate(got["frames"]):
        assert f["task"] == ours.task(i)
        np.testing.assert_array_equal(np.float32(f["actions"]), ours.columns["actions"][i])
        np.testing.assert_array_equal(np.float32(f["state"]), ours.columns["state"][i])
        for cam in ("image", "wrist_image"):
            assert f[cam] == hashlib.sha256(ours.image(cam, i).tobytes()).hexdigest(), (i, cam)
