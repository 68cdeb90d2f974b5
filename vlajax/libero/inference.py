"""The RL side's policy endpoint for LIBERO workers: an openpi-protocol websocket server in this process
whose requests, from every worker connection, are batched and answered by one callable.

    server = BatchingServer(handle, metadata, max_batch=8, max_wait_ms=5)   # ws://127.0.0.1:<port>
    ... workers connect (`WorkerPool(..., policy_url=server.url)`) ...
    server.close()

`handle(requests) -> replies` runs in the server's own inference thread (never in the event loop):
`requests` is a list of `Request(conn, obs)` -- `conn` an int naming the websocket connection (a
worker env slot; a restarted worker's slots get new numbers), `obs` the unpacked openpi request
(`vlajax.libero.protocol`: openpi's LIBERO keys plus `EXTRA_KEYS`) -- and `replies` one dict per
request (`{'actions': float32 [H, 7]}`), in order. A batch fires when `max_batch` requests wait or
the oldest has waited `max_wait_ms`. An exception in `handle` is answered to each request of the
batch as an error string (the worker reports its episodes as failed) and kept in `errors`.
Real websockets and the msgpack-numpy codec of `vlajax.serve` (what openpi's client speaks).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from vlajax.serve.codec import pack, unpack

__all__ = ["BatchingServer", "Request"]


@dataclasses.dataclass
class Request:
    conn: int  # the connection (worker env slot) it came over
    obs: dict[str, Any]  # the unpacked request
    arrived: float = dataclasses.field(default_factory=time.monotonic)
    _reply: Any = None  # (loop, future), set by the server


class BatchingServer:
    """`ws://127.0.0.1:<port>` answering batched requests with `handle` (module docstring)."""

    def __init__(self, handle: Callable[[list[Request]], list[dict[str, Any]]], metadata: dict[str, Any], *,
                 max_batch: int, max_wait_ms: float = 5.0, host: str = "127.0.0.1"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.handle, self.metadata = handle, metadata
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1e3
        self.host = host
        self._queue: queue.Queue[Request | None] = queue.Queue()
        self._conn_ids = itertools.count()
        self.connections = 0
        self.batches: list[int] = []  # size of every fired batch
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
        await ws.send(pack(self.metadata))
        try:
            async for message in ws:
                fut = self._loop.create_future()
                self._queue.put(Request(conn, unpack(message), _reply=(self._loop, fut)))
                reply = await fut
                await ws.send(reply if isinstance(reply, str) else pack(reply))
        except Exception:  # noqa: BLE001 -- a worker killed mid-request: its connection just ends
            pass

    # ------------------------------------------------------------ inference thread

    def _take_batch(self) -> list[Request] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = first.arrived + self.max_wait_s
        while len(batch) < self.max_batch:
            try:
                nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if nxt is None:
                self._queue.put(None)
                break
            batch.append(nxt)
        return batch

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
        self._queue.put(None)
        self._worker.join(60)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._io.join(30)

    def __enter__(self) -> BatchingServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
