"""The input pipeline: LeRobot dataset -> grain (per-process shard, global shuffle) -> batches ->
global jax.Arrays, prefetched in a background thread.

    source   = ActionChunkSource(LeRobotData(root), horizon)
    dataset  = make_dataset(source, transform, spec, "packed", slots=B // processes, seed=0)
    loader   = Loader(dataset, mesh)          # a grain DatasetIterator: Checkpointer(data_iter=loader)
    batch    = next(loader)                   # dict of global jax.Arrays (see vlajax.data.packing)

Each process reads records `[process_index::process_count]` of the shuffled order, so the
processes together see every record once per epoch. A process's batch holds its slice of the
global batch (`slots` samples, `rows` packed rows); `Loader` offsets the layout indices
(`prefix_index`, `sample_row`) so they address the global batch, then assembles global arrays
with `vlajax.training.distributed.to_global` (dim 0 sharded over `dp`). The loader's state is the grain
state just after the last batch it handed out, so a checkpoint resumes at exactly the next
batch even though the prefetch thread has read ahead.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import grain
import jax
import numpy as np

from vlajax.data.packing import Batching, PackedBatchDataset, PrefixSpec
from vlajax.data.source import ActionChunkSource
from vlajax.data.transforms import DataTransformFn
from vlajax.training import distributed
from vlajax.training.sharding import data_sharding

__all__ = ["make_dataset", "Loader"]


def make_dataset(
    source: ActionChunkSource,
    transform: DataTransformFn,
    spec: PrefixSpec,
    mode: Batching,
    slots: int,
    *,
    seed: int = 0,
    rows: int = 0,
    row_len: int = 0,
    max_segments: int = 0,
    groups: int = 1,
    num_epochs: int | None = None,
    num_threads: int = 2,
    process_index: int | None = None,
    process_count: int | None = None,
) -> grain.IterDataset:
    """This process's stream of host batches (numpy dicts; keys in `vlajax.data.packing`).

    `slots` (and `rows` when packed) are per process. `num_epochs=None` repeats forever.
    """
    pi = jax.process_index() if process_index is None else process_index
    pc = jax.process_count() if process_count is None else process_count
    ds = grain.MapDataset.source(source)[pi::pc].seed(seed).shuffle().repeat(num_epochs).map(transform)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=max(2 * slots, 8)))
    return PackedBatchDataset(it, spec, mode, slots, rows=rows, row_len=row_len, max_segments=max_segments,
                              groups=groups)


_POLL_S = 1.0  # the consumer re-checks the prefetch thread this often
STALL_S = 1800.0  # no batch for this long = stuck (a first batch may wait for slow storage or decoding)

class _Stop:
    pass


class Loader(grain.DatasetIterator):
    """Global batches from `dataset`, `prefetch` of them prepared ahead in a thread.

    With `mesh=None` batches stay process-local numpy (no offsets, no device transfer).
    """

    def __init__(self, dataset: grain.IterDataset, mesh: jax.sharding.Mesh | None = None, prefetch: int = 2):
        it = dataset.__iter__()
        super().__init__(it)
        if not isinstance(dataset, PackedBatchDataset):
            raise TypeError(f"Loader needs a PackedBatchDataset (see make_dataset), got {type(dataset).__name__}")
        self._length = dataset.spec.length
        self._mesh = mesh
        self._prefetch = max(0, prefetch)
        self._state = it.get_state()
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- producing --------------------------------------------------------------------------

    def _produce_one(self) -> tuple[Any, dict]:
        host = next(self._parent)
        state = self._parent.get_state()
        return self._to_global(host), state

    def _to_global(self, host: dict) -> Any:
        if self._mesh is None:
            return host

        pi = jax.process_index()
        slots, rows = host["sample_mask"].shape[0], host["segment_ids"].shape[0]
        host = dict(host)
        host["prefix_index"] = host["prefix_index"] + np.int32(pi * slots * self._length)
        host["sample_row"] = host["sample_row"] + np.int32(pi * rows)
        return distributed.to_global(host, data_sharding(self._mesh))

    def _run(self) -> None:
        q = self._queue
        try:
            while not self._stop.is_set():
                item = self._produce_one()
                while not self._stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except StopIteration:
            q.put(_Stop())
        except BaseException as e:  # re-raised in the consumer, never only logged
            q.put(e)

    def _start(self) -> None:
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self._prefetch)
        self._thread = threading.Thread(target=self._run, name="vlajax-data-prefetch", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._queue = None

    # -- iterator API -------------------------------------------------------------------------

    def __next__(self) -> Any:
        if self._prefetch == 0:
            batch, self._state = self._produce_one()
            return batch
        if self._thread is None:
            self._start()
        item = self._next_item()
        if isinstance(item, _Stop):
            self._queue.put(item)
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        batch, self._state = item
        return batch

    def _next_item(self) -> Any:
        """The prefetch thread's next item; raises if it died without one or produced none for
        `STALL_S` seconds (a stuck read), instead of waiting forever."""
        waited = 0.0
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                waited += _POLL_S
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("data prefetch thread ended without a batch or an error") from None
                if waited >= STALL_S:
                    raise TimeoutError(f"data prefetch produced no batch for {STALL_S:.0f} s (stuck reading "
                                       "the dataset?)") from None

    def get_state(self) -> dict[str, Any]:
        return self._state

    def set_state(self, state: dict[str, Any]) -> None:
        self._halt()
        self._parent.set_state(state)
        self._state = state

    def close(self) -> None:
        self._halt()

    def __del__(self):
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
