"""The LIBERO RL run's evaluations, apart from the rollout lane that runs them (`vlajax.libero.rl_lane.LiberoRollout
.evaluate`): the summary row, and the final version's GIFs.

    summary = eval_summary([(task, init, success), ...])       # -> the 'eval' row's numbers (Wilson 95%)
    videos = EvalVideos(output_dir, tag, fps)                  # <output_dir>/frames (the workers'), videos/
    names = videos.write(results)                              # frames -> videos/<suite>_task<k>_init<i>_<outcome>.gif
    videos.commit(lambda: write_the_row(names))                # the row and its GIFs kept together
    videos.sweep()                                             # this run's scratch gone (close, or an abandoned stop)

GIFs: the evaluation of the final version records the held-out initial state 0 of each task (`Episode.video`: the
worker keeps the agentview images its requests carried, one per decision, as the policy saw them, and writes them
to `<output_dir>/frames/<episode id>.npy` when the episode ends); `write` turns each into
`<output_dir>/videos/<suite>_task<k>_init<i>_<success|failure>.gif` (`eval --suite libero_*`'s naming; atomic:
`vlajax.training.logging.write_gif`, a temporary file then a rename) and removes its frames file. `commit(fn)` writes
the evaluation's row (`fn`) and then keeps its GIFs, removing the other outcome's GIF of the same (task, init) (an
earlier final version's, e.g. before a resume to more updates), so `videos/` holds one GIF per episode, the newest
final version's, and the row names it.

Scratch (`sweep`): an evaluation that does not get to its row (a SIGTERM abandons it: `rl_train`'s cleanup kills the
workers, then sweeps; an error; the run closing under it) leaves no file of its own: this run's frames files
(named by its episode ids' tag), the GIFs written for that row, any temporary GIF of this process. After a sweep no
GIF is written and no row committed: after a stop's the writer blocks until the exit (the abandoning thread exits
the process), after the run's close it gets `PipelineStopped`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from vlajax.pipeline.lanes import PipelineStopped
from vlajax.shared.stats import wilson

__all__ = ["EvalVideos", "eval_summary", "gif_name"]


def eval_summary(outcomes: list[tuple[int, int, bool]]) -> dict[str, Any]:
    """(task, init, success) per episode -> {'success', 'successes', 'episodes', 'wilson95', 'tasks': {task:
    {'success', 'successes', 'episodes', 'wilson95'}}, 'outcomes': {'<task>/<init>': 0 | 1}} (the outcomes keyed by
    initial state: a later evaluation pairs with them)."""
    def row(xs: list[bool]) -> dict[str, Any]:
        k, n = sum(xs), len(xs)
        return {"success": k / n, "successes": k, "episodes": n, "wilson95": [round(x, 3) for x in wilson(k, n)]}

    by_task: dict[int, list[bool]] = {}
    for task, _, ok in outcomes:
        by_task.setdefault(task, []).append(ok)
    return row([ok for _, _, ok in outcomes]) | {
        "tasks": {str(t): row(xs) for t, xs in sorted(by_task.items())},
        "outcomes": {f"{t}/{i}": int(ok) for t, i, ok in outcomes}}


def gif_name(suite: str, task: int, init: int, success: bool) -> str:
    """An episode's GIF name, `eval --suite libero_*`'s: `<suite>_task<k>_init<i>_<success|failure>.gif`."""
    return f"{suite}_task{task}_init{init}_{'success' if success else 'failure'}.gif"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


class EvalVideos:
    """The GIFs of an RL run's evaluations and their scratch (the module docstring). `output_dir`: the run's;
    `tag`: the prefix of every episode id of this run (its frames files' names); `fps`: GIF frames a second (one
    frame per decision: 20 / the replan steps is LIBERO's real time). Thread-safe (the rollout lane writes, a
    stop's cleanup sweeps from its watcher thread)."""

    def __init__(self, output_dir: str, tag: str, fps: int):
        self.out = os.path.abspath(output_dir)
        self.frames_dir = os.path.join(self.out, "frames")  # the pool's: the workers write <episode id>.npy here
        self.videos_dir = os.path.join(self.out, "videos")
        self.tag, self.fps = tag, fps
        self.lock = threading.Lock()
        self.closed = False
        self.exiting = False  # swept by a stop's cleanup: the process exits next
        self.pending: list[str] = []  # GIFs written for the row not yet committed

    def write(self, results: list[dict[str, Any]]) -> list[str]:
        """Episode results (each with 'suite', 'task', 'init', 'success', 'frames': the frames file or None) -> the
        GIFs written, as paths relative to the output directory (`videos/<name>.gif`), in order; each frames file
        is removed once its GIF is whole."""
        from vlajax.training.logging import write_gif

        names = []
        for r in results:
            if not r.get("frames"):
                continue
            with self.lock:
                if self.closed:
                    break  # (refused below, outside the lock)
                os.makedirs(self.videos_dir, exist_ok=True)
                name = gif_name(r["suite"], int(r["task"]), int(r["init"]), bool(r["success"]))
                frames = np.load(r["frames"], allow_pickle=False)  # [T, H, W, 3] uint8, one per decision
                self.pending.append(write_gif(os.path.join(self.videos_dir, name), frames, fps=self.fps))
                _remove(r["frames"])
            names.append(os.path.join("videos", name))
        else:
            return names
        self._refuse("writing the evaluation's GIFs")

    def commit(self, write_row: Callable[[], None]) -> None:
        """`write_row()` (the evaluation's row, naming its GIFs), then its GIFs are kept: a sweep comes before both
        or after both. Each kept GIF's other-outcome twin (an older final version's) is removed."""
        with self.lock:
            if not self.closed:
                write_row()
                for path in self.pending:
                    for a, b in (("_success.gif", "_failure.gif"), ("_failure.gif", "_success.gif")):
                        if path.endswith(a):
                            _remove(path[: -len(a)] + b)
                self.pending = []
                return
        self._refuse("writing the evaluation's row")

    def _refuse(self, doing: str) -> None:
        """After a sweep: a stop's (`exiting`) blocks this thread for good -- the watcher exits the process next,
        as `pool`'s workers start no more then; after the run's close, `PipelineStopped`."""
        if self.exiting:
            threading.Event().wait()
        raise PipelineStopped(f"{doing} after the run's scratch was swept")

    def sweep(self, exiting: bool = False) -> None:
        """Remove this run's scratch (its frames files, the uncommitted GIFs, this process's temporary GIFs; the
        frames directory when empty) and write nothing after (`exiting`: a stop's cleanup -- a later write or
        commit blocks until the exit). Call it once no worker can write (after the pool is closed or killed).
        Idempotent."""
        with self.lock:
            self.closed = True
            self.exiting = self.exiting or exiting
            for path in self.pending:
                _remove(path)
            self.pending = []
            for folder, mine in ((self.frames_dir, lambda n: n.startswith(self.tag + "-")),
                                 (self.videos_dir, lambda n: n.endswith(f".tmp-{os.getpid()}"))):
                with contextlib.suppress(OSError):
                    for name in os.listdir(folder):
                        if mine(name):
                            _remove(os.path.join(folder, name))
            with contextlib.suppress(OSError):
                os.rmdir(self.frames_dir)  # (only when empty: another run's files stay)
