"""The RL side's policy endpoint for LIBERO workers: an openpi-protocol websocket server in this process
whose requests, from every worker connection, are batched and answered by one callable.

    server = BatchingServer(handle, metadata, max_batch=8, max_wait_ms=1000)   # ws://127.0.0.1:<port>
    ... workers connect (`WorkerPool(..., policy_url=server.url)`) ...
    server.close()

`handle(requests) -> replies` runs in the server's own inference thread (never in the event loop):
`requests` is a list of `Request(conn, obs)` -- `conn` an int naming the websocket connection (a
worker env slot; a restarted worker's slots get new numbers), `obs` the unpacked openpi request
(`vlajax.libero.protocol`: openpi's LIBERO keys plus `EXTRA_KEYS`) -- and `replies` one dict per
request (`{'actions': float32 [H, 7]}`), in order. An exception in `handle` is answered to each request
of the batch as an error string (the worker reports its episodes as failed) and kept in `errors`.
Real websockets and the msgpack-numpy codec of `vlajax.serve` (what openpi's client speaks).

When a batch fires (the rollout lane's rule, `pipeline.adaptive_batching`):

- `max_batch` requests wait (trigger "full"), or
- with `adaptive` (the default), every connection with an episode in flight has a request waiting
  ("all"): a connection is in flight from its opening (a worker slot connects as its episode starts)
  or a request of an episode until the episode's terminal request (`libero/done`, which an RL episode
  sends: `Episode.report_terminal`) or until it closes, so env slots that step in lockstep are one
  forward however long their steps take, or
- the oldest request has waited `max_wait_ms` ("wait"; with `adaptive` T_max, the bound on how long
  a slow slot holds the others back -- and on a client that never sends a terminal request).

A terminal request is answered at once in a batch of its own ("terminal"): its answer is not executed,
and the worker's other slots wait for it. `batches` keeps every fired batch's size, `active` the
connections in flight when it fired, `fired_by` its trigger, `triggers` the count per trigger.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from vlajax.libero.protocol import EXTRA_KEYS
from vlajax.serve.codec import pack, unpack

__all__ = ["BatchingServer", "Request"]


@dataclasses.dataclass
class Request:
    conn: int  # the connection (worker env slot) it came over
    obs: dict[str, Any]  # the unpacked request
    arrived: float = dataclasses.field(default_factory=time.monotonic)
    _reply: Any = None  # (loop, future), set by the server

    @property
    def terminal(self) -> bool:
        """The episode's last request (`libero/done`): its answer is not executed."""
        return bool(self.obs.get(EXTRA_KEYS["done"], False))


class BatchingServer:
    """`ws://127.0.0.1:<port>` answering batched requests with `handle` (module docstring)."""

    def __init__(self, handle: Callable[[list[Request]], list[dict[str, Any]]], metadata: dict[str, Any], *,
                 max_batch: int, max_wait_ms: float = 5.0, adaptive: bool = True, host: str = "127.0.0.1"):
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError("max_batch must be >= 1 and max_wait_ms >= 0")
        self.handle, self.metadata = handle, metadata
        self.max_batch, self.max_wait_s, self.adaptive = max_batch, max_wait_ms / 1e3, adaptive
        self.host = host
        self._cond = threading.Condition()
        self._waiting: collections.deque[Request] = collections.deque()  # arrival order
        self._inflight: set[int] = set()  # connections with an episode in flight
        self._closing = False
        self._conn_ids = itertools.count()
        self.connections = 0
        self.batches: list[int] = []  # size of every fired batch
        self.active: list[int] = []  # connections in flight when each batch fired
        self.fired_by: list[str] = []  # the trigger of each batch: 'full' / 'all' / 'wait' / 'terminal'
        self.triggers: collections.Counter = collections.Counter()  # trigger -> batches fired
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._io = threading.Thread(target=self._main, daemon=True, name="libero-rl-server")
        self._io.start()
        if not self._ready.wait(60):
            raise RuntimeError("the LIBERO RL policy server did not start")
        self.url = f"ws://{host}:{self.port}"
        self._worker = threading.Thread(target=self._infer_loop, daemon=True, name="libero-rl-inference")
        self._worker.start()

    # ------------------------------------------------------------ event loop (IO only)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._stop = asyncio.Event()
        async with serve(self._handle_conn, self.host, 0, compression=None, max_size=None) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    async def _handle_conn(self, ws) -> None:
        conn = next(self._conn_ids)
        self.connections += 1
        with self._cond:  # its first request is expected (a worker slot connects as its episode starts)
            self._inflight.add(conn)
        try:
            await ws.send(pack(self.metadata))
            async for message in ws:
                fut = self._loop.create_future()
                self._post(Request(conn, unpack(message), _reply=(self._loop, fut)))
                reply = await fut
                await ws.send(reply if isinstance(reply, str) else pack(reply))
        except Exception:  # noqa: BLE001 -- a worker killed mid-request: its connection just ends
            pass
        finally:
            with self._cond:  # a closed connection is waited for no longer
                self._inflight.discard(conn)
                self._cond.notify_all()

    def _post(self, req: Request) -> None:
        with self._cond:
            if req.terminal:
                self._inflight.discard(req.conn)
            else:
                self._inflight.add(req.conn)
            self._waiting.append(req)
            self._cond.notify_all()

    # ------------------------------------------------------------ inference thread

    def _fire_now(self, now: float) -> tuple[str, list[Request]] | None:
        """(trigger, the batch) when one fires now (module docstring), else None; takes the batch."""
        w = self._waiting
        terminal = [r for r in w if r.terminal]
        if terminal:
            for r in terminal:
                w.remove(r)
            return "terminal", terminal
        if not w:
            return None
        if len(w) >= self.max_batch:
            trigger = "full"
        elif self.adaptive and self._inflight <= {r.conn for r in w}:
            trigger = "all"
        elif now - w[0].arrived >= self.max_wait_s or self._closing:
            trigger = "wait"
        else:
            return None
        return trigger, [w.popleft() for _ in range(min(self.max_batch, len(w)))]

    def _take_batch(self) -> list[Request] | None:
        with self._cond:
            while True:
                now = time.monotonic()
                fired = self._fire_now(now)
                if fired is not None:
                    trigger, batch = fired
                    self.triggers[trigger] += 1
                    self.fired_by.append(trigger)
                    self.active.append(len(self._inflight))
                    return batch
                if self._closing:
                    return None
                # sleep until the oldest request's T_max, or until a request arrives or a connection leaves
                self._cond.wait(self._waiting[0].arrived + self.max_wait_s - now if self._waiting else None)

    def _infer_loop(self) -> None:
        while (batch := self._take_batch()) is not None:
            self.batches.append(len(batch))
            try:
                replies: list[Any] = list(self.handle(batch))
                if len(replies) != len(batch):
                    raise RuntimeError(f"handle answered {len(replies)} replies to {len(batch)} requests")
            except Exception as e:  # noqa: BLE001 -- answered to the workers, kept for the caller
                msg = f"{type(e).__name__}: {e}"
                self.errors.append(msg)
                replies = [f"policy error: {msg}"] * len(batch)
            for req, rep in zip(batch, replies):
                loop, fut = req._reply
                loop.call_soon_threadsafe(lambda f=fut, r=rep: None if f.done() else f.set_result(r))

    def close(self) -> None:
        with self._cond:  # the requests still waiting are answered, then the inference thread ends
            self._closing = True
            self._cond.notify_all()
        self._worker.join(60)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._io.join(30)

    def __enter__(self) -> BatchingServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
