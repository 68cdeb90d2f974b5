"""A client of `vlajax.serve` (or any openpi websocket policy server) that keeps several requests
in flight: remote evaluation and the serving bench use it.

    with RemotePolicy("ws://127.0.0.1:8000", connections=16) as policy:
        policy.metadata                       # what the server sent on connect
        actions = policy.infer_many(observations)   # list of obs dicts -> list of float32 [H, A]

The connections live on one asyncio loop in a background thread; `infer_many` spreads the
observations over them (each connection sends its next observation when its previous answer
arrives, like one robot), so the server can batch them. An error string from the server
raises `ServerError` with its text.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from vlajax.serve.codec import pack, unpack

__all__ = ["RemotePolicy", "ServerError"]


class ServerError(RuntimeError):
    """The server answered a request with an error string."""


class RemotePolicy:
    """`connections` websocket connections to `url`, driven from any thread (see the module docstring)."""

    def __init__(self, url: str, connections: int = 1, *, open_timeout: float = 60.0, timeout: float = 600.0):
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"policy server url must start with ws:// or wss://, got {url!r}")
        self.url, self.timeout = url, timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vlajax-remote-policy", daemon=True)
        self._thread.start()
        self._conns: list[ClientConnection] = []
        try:
            self.metadata: dict[str, Any] = self._run(self._open(connections, open_timeout), open_timeout + 5)
        except BaseException:
            self.close()
            raise

    def _run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self, n: int, open_timeout: float) -> dict[str, Any]:
        meta = None
        for _ in range(n):
            ws = await connect(self.url, compression=None, max_size=None, open_timeout=open_timeout)
            self._conns.append(ws)
            meta = unpack(await ws.recv())
        return meta

    async def _one(self, ws: ClientConnection, obs: dict[str, Any]) -> dict[str, Any]:
        await ws.send(pack(obs))
        reply = await ws.recv()
        if isinstance(reply, str):
            raise ServerError(reply)
        return unpack(reply)

    async def _many(self, observations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[Any] = [None] * len(observations)
        n = len(self._conns)

        async def lane(k: int) -> None:
            for i in range(k, len(observations), n):
                out[i] = await self._one(self._conns[k], observations[i])

        await asyncio.gather(*(lane(k) for k in range(min(n, len(observations)))))
        return out

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """One request -> the server's answer (`{'actions': [H, A], 'server_timing': ...}`)."""
        return self._run(self._one(self._conns[0], obs), self.timeout)

    def infer_many(self, observations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Answers for `observations`, in order, with up to `connections` requests in flight."""
        return self._run(self._many(observations), self.timeout)

    def close(self) -> None:
        async def close_all():
            for ws in self._conns:
                await ws.close()

        if self._loop.is_running():
            try:
                self._run(close_all(), 30)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(30)
        self._loop.close()

    def __enter__(self) -> RemotePolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
