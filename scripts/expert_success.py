"""The scripted experts' success rate per tabletop task (exit 1 when any task is under 90%).

    .venv/bin/python scripts/expert_success.py [--episodes 50] [--tasks NAME ...]
"""

from __future__ import annotations

import dataclasses
import sys

from vlajax.envs import registry
from vlajax.envs.experts import success_table
from vlajax.shared import cli, compile_cache


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    episodes: int = 50  # randomized episodes per task
    episode_length: int = 150  # control steps per episode
    tasks: tuple[str, ...] = ()  # task names (default: all)
    seed: int = 0


def main(argv: list[str] | None = None) -> int:
    args = cli.parse(Args, argv, prog="scripts/expert_success.py", description=__doc__.splitlines()[0])

    compile_cache.enable()
    names = args.tasks or list(registry.ALL_ENVS)
    print(f"scripted-expert success over {args.episodes} randomized episodes, {args.episode_length} steps each")
    table = success_table(names, args.episodes, args.episode_length, args.seed)
    worst = min(table.values())
    print(f"mean {sum(table.values()) / len(table) * 100:.1f}%   min {worst * 100:.1f}%")
    return 0 if worst >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
