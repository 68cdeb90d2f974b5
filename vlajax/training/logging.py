"""Metrics out: TensorBoard event files (tensorboardX) and a console progress display.

Metrics are plain dicts of scalars or arrays (`{"loss": jax.Array[], ...}`); they are pulled
to the host once per log call with `jax.device_get`. Only process 0 writes. Images are
`[H, W, 3]` or `[N, H, W, 3]` (uint8, or float in [0, 1]); videos are `[T, H, W, 3]` or
`[N, T, H, W, 3]` and are written as animated GIFs (TensorBoard's image tab plays them).
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging as _pylogging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from vlajax.shared.atomic_files import write_bytes

__all__ = ["MetricsLogger", "Progress", "format_rate", "print_line", "setup_console", "to_uint8", "gif_bytes",
           "write_gif"]

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


HEARTBEAT_S = 25.0  # default silence before a heartbeat line (checked every <= 2.5 s: lines <= ~28 s apart)
RATE_WINDOW = 10  # rates are over the newest this many reported steps, not since the start
PLAIN_LINES = 10  # the commands' plain progress: at most this many step lines per run (`Progress.max_lines`)
# vlajax loggers whose INFO lines are per-save / per-signal detail: shown only with `logging.verbose`
CHATTY = ("vlajax.training.checkpoint", "vlajax.training.preemption")


# library warnings about timing the user already chose (Orbax: a save waited for the previous one, which it
# reports at every save of a frequent cadence on a busy machine): shown only with `logging.verbose`
TIMING_WARNINGS = ("Waiting for previous save to complete",)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _not_timing(record: _pylogging.LogRecord) -> bool:
    return not (record.levelno == _pylogging.WARNING and record.getMessage().startswith(TIMING_WARNINGS))


def setup_console(verbose: bool = False) -> None:
    """Console logging for a command (stderr). Default: vlajax's own INFO lines (less `CHATTY`'s) and every
    library's warnings (less `TIMING_WARNINGS`); third-party INFO -- JAX probing backends (`Unable to initialize
    backend 'tpu'`), Orbax's per-file save internals -- is off. `verbose` (`--logging.verbose`): INFO from
    every library. Lines are `LOG_FORMAT` either way."""
    try:  # absl (Orbax logs through it) keeps its own verbosity besides Python's levels
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.INFO if verbose else absl_logging.WARNING)
    except ImportError:
        pass
    if verbose:
        _pylogging.basicConfig(level=_pylogging.INFO, format=LOG_FORMAT, force=True)
        for name in ("vlajax", *CHATTY):
            _pylogging.getLogger(name).setLevel(_pylogging.NOTSET)
        return
    handler = _pylogging.StreamHandler()
    handler.setFormatter(_pylogging.Formatter(LOG_FORMAT))
    handler.addFilter(_not_timing)
    _pylogging.basicConfig(level=_pylogging.WARNING, handlers=[handler], force=True)
    _pylogging.getLogger("vlajax").setLevel(_pylogging.INFO)
    for name in CHATTY:
        _pylogging.getLogger(name).setLevel(_pylogging.WARNING)


def format_rate(steps: float, seconds: float) -> str:
    """`12.5 it/s`, or `42.0 s/it` below one step per second (a slow phase reads as seconds, not `0.00 it/s`)."""
    if steps <= 0 or seconds <= 0:
        return "no step yet"
    rate = steps / seconds
    return f"{rate:.2f} it/s" if rate >= 1 else f"{seconds / steps:.1f} s/it"


class Progress:
    """Console progress for a loop of `total` steps, with the latest metrics, and what runs between steps.

    `mode`: 'rich' (a live bar; falls back to 'plain' when stdout is not a terminal), 'plain'
    (one line every `every` steps -- thinned to at most `max_lines` step lines when that is > 0 -- and
    none closer than `min_gap_s` seconds to the previous one but the first and the last step's), or
    'none'. Silent on processes other than 0.

    `with progress.phase("compiling the train step"):` names a long phase: plain mode prints one line
    (`[sft x] compiling the train step (12 s since the start)`), and the next step line says how long the
    phase took instead of a rate. With `heartbeat_s` > 0, inside the `with Progress(...)` block, a thread
    prints a line whenever nothing was printed for `heartbeat_s` seconds (`[sft x] 0/40 compiling the train
    step: 30 s`; rich mode refreshes the bar's text instead). Rates are over the newest `RATE_WINDOW` steps.
    """

    def __init__(self, total: int, description: str = "", mode: str = "rich", every: int = 1, start: int = 0,
                 heartbeat_s: float = 0.0, max_lines: int = 0, min_gap_s: float = 0.0, clock=time.perf_counter):
        self.total, self.description = total, description
        self._every, self.max_lines = max(1, every), max_lines
        self.every = self._thinned(start)
        self.mode = mode if jax.process_index() == 0 else "none"
        if self.mode == "rich" and not sys.stdout.isatty():
            self.mode = "plain"
        self.heartbeat_s, self.min_gap_s, self.clock = heartbeat_s, min_gap_s, clock
        self._t0 = self._t_print = clock()
        self._start = self._step = start
        self._window: collections.deque[tuple[float, int]] = collections.deque([(self._t0, start)],
                                                                               maxlen=RATE_WINDOW + 1)
        self._phase: tuple[str, float] | None = None  # (what, started at) while a phase runs
        self._after: tuple[str, float] | None = None  # (what, seconds) of the phase the next line reports
        self._metrics: Mapping[str, float] = {}
        self._updated: float | None = None  # when the newest step was reported
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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

    def _thinned(self, start: int) -> int:
        """The plain lines' step interval: `every`, or its smallest multiple that prints at most `max_lines`
        step lines over the steps left (a heartbeat still shows the run between them)."""
        if self.max_lines <= 0:
            return self._every
        per = -(-max(1, self.total - start) // self.max_lines)
        return self._every * -(-per // self._every)

    @staticmethod
    def _fmt(metrics: Mapping[str, float]) -> str:
        return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())

    def _print(self, text: str, now: float) -> None:
        self._t_print = now
        print_line(f"[{self.description}] {text}")

    def resume(self, step: int) -> None:
        """The loop starts at `step` (a restored checkpoint): counts and rates from there."""
        with self._lock:
            self._start = self._step = step
            self.every = self._thinned(step)
            self._window = collections.deque([(self.clock(), step)], maxlen=RATE_WINDOW + 1)
            if self._bar is not None:
                self._bar.update(self._task, completed=step)

    @contextlib.contextmanager
    def phase(self, what: str, announce: bool = True) -> Iterator[None]:
        """Name what runs inside the block (`building 16 envs`, `compiling the train step`,
        `waiting for the first batch`) for the progress lines and the heartbeat; `announce=False`: no line
        of its own at the start (a phase that is usually short), the heartbeat names it if it lasts."""
        with self._lock:
            now = self.clock()
            self._phase = (what, now)
            if self.mode == "plain" and announce:
                self._print(f"{what} ({now - self._t0:.0f} s since the start)", now)
            elif self.mode == "rich":
                self._bar.update(self._task, metrics=what)
        try:
            yield
        finally:
            with self._lock:
                now = self.clock()
                self._after = (what, now - self._phase[1])
                self._phase = None
                self._window = collections.deque([(now, self._step)], maxlen=RATE_WINDOW + 1)

    def update(self, step: int, metrics: Mapping[str, float] | None = None) -> None:
        metrics = metrics or {}
        with self._lock:
            now = self.clock()
            self._window.append((now, step))
            self._step, self._metrics, self._updated = step, metrics, now
            if self.mode == "rich":
                self._bar.update(self._task, completed=step, metrics=self._fmt(metrics))
                return
            due = step % self.every == 0 or step == self.total
            first = len(self._window) == 2 and self._window[0][1] == self._start
            if self.mode != "plain" or not due or (now - self._t_print < self.min_gap_s and not first
                                                   and step != self.total and self._after is None):
                return
            if self._after is not None:
                what, seconds = self._after
                rate = f"{what}: {seconds:.0f} s"
                self._after = None
            else:
                (t_old, s_old) = self._window[0]
                rate = format_rate(step - s_old, now - t_old)
            self._print(f"{step}/{self.total} ({rate}) {self._fmt(metrics)}", now)

    def heartbeat(self) -> str | None:
        """Report now if nothing was printed for `heartbeat_s` seconds. -> the plain line printed, if any."""
        with self._lock:
            now = self.clock()
            if self.mode == "none" or self.heartbeat_s <= 0 or now - self._t_print < self.heartbeat_s:
                return None
            if self._phase is not None:
                what, since = self._phase
                doing = f"{what}: {now - since:.0f} s"
            elif self._updated is None:
                doing = f"setting up: {now - self._t0:.0f} s since the start"
            else:
                t_last = self._updated
                doing = (f"step {self._step + 1}: {now - t_last:.0f} s since step {self._step}"
                         if self._step < self.total else f"finishing: {now - t_last:.0f} s since the last step")
            if self.mode == "rich":
                self._t_print = now
                self._bar.update(self._task, metrics=doing)
                return None
            line = f"{self._step}/{self.total} {doing} {self._fmt(self._metrics)}".rstrip()
            self._print(line, now)
            return line

    def _beat(self) -> None:
        while not self._stop.wait(min(2.5, self.heartbeat_s / 4)):
            self.heartbeat()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        if self.mode != "none" and self.heartbeat_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
