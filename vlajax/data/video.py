"""Camera frames as video files (LeRobot v3.0 `dtype: "video"` features), with PyAV.

Many episodes are concatenated in one mp4 per camera and file; an episode's frames start at
`from_timestamp` (seconds). Encoding follows lerobot's defaults: AV1 (SVT-AV1), yuv420p, a
keyframe every 2 frames (`g=2`) so random access decodes at most one extra frame, crf 30.
Video is lossy: decoded frames differ from the originals by a few intensity levels.

    enc = VideoEncoder(path, fps, height, width)
    t0 = enc.append(frames uint8 [T, h, w, 3])      # -> from_timestamp of these frames
    enc.close()
    read_frame(path, timestamp, fps) -> uint8 [h, w, 3]
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

__all__ = ["VideoEncoder", "read_frame", "CODECS"]

# lerobot's names for the codecs in info.json ("video.codec") -> the PyAV encoder.
CODECS = {"av1": "libsvtav1", "h264": "libx264"}


class VideoEncoder:
    """An mp4 file being written, one camera, frames appended episode after episode."""

    def __init__(self, path: str, fps: int, height: int, width: int, codec: str = "av1", crf: int = 30,
                 gop: int = 2):
        import av

        av.logging.set_level(av.logging.ERROR)
        if codec not in CODECS:
            raise ValueError(f"unknown video codec {codec!r}; choose one of {sorted(CODECS)}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path, self.fps, self.codec = path, fps, codec
        self.frames = 0
        self._container = av.open(path, "w")
        self._stream = self._container.add_stream(CODECS[codec], rate=fps)
        self._stream.width, self._stream.height = width, height
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"g": str(gop), "crf": str(crf)}

    def append(self, frames: np.ndarray) -> float:
        """Encode uint8 [T, h, w, 3]; returns the timestamp (s) of the first of them in this file."""
        import av

        start = self.frames / self.fps
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            frame.time_base = self._stream.codec_context.time_base
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
            self.frames += 1
        return start

    def size(self) -> int:
        return os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def close(self) -> None:
        if self._container is not None:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            self._container = None


_local = threading.local()


def _open(path: str):
    """A per-thread cache of open containers (PyAV containers are not thread-safe)."""
    import av

    cache: OrderedDict = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = OrderedDict()
    if path in cache:
        cache.move_to_end(path)
        return cache[path]
    container = av.open(path)
    cache[path] = container
    while len(cache) > 8:
        cache.popitem(last=False)[1].close()
    return container


def read_frame(path: str, timestamp: float, fps: float) -> np.ndarray:
    """The frame shown at `timestamp` seconds -> uint8 [h, w, 3]. Raises ValueError if there is none."""
    container = _open(path)
    stream = container.streams.video[0]
    tol = 0.5 / fps
    container.seek(max(0, int((timestamp - tol) / stream.time_base)), stream=stream, backward=True)
    for frame in container.decode(stream):
        t = float(frame.pts * stream.time_base)
        if t >= timestamp - tol:
            if t > timestamp + tol:
                break
            return frame.to_ndarray(format="rgb24")
    raise ValueError(f"no frame at {timestamp:.4f} s")
