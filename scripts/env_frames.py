"""Every tabletop task's first frame as a PNG, and a GIF of scripted-expert episodes (docs/envs).

    .venv/bin/python scripts/env_frames.py [--out docs/envs]
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import jax
import numpy as np
from PIL import Image

from vlajax.envs import experts, registry
from vlajax.envs.video import episode_frames, save
from vlajax.shared import cli, compile_cache


@dataclasses.dataclass(frozen=True)
class VideoArgs:
    """The command line of `main` (`--help` lists every option with its comment)."""

    out: pathlib.Path = pathlib.Path("docs/envs")  # folder of the PNGs and the GIF
    gif_task: str = "goal/stack"  # the task of the GIF
    gif_envs: int = 4  # episodes side by side in the GIF
    gif_steps: int = 120  # control steps in the GIF


def main(argv: list[str] | None = None) -> int:
    """`scripts/env_frames.py --out docs/envs`: a PNG of every task's first frame (agent view |
    wrist, 4x upscaled) and a GIF of a batch of scripted-expert episodes."""

    args = cli.parse(VideoArgs, argv, prog="scripts/env_frames.py", description=main.__doc__.splitlines()[0])
    compile_cache.enable()
    args.out.mkdir(parents=True, exist_ok=True)
    env = registry.load(registry.ALL_ENVS[0])
    reset = jax.jit(env.reset_task)
    for i, name in enumerate(registry.ALL_ENVS):
        state = reset(jax.random.PRNGKey(i), np.int32(i))
        row = np.concatenate([np.asarray(state.obs["pixels/agentview"]), np.asarray(state.obs["pixels/wrist"])], 1)
        file = args.out / f"{name.replace('/', '__')}.png"
        Image.fromarray(row.repeat(4, 0).repeat(4, 1)).save(file)
        print(f"{file}  {env.instruction(state)}")
    task_id = np.int32(registry.ALL_ENVS.index(args.gif_task))
    states, _, ever = jax.jit(experts.rollout, static_argnums=(0, 3, 4))(
        env, jax.random.PRNGKey(0), task_id, args.gif_envs, args.gif_steps)
    frames = episode_frames(env, states)[::2]
    gif = save(frames, args.out / f"{args.gif_task.replace('/', '__')}_expert.gif", fps=12, columns=2, scale=2)
    print(f"{gif}  expert success {np.asarray(ever).mean():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
