"""`python -m vlajax.data ROOT [--check-all]`: open (and so validate) a LeRobot dataset and summarize it.

Prints the version, fps, episode and frame counts, tasks, features and the action statistics.
`--check-all` also decodes every camera frame. Exit code 0 when the dataset is usable; 1 with
one `error: <file>: <what>` line when it is not.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import tyro

from vlajax.data.lerobot import DatasetError, LeRobotData
from vlajax.shared import cli


def summary(d: LeRobotData) -> str:
    lines = [
        f"{d.root}",
        f"  LeRobot {d.version}, {d.fps:g} fps, {d.num_episodes} episodes, {d.num_frames} frames, "
        f"{len(d.tasks)} tasks",
        f"  episode length: min {int((d.episode_to - d.episode_from).min())}, "
        f"max {int((d.episode_to - d.episode_from).max())}",
        "  features:",
    ]
    for name, f in d.features.items():
        lines.append(f"    {name:40s} {f['dtype']:8s} {list(f['shape'])}")
    lines.append("  tasks:")
    lines += [f"    {i:4d}  {t}" for i, t in enumerate(d.tasks)]
    if d.stats and "action" in d.stats:
        a = d.stats["action"]
        with np.printoptions(precision=3, suppress=True):
            for s in ("mean", "std", "q01", "q99"):
                if s in a:
                    lines.append(f"  action {s:4s} {np.asarray(a[s])}")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    root: tyro.conf.Positional[str]  # dataset directory
    check_all: bool = False  # decode every camera frame


def main(argv: list[str] | None = None) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.data", description=__doc__.splitlines()[0])
    try:
        d = LeRobotData(args.root)
        if args.check_all:
            for cam in d.cameras:
                for i in range(d.num_frames):
                    d.image(cam, i)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(summary(d))
    if args.check_all:
        print(f"  decoded {d.num_frames * len(d.cameras)} camera frames: all readable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
