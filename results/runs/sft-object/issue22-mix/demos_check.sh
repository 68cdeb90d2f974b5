#!/usr/bin/env bash
# Are the recipe's demos (runs/i22b/demos-swap300, made by the sixth attempt's code on 2026-11-26) still what this
# commit's generator writes? The first 48 episodes of each task again (the generator keeps episodes in order, so
# they must equal episodes 0-47, 300-347, 600-647, 900-947 of the full set), then every action, state and image
# compared. Written 2026-11-27 ~02:00 UTC before it ran.   Usage: bash demos_check.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
py=.venv/bin/python
D=runs/i22f/demos-check
rm -rf $D
/usr/bin/time -f "%e s wall" $py -m vlajax.train demos --preset sft-small --suite object --episodes-per-task 48 \
    --data.demo-target-swap --env.num-envs 48 --out $D --logging.progress none > runs/i22f/demos-check.log 2>&1
$py - <<'PY'
import numpy as np
from vlajax.data.lerobot import LeRobotData
a, b = LeRobotData("runs/i22f/demos-check"), LeRobotData("runs/i22b/demos-swap300")
same, frames = True, 0
for t in range(4):
    for j in range(48):
        ea, eb = 48 * t + j, 300 * t + j
        ra = range(int(a.episode_from[ea]), int(a.episode_to[ea]))
        rb = range(int(b.episode_from[eb]), int(b.episode_to[eb]))
        if len(ra) != len(rb):
            same = False; print("length differs", t, j, len(ra), len(rb)); continue
        for key in ("action", "observation.state"):
            same &= bool(np.array_equal(np.asarray(a.columns[key])[list(ra)], np.asarray(b.columns[key])[list(rb)]))
        for cam in a.cameras:
            same &= all(np.array_equal(a.image(cam, i), b.image(cam, k)) for i, k in zip(ra, rb))
        same &= a.task(ra[0]) == b.task(rb[0])
        frames += len(ra)
print({"identical": same, "episodes": 192, "frames": frames})
PY
