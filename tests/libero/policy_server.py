"""A small openpi-protocol policy server for the LIBERO tests: it answers every request with a fixed
chunk and records what it received (keys, shapes, dtypes, the extras), so tests can check the
requests a worker sends. Real websockets and the real msgpack-numpy codec; runs in a thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
from websockets.asyncio.server import serve

from vlajax.serve.codec import pack, unpack


class ChunkServer:
    """`ws://127.0.0.1:<port>`; every answer is `{'actions': chunk}` (float32 [H, A])."""

    def __init__(self, chunk: np.ndarray, image_size: int = 224, delay_s: float = 0.0):
        self.chunk = np.asarray(chunk, np.float32)
        self.image_size, self.delay_s = image_size, delay_s
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        assert self._ready.wait(30)
        self.url = f"ws://127.0.0.1:{self.port}"

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    async def _handle(self, ws) -> None:
        self.connections += 1
        s = self.image_size
        await ws.send(pack({"observation": {"observation/image": {"shape": [s, s, 3], "dtype": "uint8"},
                                            "observation/wrist_image": {"shape": [s, s, 3], "dtype": "uint8"},
                                            "observation/state": {"shape": [8], "dtype": "float32"}},
                            "action": {"shape": list(self.chunk.shape), "dtype": "float32"}}))
        async for message in ws:
            obs = unpack(message)
            self.requests.append(obs)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await ws.send(pack({"actions": self.chunk}))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
