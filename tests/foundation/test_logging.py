"""Event files written by vlajax.training.logging, read back with TensorBoard's own reader."""

import io

import jax.numpy as jnp
import numpy as np
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vlajax.training.logging import MetricsLogger, Progress, write_gif


def test_scalars_images_and_videos_round_trip(tmp_path):
    logdir = str(tmp_path / "tb")
    with MetricsLogger(logdir) as logger:
        for step in range(3):
            out = logger.scalars(step, {"loss": jnp.asarray(1.0 / (step + 1)), "vector": jnp.ones(3)}, prefix="train/")
            assert "train/vector" not in out  # non-scalars are skipped
        logger.images(2, {"camera": np.full((2, 8, 8, 3), 0.5, np.float32)})
        frames = np.zeros((4, 8, 8, 3), np.uint8)
        frames[:, :, :, 0] = np.arange(4)[:, None, None] * 60
        logger.video(2, "rollout", frames)
    acc = EventAccumulator(logdir, size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"train/loss"}
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    np.testing.assert_allclose([e.value for e in loss], [1.0, 0.5, 1 / 3], rtol=1e-6)
    assert set(acc.Tags()["images"]) == {"camera", "rollout"}
    cam = acc.Images("camera")[0]
    assert (cam.width, cam.height) == (16, 8)  # two 8x8 images side by side
    gif = Image.open(io.BytesIO(acc.Images("rollout")[0].encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames == 4


def test_write_gif_is_readable(tmp_path):
    path = write_gif(str(tmp_path / "ep.gif"), np.random.default_rng(0).random((2, 5, 6, 6, 3)))
    img = Image.open(path)
    assert img.n_frames == 5 and img.size == (12, 6)


def test_plain_progress_prints_metrics(capsys):
    with Progress(4, "demo", mode="plain", every=2) as p:
        for i in range(1, 5):
            p.update(i, {"loss": 0.5})
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and out[-1].startswith("[demo] 4/4") and "loss=0.5" in out[-1]
