"""Run under a Python that has the real `lerobot` (0.4+; see docs/data.md): open a dataset with
`lerobot.datasets.lerobot_dataset.LeRobotDataset` and print every frame as JSON on stdout.

    python lerobot_dump.py ROOT

Images are reported as the SHA-256 of their uint8 HWC bytes (lerobot gives float CHW in [0, 1]).
"""

import hashlib
import json
import sys
import types

# The PyPI torchvision wheel registers CUDA-only operator metadata that a CPU-only torch lacks;
# lerobot needs only torchvision's transforms, so skip those two registration modules.
for _m in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
    sys.modules.setdefault(_m, types.ModuleType(_m))

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


def _install_video_reader() -> None:
    """torchvision >= 0.28 removed `torchvision.io.VideoReader`, which lerobot 0.4's pyav backend
    calls (and torchcodec, its other backend, has no wheel for this torch). Put back a PyAV
    version of that small API -- `seek(seconds, keyframes_only)`, iteration yielding
    `{"pts": seconds, "data": uint8 [3, h, w]}`, `.container` -- so that lerobot's own
    timestamp arithmetic and frame selection run unchanged on our files."""
    import av
    import torch
    import torchvision

    if hasattr(torchvision.io, "VideoReader"):
        return

    class VideoReader:
        def __init__(self, path, stream="video"):
            self.container = av.open(path)
            self._stream = self.container.streams.video[0]
            self._frames = None

        def seek(self, seconds, keyframes_only=True):
            self.container.seek(int(seconds / self._stream.time_base), stream=self._stream, backward=True,
                                any_frame=not keyframes_only)
            self._frames = self.container.decode(self._stream)
            return self

        def __iter__(self):
            for f in self._frames if self._frames is not None else self.container.decode(self._stream):
                yield {"pts": float(f.pts * self._stream.time_base),
                       "data": torch.from_numpy(f.to_ndarray(format="rgb24")).permute(2, 0, 1)}

    torchvision.io.VideoReader = VideoReader
    torchvision.set_video_backend = lambda backend: None


def main(root: str) -> None:
    _install_video_reader()
    ds = LeRobotDataset("local/vlajax-check", root=root, video_backend="pyav")
    frames = []
    for i in range(len(ds)):
        x = ds[i]
        f = {"task": x["task"]}
        for k, v in x.items():
            if k == "task":
                continue
            if k in ds.meta.camera_keys:
                img = (v.permute(1, 2, 0).numpy() * 255).round().astype("uint8")
                f[k] = hashlib.sha256(img.tobytes()).hexdigest()
            else:
                f[k] = v.tolist()
        frames.append(f)
    out = {"num_frames": len(ds), "num_episodes": ds.meta.total_episodes, "fps": ds.meta.fps,
           "tasks": ds.meta.tasks.index.tolist(), "camera_keys": list(ds.meta.camera_keys),
           "stats_keys": sorted(ds.meta.stats), "frames": frames}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
