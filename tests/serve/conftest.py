"""A tiny policy checkpoint in the SFT run layout (initialized, not trained: serving does not care),
and a `vlajax.serve` server on it running in a thread of the test process."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading

import pytest

from vlajax.bench.serve import write_init_checkpoint
from vlajax.config.schema import get_config


def tiny_policy_config(out: str):
    cfg = get_config("sft-tiny")
    return cfg.replace(output_dir=out, checkpoint=dataclasses.replace(cfg.checkpoint, async_save=False))


def write_policy_checkpoint(directory: str, cfg, head: str = "tokens") -> str:
    """`directory` with config.json, policy.json and step 0 of an initialized sft-tiny train state."""
    return write_init_checkpoint(directory, cfg.replace(model=dataclasses.replace(cfg.model, action_head=head)))


@pytest.fixture(scope="session")
def policy_checkpoint(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("serve-policy"))
    return write_policy_checkpoint(os.path.join(out, "checkpoints"), tiny_policy_config(out))


class ServerThread:
    """`vlajax.serve.app.build(args)` running in a thread; `.url`, `.server`, `.stop()`."""

    def __init__(self, args):
        from vlajax.serve import app

        self.server = app.build(args)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(60), "server did not start"
        self.url = f"ws://127.0.0.1:{self.server.port}"

    def _run(self):
        asyncio.run(self.server.run(lambda port: self._ready.set(), signals=False))

    def stop(self):
        self.server.request_stop()
        self._thread.join(60)
        assert not self._thread.is_alive()
