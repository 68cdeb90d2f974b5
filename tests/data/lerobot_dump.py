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


def main(root: str) -> None:
    ds = LeRobotDataset("local/vlajax-check", root=root)
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
