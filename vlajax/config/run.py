"""The sections of a run's plumbing: Orbax checkpoints, logging and multi-host start-up (part of
`vlajax.config.schema`, which re-exports every name here)."""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from vlajax.config.errors import ConfigError
from vlajax.config.errors import check as _check


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Orbax checkpoints."""

    dir: str = ""  # checkpoint directory ('' = <output_dir>/checkpoints)
    # save every N steps, at the first step of an empty directory (Orbax's initial save) and at the end;
    # a save leaks ~0.5 KiB/array (docs/reliability.md)
    every_steps: int = 100
    max_to_keep: int = 3  # newest checkpoints kept
    async_save: bool = True  # write in a background thread while training continues
    # resume from the newest checkpoint in dir; False: a fresh run (refused when dir already holds steps)
    resume: bool = True

    def __post_init__(self):
        _check(self.every_steps >= 1, "checkpoint.every_steps must be >= 1")
        _check(self.max_to_keep >= 1, "checkpoint.max_to_keep must be >= 1")

    def directory(self, output_dir: str) -> str:
        """The run's checkpoint directory, absolute: `dir`, or `<output_dir>/checkpoints`."""
        return os.path.abspath(self.dir or os.path.join(output_dir, "checkpoints"))

    def check_fresh(self, output_dir: str) -> None:
        """ConfigError when `resume=False` would start a fresh run in a directory that already holds steps:
        Orbax refuses to write a step that exists, so the run would fail at the first save that meets one,
        after training up to it. Called before anything is built (`vlajax.preflight`)."""
        directory = self.directory(output_dir)
        if not self.resume and (steps := checkpoint_steps(directory)):
            shown = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
            raise ConfigError(f"checkpoint.resume=false starts a fresh run, but {directory} already holds checkpoints "
                              f"(steps {shown}) that its saves would collide with: pass another --output-dir (or "
                              "--checkpoint.dir), delete them, or resume from them (without --checkpoint.no-resume)")


def checkpoint_steps(directory: str) -> list[int]:
    """The complete steps in an Orbax checkpoint directory (its integer-named subdirectories), sorted; [] when
    the directory does not exist. A write cut off by a crash (`N.orbax-checkpoint-tmp-*`) is not a step."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(directory, n)))


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
    """What a run shows and writes for people: TensorBoard, console progress and logs, evaluation outputs."""

    tensorboard: bool = True  # write TensorBoard event files under <output_dir>/tb
    # log scalars every N steps; the console's plain progress prints at most ~10 step lines per run, on multiples
    # of N, plus the phase and heartbeat lines
    every_steps: int = 10
    progress: Literal["rich", "plain", "none"] = "rich"  # console progress display
    video_every: int = 0  # write rollout videos every N evals (0 = off)
    # every library's INFO lines (JAX, Orbax) and vlajax's per-save detail; off: vlajax's lines and warnings
    verbose: bool = False
    heartbeat_s: float = 25.0  # a progress line after this many seconds without one (0 = none)
    eval_out: str = ""  # `eval`: the folder its results go under ('' = beside the evaluated run, <run>/eval/)
    overwrite: bool = False  # `eval`: replace an existing result of that name (default: keep it, write NAME-2)

    def __post_init__(self):
        _check(self.every_steps >= 1, "logging.every_steps must be >= 1")
        _check(self.heartbeat_s >= 0, "logging.heartbeat_s must be >= 0")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Multi-host start-up (`jax.distributed.initialize`). Empty = single process or auto-detect."""

    coordinator_address: str = ""  # 'host:port' of process 0 ('' = auto-detect or single process)
    num_processes: int = 0  # total processes (0 = auto-detect)
    process_id: int = -1  # this process's index (-1 = auto-detect)
    local_device_count: int = 0  # CPU only: virtual devices per process (0 = leave as is)
    initialization_timeout_s: int = 300  # how long to wait for every process to join

    def __post_init__(self):
        explicit = bool(self.coordinator_address)
        _check(
            not explicit or (self.num_processes >= 1 and self.process_id >= 0),
            "distributed.coordinator_address needs distributed.num_processes and distributed.process_id",
        )
        _check(
            not explicit or self.process_id < self.num_processes,
            f"distributed.process_id={self.process_id} must be < num_processes={self.num_processes}",
        )
