"""`make quickstart`: the main job end to end on a small preset, with a report folder.

Today it runs the foundation path (`python -m vlajax.train smoke`: sharded init, jitted
steps, async checkpoints, resume, TensorBoard) and then resumes it to show exact restart.
The demos -> SFT -> RL -> eval chain replaces it as those phases land.
"""

from __future__ import annotations

import os
import shutil
import sys

from vlajax import train

OUT = os.environ.get("VLAJAX_QUICKSTART_DIR", "runs/quickstart")


def main() -> int:
    common = [
        "--output-dir",
        OUT,
        "--sft.learning-rate",
        "3e-3",
        "--checkpoint.every-steps",
        "100",
        "--logging.every-steps",
        "50",
        "--logging.progress",
        "plain",
    ]
    if os.path.isdir(OUT):
        print(f"[quickstart] removing the previous quickstart run in {OUT}", flush=True)
        shutil.rmtree(OUT)
    print(f"[quickstart] phase 1/2: train 200 steps into {OUT}", flush=True)
    rc = train.main(["smoke", "--sft.num-steps", "200", *common])
    if rc:
        return rc
    print("[quickstart] phase 2/2: resume from the step-200 checkpoint and continue to 300", flush=True)
    rc = train.main(["smoke", "--sft.num-steps", "300", *common])
    if rc == 0:
        print(f"[quickstart] done. checkpoints: {OUT}/checkpoints  TensorBoard: tensorboard --logdir {OUT}/tb")
    return rc


if __name__ == "__main__":
    sys.exit(main())
