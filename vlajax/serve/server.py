"""The websocket policy server: openpi's `WebsocketPolicyServer` protocol, batched across clients.

Protocol (what `openpi_client.WebsocketClientPolicy` expects):

1. The client opens a websocket (`ws://HOST:PORT`); the server sends one binary
   msgpack-numpy message: the metadata (`{'observation': {key: {'shape', 'dtype'}},
   'action': {'shape': [H, A], 'dtype': 'float32'}, 'policy': ..., 'batching': ...}`).
2. Each binary message from the client is one observation (a map, see `vlajax.serve.spec`);
   the server answers with one binary message `{'actions': float32 [H, A],
   'server_timing': {'infer_ms', 'queue_ms', 'batch_size', 'bucket'}}`.
3. A request the server cannot serve is answered with a text message `error: <problem>`
   (the client raises it); the connection stays open and the next request is served.
4. `GET /healthz` answers 200 `OK` over plain HTTP (503 `draining` while draining).

Every connection's requests go to one `InferenceWorker` (cross-client dynamic batching over the
policy's replicas, one per device). Adaptive wait (default): a batch fires at B_max, at T_max,
or at once when every open connection has its request in the server -- no connection is ever
held for a batch that cannot grow (with one connection that is T_max = 0).
SIGTERM / SIGINT: draining -- the listener stays open but answers every new handshake and
`/healthz` with 503; every request already received is answered; then close, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.server import ServerConnection, serve

from vlajax.serve.batching import BatchedPolicy, InferenceWorker
from vlajax.serve.codec import CodecError, pack, unpack
from vlajax.serve.spec import ObsError, ObsSpec

log = logging.getLogger(__name__)

__all__ = ["PolicyServer"]


class PolicyServer:
    """Serve `policy` (a `BatchedPolicy`) to websocket clients. `run()` until stopped."""

    def __init__(self, policy: BatchedPolicy, spec: ObsSpec, metadata: dict[str, Any], *, host: str = "127.0.0.1",
                 port: int = 8000, max_wait_s: float = 0.005, max_message_bytes: int = 8 << 20,
                 drain_timeout_s: float = 30.0, fire_when_all_waiting: bool = True):
        self.policy, self.spec = policy, spec
        self.host, self.port = host, port
        self.max_message_bytes = max_message_bytes
        self.drain_timeout_s = drain_timeout_s
        # fire_when_all_waiting: a batch also fires as soon as every open connection has its request in
        # the server (a connection is read one request at a time, so no other request can join it)
        self.worker = InferenceWorker(policy, max_wait_s, deliver=self._deliver, all_waiting=(
            (lambda: self.in_flight >= self.connections) if fire_when_all_waiting else None))
        self.metadata = {**metadata, "batching": {"max_batch": policy.max_batch, "max_wait_ms": 1e3 * max_wait_s,
                                                  "fire_when_all_waiting": fire_when_all_waiting,
                                                  "buckets": list(policy.buckets), "replicas": policy.replicas,
                                                  "bucket_ms": {str(b): ms for b, ms in policy.bucket_ms.items()}},
                         "max_message_bytes": max_message_bytes}
        self.in_flight = 0
        self.connections = 0  # open websocket connections (each has at most one request in the server)
        self.served = 0
        self.errors = 0
        self.draining = False
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- lifecycle

    def request_stop(self) -> None:
        """Begin draining (thread-safe; what SIGTERM does)."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    async def run(self, on_ready: Callable[[int], None] | None = None, *, signals: bool = True) -> None:
        """Serve until `request_stop()` / SIGTERM / SIGINT, then drain. `on_ready(port)` once listening."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._stop.set)
        self.worker.start()
        try:
            async with serve(self._handle, self.host, self.port, compression=None,
                             max_size=4 * self.max_message_bytes, process_request=self._health) as server:
                self.port = server.sockets[0].getsockname()[1]
                log.info("serve: listening on ws://%s:%d", self.host, self.port)
                if on_ready is not None:
                    on_ready(self.port)
                await self._stop.wait()
                self.draining = True  # from here every handshake (and /healthz) is answered 503 draining
                log.info("serve: draining %d in-flight request(s)", self.in_flight)
                deadline = time.monotonic() + self.drain_timeout_s
                while self.in_flight and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                server.close(close_connections=True)
                await server.wait_closed()
        finally:
            self.worker.stop()
        log.info("serve: stopped after %d request(s) (%d errors)", self.served, self.errors)

    # ---------------------------------------------------------------- connections

    def _deliver(self, pairs: list[tuple[asyncio.Future, Any]]) -> None:
        """Resolve a part's futures (called from a replica thread): one event-loop wake-up per part,
        not one per request."""
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed (drain timed out)
            self._loop.call_soon_threadsafe(_resolve, pairs)

    def _health(self, connection: ServerConnection, request) -> Any:
        """`/healthz`: 200 OK, 503 draining while draining; while draining every other request too
        (the listener stays open so the health check can say so; no new connection is accepted)."""
        if self.draining:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        return None

    async def _error(self, ws: ServerConnection, problem: str) -> None:
        self.errors += 1
        log.info("serve: %s: %s", ws.remote_address, problem)
        await ws.send(f"error: {problem}")

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        try:
            await ws.send(pack(self.metadata))
            async for message in ws:
                await self._one(ws, message)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.connections -= 1
        log.debug("serve: %s closed", ws.remote_address)

    async def _one(self, ws: ServerConnection, message: bytes | str) -> None:
        if self.draining:
            return await self._error(ws, "the server is shutting down")
        if isinstance(message, str):
            return await self._error(ws, "expected a binary msgpack-numpy observation, got a text message")
        if len(message) > self.max_message_bytes:
            return await self._error(ws, f"message of {len(message)} bytes exceeds the server's limit of "
                                         f"{self.max_message_bytes} bytes")
        try:
            parsed = self.spec.parse(unpack(message))
        except (CodecError, ObsError) as e:
            return await self._error(ws, str(e))
        future = asyncio.get_running_loop().create_future()  # resolved by `_deliver`
        self.in_flight += 1  # until the answer is sent: draining waits for it
        try:
            self.worker.submit(parsed, future)
            result = await future
            if isinstance(result, BaseException):
                return await self._error(ws, f"inference failed: {type(result).__name__}: {result}")
            self.served += 1
            await ws.send(pack(result))
        finally:
            self.in_flight -= 1


def _resolve(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for future, result in pairs:
        if not future.done():  # a cancelled one: its client disconnected
            future.set_result(result)
