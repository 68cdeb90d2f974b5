"""Video/GIF export of a batch of episodes: frames `[T, B, H, W, 3]` uint8 -> one tiled clip.

    frames = video.episode_frames(env, states)            # states with leaves [T, B, ...]
    video.save(frames, "rollout.mp4", fps=25)             # or .gif
"""

from __future__ import annotations

import pathlib

import jax
import numpy as np


def tile(frames: np.ndarray, columns: int | None = None) -> np.ndarray:
    """`[T, B, H, W, 3]` -> `[T, rows*H, columns*W, 3]`, envs laid out row-major (blank padding)."""
    t, b, h, w, c = frames.shape
    columns = columns or int(np.ceil(np.sqrt(b)))
    rows = int(np.ceil(b / columns))
    pad = np.zeros((t, rows * columns - b, h, w, c), frames.dtype)
    grid = np.concatenate([frames, pad], 1).reshape(t, rows, columns, h, w, c)
    return grid.transpose(0, 1, 3, 2, 4, 5).reshape(t, rows * h, columns * w, c)


def episode_frames(env, states, cameras: tuple[str, ...] | None = None) -> np.ndarray:
    """Render states with leaves `[T, B, ...]` -> `[T, B, H, W*len(cameras), 3]` uint8 (cameras side by side).

    Uses the env's renderer (any obs mode), with each episode's colours and brightness.
    """
    base = env.unwrapped
    cameras = cameras or base.render_spec.cameras
    render = jax.jit(jax.vmap(jax.vmap(base.render)))
    imgs = jax.device_get(render(states.data, states.info["episode"]))
    return np.concatenate([np.asarray(imgs[c]) for c in cameras], axis=-2)


def save(frames: np.ndarray, path: str | pathlib.Path, fps: int = 25, columns: int | None = None,
         scale: int = 1) -> pathlib.Path:
    """Write `[T, B, H, W, 3]` (a batch, tiled) or `[T, H, W, 3]` uint8 frames as .gif or .mp4."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8:
        raise TypeError(f"frames must be uint8, got {frames.dtype}")
    if frames.ndim == 5:
        frames = tile(frames, columns)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be [T, (B,) H, W, 3], got {frames.shape}")
    if scale > 1:
        frames = frames.repeat(scale, axis=1).repeat(scale, axis=2)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gif":
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    elif path.suffix == ".mp4":
        import av

        h, w = frames.shape[1] // 2 * 2, frames.shape[2] // 2 * 2  # yuv420p needs even sizes
        with av.open(str(path), mode="w") as out:
            stream = out.add_stream("libx264", rate=fps)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            for f in frames:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f[:h, :w]), format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
    else:
        raise ValueError(f"unsupported video format {path.suffix!r}; use .gif or .mp4")
    return path


GIF_MIN_HEIGHT = 256  # eval GIFs are upscaled (nearest) to at least this many pixels tall
SUCCESS_RGB, FAILURE_RGB = (40, 200, 60), (220, 40, 40)


def upscale(frames: np.ndarray, min_height: int = GIF_MIN_HEIGHT) -> np.ndarray:
    """`[..., H, W, 3]` -> nearest-neighbour upscaled by the smallest integer factor reaching `min_height` rows."""
    k = max(1, -(-min_height // frames.shape[-3]))
    return frames if k == 1 else frames.repeat(k, axis=-3).repeat(k, axis=-2)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # a scalable font (Pillow >= 10.1)
    except TypeError:
        return ImageFont.load_default()


def outcome_clip(frames: np.ndarray, success=None, steps=None, min_height: int = GIF_MIN_HEIGHT) -> np.ndarray:
    """An evaluation GIF's frames: `[S, G, h, w, 3]` uint8 (G episodes) -> `[S, H, G*W, 3]`, the episodes side by
    side, upscaled to >= `min_height` px tall, each framed with its outcome: from step `steps[g]` on a green
    border and `success` for a success (`success[g]` true; the episode is frozen from then on), over the last
    second (25 frames, at most a quarter of the clip) a red border and `failure` otherwise. `success` None:
    no outcome drawn."""
    from PIL import Image, ImageDraw

    frames = upscale(np.asarray(frames, np.uint8), min_height)
    s, g, h, w, _ = frames.shape
    frames = frames.copy()
    if success is not None:
        b = max(2, h // 40)  # border width
        font = _font(max(10, h // 12))
        tail = min(25, max(1, s // 4))
        for i in range(g):
            ok = bool(success[i])
            first = min(int(steps[i]), s - 1) if ok and steps is not None else s - tail
            color = SUCCESS_RGB if ok else FAILURE_RGB
            for t in range(max(0, first), s):
                tile = Image.fromarray(frames[t, i])
                draw = ImageDraw.Draw(tile)
                draw.rectangle([0, 0, w - 1, h - 1], outline=color, width=b)
                draw.text((2 * b, 2 * b), "success" if ok else "failure", fill=color, font=font,
                          stroke_width=1, stroke_fill=(0, 0, 0))
                frames[t, i] = np.asarray(tile)
    return np.concatenate(list(np.moveaxis(frames, 1, 0)), axis=-2)
