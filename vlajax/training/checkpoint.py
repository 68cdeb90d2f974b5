"""Orbax checkpoints of a sharded train state plus the items needed for exact resume.

One checkpoint step is a directory with up to three items:
- `state`: the train-state pytree (sharded arrays; each process writes its own shards),
- `extra`: a JSON dict (pipeline counters, policy version, config name ...),
- `data_iter`: a grain iterator's state (so input resumes at exactly the next batch).

Saving is asynchronous by default (the step's arrays are copied to host, then written in a
background thread). Orbax writes each step into a temporary directory and renames it only
when complete, so a process killed mid-save leaves no step that `latest_step()` or
`restore()` would pick up. Restoring takes an abstract target (`jax.ShapeDtypeStruct`s with
shardings), which may live on a different mesh than the one that saved: arrays are
resharded on read. Nothing is unpickled.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

__all__ = ["Checkpointer", "abstract_state"]

log = logging.getLogger(__name__)

STATE, EXTRA, DATA_ITER = "state", "extra", "data_iter"


def abstract_state(state_or_shapes: Any, shardings: Any | None = None) -> Any:
    """`ShapeDtypeStruct`s (with shardings) describing a restore target.

    Pass a live state (its own shardings are used), or `jax.eval_shape` output plus a tree of
    shardings for another mesh.
    """
    if shardings is None:
        return jax.tree.map(ocp.utils.to_shape_dtype_struct, state_or_shapes)
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), state_or_shapes, shardings)


class Checkpointer:
    """A thin, typed wrapper over `ocp.CheckpointManager` (one directory, numbered steps).

    `save` writes a step when it is a multiple of `save_every`, when it is the first save in
    the directory, when `force=True`, or when JAX reports a preemption notice (Orbax's
    default decision policies); otherwise it returns False without writing.
    """

    def __init__(self, directory: str, *, max_to_keep: int = 3, save_every: int = 1, async_save: bool = True):
        directory = os.path.abspath(os.path.expanduser(directory))
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise ValueError(f"checkpoint directory {directory} exists and is not a directory")
        self.directory = directory
        self._manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                save_interval_steps=save_every,
                enable_async_checkpointing=async_save,
                create=True,
                # a write cut off by a crash leaves `N.orbax-checkpoint-tmp`: removed when the directory is reopened
                cleanup_tmp_directories=True,
            ),
        )

    # -- queries ----------------------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The newest complete step, or None."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def _has_item(self, step: int, item: str) -> bool:
        return os.path.isdir(os.path.join(self.directory, str(step), item))

    # -- save / restore ---------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Any,
        *,
        extra: dict[str, Any] | None = None,
        data_iter: Any | None = None,
        force: bool = False,
    ) -> bool:
        """Start saving `step` (returns at once when async). False when skipped by the interval."""
        import grain  # local: grain is heavy and only needed with an iterator

        items: dict[str, Any] = {STATE: ocp.args.StandardSave(state)}
        if extra is not None:
            items[EXTRA] = ocp.args.JsonSave(extra)
        if data_iter is not None:
            items[DATA_ITER] = grain.checkpoint.CheckpointSave(data_iter)
        saved = self._manager.save(step, args=ocp.args.Composite(**items), force=force)
        if saved:
            log.info("checkpoint: saving step %d to %s", step, self.directory)
        return saved

    def restore(
        self, target: Any, *, step: int | None = None, data_iter: Any | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Restore `(state, extra)` at `step` (default newest) into `target`'s shapes and shardings.

        `target` is an abstract tree (see `abstract_state`) or a live state to mirror. A given
        `data_iter` is restored in place. Raises FileNotFoundError when there is no checkpoint.
        """
        import grain

        step = self.latest_step() if step is None else step
        if step is None or step not in self.all_steps():
            raise FileNotFoundError(
                f"no complete checkpoint{'' if step is None else f' at step {step}'} in "
                f"{self.directory} (steps: {self.all_steps()})"
            )
        target = jax.tree.map(
            lambda x: x if isinstance(x, jax.ShapeDtypeStruct) else ocp.utils.to_shape_dtype_struct(x), target
        )
        items: dict[str, Any] = {STATE: ocp.args.StandardRestore(target)}
        if self._has_item(step, EXTRA):
            items[EXTRA] = ocp.args.JsonRestore()
        if data_iter is not None:
            if not self._has_item(step, DATA_ITER):
                raise FileNotFoundError(f"checkpoint step {step} in {self.directory} has no data iterator state")
            items[DATA_ITER] = grain.checkpoint.CheckpointRestore(data_iter)
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        log.info("checkpoint: restored step %d from %s", step, self.directory)
        return restored[STATE], dict(restored.get(EXTRA) or {})

    def wait(self) -> None:
        """Block until pending async saves are on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
