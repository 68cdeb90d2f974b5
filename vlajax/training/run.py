"""The run skeleton every trainer stands on: start-up, state on its shards, checkpoints and resume,
stop regions, logging and the step boundary (save, stop, evaluate).

A trainer reads top to bottom on it; what is its own (the data, the model, the step) sits between
the skeleton's calls. The synchronous trainers (`vlajax.sft.loop`, `vlajax.rl.loop`):

    with Run(cfg, "sft", unit="step", total=cfg.sft.num_steps) as run:
        with run.setting_up():                      # a signal here abandons at once (nothing new yet)
            mesh = run.start(progress=f"sft {cfg.name}")   # processes, console, compile cache, mesh
            state, shardings = run.init_state(init_fn)     # jit(init, out_shardings): born on its shards
            ckpt_dir, ckpt = run.open_checkpoints()        # checkpoint.dir, retention, cadence
            state, extra = run.restore(state)               # (state, None) on a fresh run
            start = run.resumed_at(int(extra["step"])) if extra else 0
        logger = run.open_logger()                   # <output_dir>/tb
        steps = run.steps(start, end)
        for step in steps:
            with steps.region(step):                 # abandonable while its predecessor is saved
                state, metrics = step_fn(state, next(loader))
            ...                                      # the trainer's metrics, its logging
            if steps.boundary(done, state, {"step": done}, evaluate=..., data_iter=loader):
                with run.evaluating(done):           # its step was saved first: a signal loses nothing
                    ...
        run.close()

The async trainers (`vlajax.rl.pipeline_run.train_pipeline`: the tabletop's and LIBERO's)
use the same start-up, state, checkpoints and logger, and hand the pipeline's runner the update
boundaries (`run.update_boundaries(...)`: abandonable updates, the forced save after a stop) and run
it with `run.run_updates(runner, boundaries, ...)`.

Stop semantics (`vlajax.training.preemption`, docs/reliability.md): set-up, compiles, a restore, an
evaluation after its step's checkpoint, and a step whose predecessor is saved are abandoned at once
(`cleanup`: the checkpoint write in flight, then the TensorBoard events; exit 0); a step with unsaved
predecessors is finished and saved (forced), then the run leaves with status "interrupted". Multi-process
runs (`stop.collective`) stop only at step boundaries, all together.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax

from vlajax.config.schema import TrainConfig
from vlajax.shared import compile_cache
from vlajax.training import checkpoint, distributed, sharding
from vlajax.training.logging import PLAIN_LINES, MetricsLogger, Progress
from vlajax.training.preemption import StopRequest, UpdateBoundaries, nothing_new, stop_request

__all__ = ["Run", "Steps"]

log = logging.getLogger(__name__)


class Run:
    """One training run: a context manager holding the stop request, the console's progress, the mesh,
    the checkpointer and the TensorBoard logger. `what` names the command in log and stop lines ('sft',
    'rl'); `unit` its steps ('step', 'iteration', 'update'); `total` the steps of a whole run.
    `on_cleanup()`: run (after the checkpoint write in flight) whenever a region is abandoned, e.g.
    killing worker processes."""

    def __init__(self, cfg: TrainConfig, what: str, *, unit: str, total: int,
                 on_cleanup: Callable[[], None] | None = None):
        self.cfg, self.what, self.unit, self.total = cfg, what, unit, total
        self.on_cleanup = on_cleanup
        self.newest: dict[str, int | None] = {"step": None}  # the newest checkpoint written or found
        self.checkpoints: list[int] = []  # the steps this run saved
        self.progress: Progress | None = None
        self.mesh = None
        self.rules = cfg.mesh.logical_rules
        self.ckpt: checkpoint.Checkpointer | None = None
        self.ckpt_dir: str | None = None
        self.logger: MetricsLogger | None = None
        self.keep_open = False  # set when threads may still write: closing under them could corrupt a checkpoint
        self._stack = contextlib.ExitStack()
        self._closed = False

    # ---- the context ------------------------------------------------------------------------

    def __enter__(self) -> Run:
        self.stop: StopRequest = self._stack.enter_context(stop_request(self.what))
        return self

    def __exit__(self, *exc) -> None:
        try:
            if not self.keep_open:
                self.close()
        finally:
            self._stack.close()

    def close(self) -> None:
        """Close the checkpointer (waiting for its writes) and the logger; once."""
        if self._closed:
            return
        self._closed = True
        if self.ckpt is not None:
            self.ckpt.close()
        if self.logger is not None:
            self.logger.close()

    # ---- stop regions -----------------------------------------------------------------------

    def kept(self) -> str:
        """What an abandoned region leaves: the stop line's tail."""
        return nothing_new(self.newest["step"], self.unit)

    def cleanup(self) -> None:
        """An abandoned region's last acts: the checkpoint write in flight, the TensorBoard events, `on_cleanup`."""
        try:
            if self.ckpt is not None:
                self.ckpt.wait()
            if self.logger is not None:
                self.logger.close()
        finally:
            if self.on_cleanup is not None:
                self.on_cleanup()

    def abandonable(self, doing: str, cleanup: bool = True) -> contextlib.AbstractContextManager:
        """A region a signal abandons at once (exit 0): `doing` names it in the stop line."""
        return self.stop.abandonable(doing, self.kept, self.cleanup if cleanup else None)

    def setting_up(self) -> contextlib.AbstractContextManager:
        """The set-up before the first step (nothing new to lose). No cleanup but `on_cleanup` (no write in flight)."""
        return self.stop.abandonable(f"set-up (before the first {self.unit})", self.kept, self.on_cleanup)

    def evaluating(self, step: int) -> contextlib.AbstractContextManager:
        """The evaluation at `step` (its checkpoint is written first): abandonable, and a console phase."""
        scope = contextlib.ExitStack()
        scope.enter_context(self.abandonable(f"the evaluation at {self.unit} {step}"))
        if self.progress is not None:
            scope.enter_context(self.progress.phase(f"evaluating {self.unit} {step}"))
        return scope

    def phase(self, text: str, show_time: bool = True) -> contextlib.AbstractContextManager:
        """A console phase line ('compiling the train step') when the run has progress lines, else nothing."""
        return self.progress.phase(text, show_time) if self.progress is not None else contextlib.nullcontext()

    # ---- start-up ---------------------------------------------------------------------------

    def start(self, progress: str | None = None, mesh: bool = True):
        """Processes (`jax.distributed`), the console (`progress`: its label; None = no progress lines), the
        persistent compile cache and (`mesh`) the `dp x tp x sp` mesh, in that order. -> the mesh (or None)."""
        cfg = self.cfg
        distributed.initialize(cfg.distributed)
        self.stop.collective = jax.process_count() > 1  # then only step boundaries stop (all together)
        if progress is not None:  # from here on: what phase runs, step lines, a heartbeat after logging.heartbeat_s
            self.progress = self._stack.enter_context(Progress(
                self.total, progress, cfg.logging.progress, cfg.logging.every_steps,
                heartbeat_s=cfg.logging.heartbeat_s, max_lines=PLAIN_LINES))
        compile_cache.enable(cfg.compilation_cache_dir)
        return self.make_mesh() if mesh else None

    def make_mesh(self):
        """The `dp x tp x sp` mesh of `mesh` (a ConfigError when it does not fit the devices). -> the mesh."""
        return self.use_mesh(sharding.make_mesh(self.cfg.mesh))

    def use_mesh(self, mesh):
        """The train state's mesh (when the trainer makes its own, e.g. the async placement's train mesh)."""
        self.mesh = mesh
        return mesh

    def init_state(self, init: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
        """`init(key(seed), *args)` jitted with the shardings its logical names give: the state born on its
        shards (`args`, e.g. loaded params, are the program's arguments). -> (state, its shardings)."""
        with self.phase("building the train state, compiling its init"):
            return sharding.init_sharded(init, self.mesh, self.rules, jax.random.key(self.cfg.seed), *args)

    # ---- checkpoints --------------------------------------------------------------------------

    def open_checkpoints(self) -> tuple[str, checkpoint.Checkpointer]:
        """The run's Checkpointer at `checkpoint.dir` (default `<output_dir>/checkpoints`), with the config's
        retention, cadence and async saving. A fresh run (`checkpoint.resume=False`) over saved steps is a
        ConfigError (Orbax would refuse the first save). -> (directory, checkpointer)."""
        c = self.cfg.checkpoint
        c.check_fresh(self.cfg.output_dir)
        self.ckpt_dir = c.directory(self.cfg.output_dir)
        self.ckpt = checkpoint.Checkpointer(self.ckpt_dir, max_to_keep=c.max_to_keep, save_every=c.every_steps,
                                            async_save=c.async_save)
        return self.ckpt_dir, self.ckpt

    def restore(self, target: Any, abstract: Any = None, **items) -> tuple[Any, dict | None]:
        """With `checkpoint.resume` and a saved step: the newest checkpoint restored onto `target`'s shapes and
        shardings (or onto `abstract`, `ShapeDtypeStruct`s), `items` (e.g. `data_iter=loader`) restored in place.
        -> (restored, its JSON extra), or (target, None) when there is nothing to resume."""
        if not (self.cfg.checkpoint.resume and self.ckpt.latest_step() is not None):
            return target, None
        with self.phase("restoring the newest checkpoint"):
            return self.ckpt.restore(checkpoint.abstract_state(target) if abstract is None else abstract, **items)

    def resumed_at(self, step: int) -> int:
        """Record `step` as the newest checkpoint (a resumed run's start). -> step."""
        self.newest["step"] = step
        return step

    def saved(self, step: int) -> None:
        """Record a checkpoint written at `step`."""
        self.newest["step"] = step
        self.checkpoints.append(step)

    # ---- logging ------------------------------------------------------------------------------

    def open_logger(self) -> MetricsLogger:
        """TensorBoard scalars in `<output_dir>/tb` (process 0; `logging.tensorboard`)."""
        self.logger = MetricsLogger(os.path.join(self.cfg.output_dir, "tb"), enabled=self.cfg.logging.tensorboard)
        return self.logger

    # ---- the steps ------------------------------------------------------------------------------

    def steps(self, start: int, end: int) -> Steps:
        """The synchronous loop's steps `start + 1 .. end` (see `Steps`)."""
        return Steps(self, start, end)

    # ---- the async pipeline's updates ------------------------------------------------------------

    def update_boundaries(self, start: int, save: Callable[[Any, bool], None], name: str,
                          dropped: str) -> UpdateBoundaries:
        """Where an async run (`vlajax.pipeline.AsyncRunner`) stops: pass `.scope` as the runner's `update_scope`
        and the whole to `run_updates`. `save(runner, force)` writes the runner's state (and records it with
        `saved`); `name` ('the async run') and `dropped` (what the other lanes had in flight) go in the stop line."""
        return UpdateBoundaries(self.stop, self.ckpt, start, self.newest, save, self.cleanup, name, dropped)

    def run_updates(self, runner: Any, boundaries: UpdateBoundaries, timeout: float | None = None,
                    last_update_line: bool = False) -> str:
        """`runner.run(...)` until its updates are done or a stop, then the checkpoint writes in flight.
        A stop at a boundary prints its one line; `last_update_line`: also when the signal came during the last
        update (finished and saved). -> the runner's status ('done', 'interrupted', ...)."""
        status = runner.run(timeout=timeout, on_interrupt=boundaries.interrupt, stop=self.stop.local)
        self.ckpt.wait()
        u = runner.counters.updates
        if status == "interrupted":
            self.stop.report(f"{boundaries.run} at update {u}", f"stopped at the boundary after update {u}")
        elif last_update_line and self.stop.local():
            self.stop.report(f"{boundaries.run} at update {u}", f"finished the last update and saved checkpoint {u}")
        return status


class Steps:
    """The steps of a synchronous loop, `for step in steps:` (0-based; step `s` makes checkpoint `s + 1`).

    `region(step)`: the step's work, abandonable when its predecessor is saved (nothing would be lost).
    `boundary(done, state, extra, evaluate, **items)`: after step `done`, in this order -- a stop request
    (all processes agree) ends the run after this step; the checkpoint of `state` (+ JSON `extra`, Orbax
    `items` such as `data_iter`; forced at the run's end, at a stop, and before an evaluation); the stop's line.
    -> whether to evaluate now. `end` may shrink (`finish_at`: a time limit); `status` is 'done' or 'interrupted'."""

    def __init__(self, run: Run, start: int, end: int):
        self.run, self.start, self.end = run, start, end
        self.status = "done"
        self.safe_at = start  # the newest step whose state a rerun gets back (saved, or the start)

    def __iter__(self) -> Iterator[int]:
        step = self.start
        while step < self.end:
            yield step
            step += 1

    def region(self, step: int) -> contextlib.AbstractContextManager:
        if self.safe_at == step:
            return self.run.abandonable(f"{self.run.unit} {step + 1} (its predecessor is saved)")
        return contextlib.nullcontext()

    def finish_at(self, done: int) -> None:
        """End the run after step `done` (a time limit), with its checkpoint."""
        self.end = done

    def boundary(self, done: int, state: Any, extra: dict, evaluate: bool = False, **items) -> bool:
        run, unit = self.run, self.run.unit
        if done < self.end and run.stop.requested():  # SIGTERM / Ctrl-C: this step's checkpoint, then leave
            log.warning("%s: interrupted (%s) after %s %d; saving it", run.what, run.stop.reason, unit, done)
            self.end, self.status = done, "interrupted"
        evaluate = evaluate and self.status == "done"
        # an evaluation follows: save its step first, so a signal during it loses nothing
        if run.ckpt.save(done, state, extra=extra, force=done in (run.total, self.end) or evaluate, **items):
            run.saved(done)
            self.safe_at = done
        if self.status == "interrupted":
            run.stop.report(f"{unit} {done}", f"finished it and saved checkpoint {done}")
        return evaluate
