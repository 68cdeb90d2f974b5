"""Metrics out: TensorBoard event files (tensorboardX) and a console progress display.

Metrics are plain dicts of scalars or arrays (`{"loss": jax.Array[], ...}`); they are pulled
to the host once per log call with `jax.device_get`. Only process 0 writes. Images are
`[H, W, 3]` or `[N, H, W, 3]` (uint8, or float in [0, 1]); videos are `[T, H, W, 3]` or
`[N, T, H, W, 3]` and are written as animated GIFs (TensorBoard's image tab plays them).
"""

from __future__ import annotations

import io
import logging as _pylogging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from vlajax.atomic_files import write_bytes

__all__ = ["MetricsLogger", "Progress", "print_line", "to_uint8", "gif_bytes", "write_gif"]

log = _pylogging.getLogger(__name__)


def to_uint8(x: Any) -> np.ndarray:
    """Images as uint8; floats are taken to be in [0, 1]."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _tile(frames: np.ndarray) -> np.ndarray:
    """[N, ..., H, W, C] -> [..., H, N*W, C]: several episodes side by side."""
    return np.concatenate(list(frames), axis=-2)


def gif_bytes(frames: Any, fps: int = 10) -> bytes:
    """Encode `[T, H, W, 3]` frames as an animated GIF."""
    from PIL import Image

    frames = to_uint8(frames)
    images = [Image.fromarray(f) for f in frames]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return buf.getvalue()


def write_gif(path: str, frames: Any, fps: int = 10) -> str:
    """Write `[T, H, W, 3]` (or `[N, T, H, W, 3]`, tiled side by side) frames to `path` atomically."""
    frames = np.asarray(frames)
    if frames.ndim == 5:
        frames = _tile(frames)
    return write_bytes(path, gif_bytes(frames, fps))


def print_line(text: str) -> None:
    """Print `text` and its newline in one write, flushed: `print` writes them apart, so a line printed
    from another thread (a heartbeat, a pipeline lane) can land between the two and join this line."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class MetricsLogger:
    """TensorBoard writer for one run. A no-op on processes other than 0 or when disabled."""

    def __init__(self, logdir: str, enabled: bool = True):
        self.logdir = logdir
        self._writer = None
        if enabled and jax.process_index() == 0:
            from tensorboardX import SummaryWriter

            os.makedirs(logdir, exist_ok=True)
            self._writer = SummaryWriter(logdir, flush_secs=10)

    @property
    def active(self) -> bool:
        return self._writer is not None

    def scalars(self, step: int, metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
        """Log every scalar of `metrics`; returns them as floats (non-scalars are skipped)."""
        host = jax.device_get(dict(metrics))
        out = {}
        for k, v in host.items():
            arr = np.asarray(v)
            if arr.size != 1:
                continue
            out[prefix + k] = float(arr.reshape(()))
        if self._writer is not None:
            for k, v in out.items():
                self._writer.add_scalar(k, v, global_step=int(step))
        return out

    def histogram(self, step: int, name: str, values: Any) -> None:
        if self._writer is not None:
            self._writer.add_histogram(name, np.asarray(jax.device_get(values)), global_step=int(step))

    def images(self, step: int, images: Mapping[str, Any]) -> None:
        """`{name: [H, W, 3] or [N, H, W, 3]}`; several images are tiled side by side."""
        if self._writer is None:
            return
        for name, img in jax.device_get(dict(images)).items():
            img = to_uint8(img)
            if img.ndim == 4:
                img = _tile(img)
            self._writer.add_image(name, img, global_step=int(step), dataformats="HWC")

    def video(self, step: int, name: str, frames: Any, fps: int = 10) -> None:
        """`[T, H, W, 3]` or `[N, T, H, W, 3]` frames as an animated GIF image summary."""
        if self._writer is None:
            return
        from tensorboardX.proto.summary_pb2 import Summary

        frames = to_uint8(jax.device_get(frames))
        if frames.ndim == 5:
            frames = _tile(frames)
        t, h, w, c = frames.shape
        image = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=gif_bytes(frames, fps))
        self._writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), int(step))

    def text(self, step: int, name: str, text: str) -> None:
        if self._writer is not None:
            self._writer.add_text(name, text, global_step=int(step))

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Progress:
    """Console progress for a loop of `total` steps, with the latest metrics.

    `mode`: 'rich' (a live bar; falls back to 'plain' when stdout is not a terminal), 'plain'
    (one line every `every` steps), or 'none'. Silent on processes other than 0.
    """

    def __init__(self, total: int, description: str = "", mode: str = "rich", every: int = 1, start: int = 0):
        self.total, self.every, self.description = total, max(1, every), description
        self.mode = mode if jax.process_index() == 0 else "none"
        if self.mode == "rich" and not sys.stdout.isatty():
            self.mode = "plain"
        self._t0 = time.perf_counter()
        self._start = start
        self._bar = None
        if self.mode == "rich":
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[metrics]}"),
            )
            self._task = self._bar.add_task(description, total=total, completed=start, metrics="")
            self._bar.start()

    @staticmethod
    def _fmt(metrics: Mapping[str, float]) -> str:
        return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())

    def update(self, step: int, metrics: Mapping[str, float] | None = None) -> None:
        metrics = metrics or {}
        if self.mode == "rich":
            self._bar.update(self._task, completed=step, metrics=self._fmt(metrics))
        elif self.mode == "plain" and (step % self.every == 0 or step == self.total):
            done = step - self._start
            rate = done / max(time.perf_counter() - self._t0, 1e-9)
            print_line(f"[{self.description}] {step}/{self.total} ({rate:.2f} it/s) {self._fmt(metrics)}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
