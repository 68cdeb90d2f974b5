"""Cross-client dynamic batching: one inference thread, static batch-size buckets.

Requests from every connection go into one `vlajax.pipeline.scheduler.DynamicBatcher` (the
async RL pipeline's scheduler): a batch fires when `max_batch` (B_max) requests wait or the
oldest has waited `max_wait_s` (T_max). The fired batch (n <= B_max requests) is padded to the
smallest bucket >= n (default buckets 1, 2, 4, ..., B_max) by repeating its first request,
so the sampling function sees only `len(buckets)` static shapes: it is jitted once per bucket,
all compiled by `warmup()` before the server accepts connections, and never again under load
(`BatchedPolicy.traces` counts the traces; tests assert it stays at `len(buckets)`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from vlajax.models import heads
from vlajax.pipeline.lanes import Lifetime, PipelineStopped
from vlajax.pipeline.scheduler import DynamicBatcher, Request
from vlajax.serve.spec import Parsed

log = logging.getLogger(__name__)

__all__ = ["BatchedPolicy", "InferenceWorker", "default_buckets"]


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to and including `max_batch`."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


class BatchedPolicy:
    """`bridge` + `model` + `params` as a function of a list of parsed requests.

    `__call__(requests) -> actions float32 [n, H, env_action_dim]` (env actions in [-1, 1]).
    deterministic: the ODE sampler / argmax tokens (what `eval` uses); else the model's
    stochastic sampler. The rng of batch k is `fold_in(key(seed), k)`.
    """

    def __init__(self, bridge, model, params, buckets: Sequence[int], *, deterministic: bool = True,
                 seed: int = 0):
        if not buckets or sorted(set(buckets)) != list(buckets) or buckets[0] < 1:
            raise ValueError(f"buckets must be increasing positive sizes, got {buckets}")
        self.bridge, self.buckets = bridge, tuple(int(b) for b in buckets)
        self.traces = 0  # times the sampling function was traced (= compiled shapes)
        self.batches = 0
        self._key = jax.random.key(seed)
        self._params = params
        cameras = bridge.cameras

        def sample(params, images, state, tokens, token_mask, rng):
            self.traces += 1
            env_obs = {**{f"pixels/{c}": images[i] for i, c in enumerate(cameras)}, "state": state,
                       "tokens": tokens, "token_mask": token_mask}
            obs = bridge.observation(env_obs)
            variables = {"params": params}
            if bridge.model.action_head == "flow":
                out = heads.flow_sample(model, variables, obs, rng, sampler="ode" if deterministic else None)
            else:
                out = heads.token_sample(model, variables, obs, rng, temperature=0.0 if deterministic else 1.0)
            return bridge.env_actions(out.actions)

        self._sample = jax.jit(sample)

    @property
    def max_batch(self) -> int:
        return self.buckets[-1]

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if b >= n:
                return b
        raise ValueError(f"batch of {n} exceeds the largest bucket {self.buckets[-1]}")

    def __call__(self, requests: Sequence[Parsed]) -> np.ndarray:
        n = len(requests)
        b = self.bucket(n)
        rows = list(requests) + [requests[0]] * (b - n)  # padding rows: valid inputs, results dropped
        images = tuple(np.stack([r.images[c] for r in rows]) for c in self.bridge.cameras)
        state = np.stack([r.state for r in rows])
        tokens = np.stack([r.tokens for r in rows])
        mask = np.stack([r.token_mask for r in rows])
        rng = jax.random.fold_in(self._key, self.batches)
        self.batches += 1
        out = self._sample(self._params, images, state, tokens, mask, rng)
        return np.asarray(jax.device_get(out))[:n]

    def warmup(self, example: Parsed) -> float:
        """Compile every bucket (seconds taken)."""
        t0 = time.perf_counter()
        for b in self.buckets:
            jax.block_until_ready(self([example] * b))
        return time.perf_counter() - t0


class InferenceWorker:
    """The inference thread: fires batches from a `DynamicBatcher` and answers each request.

    `submit(parsed, done)`: `done(result_or_exception)` is called from the worker thread with
    `{'actions': float32 [H, A], 'server_timing': {...}}` or the exception inference raised.
    """

    def __init__(self, policy: BatchedPolicy, max_wait_s: float):
        self.policy = policy
        self.lifetime = Lifetime()
        self.batcher = DynamicBatcher(policy.max_batch, max_wait_s, lifetime=self.lifetime)
        self._thread = threading.Thread(target=self._loop, name="vlajax-serve-inference", daemon=True)
        self._slot = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, parsed: Parsed, done: Callable[[Any], None]) -> Request:
        self._slot += 1
        return self.batcher.submit(self._slot, (parsed, done))

    def stop(self, timeout: float = 10.0) -> None:
        self.lifetime.stop()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self.lifetime.stopped:
            try:
                batch = self.batcher.next_batch(0.1)
            except PipelineStopped:
                break
            if not batch:
                continue
            t0 = time.monotonic()
            try:
                actions = self.policy([r.payload[0] for r in batch])
            except Exception as e:  # an inference failure answers this batch; the server lives on
                log.exception("serve: inference failed for a batch of %d", len(batch))
                for r in batch:
                    r.payload[1](e)
                continue
            infer_ms = 1e3 * (time.monotonic() - t0)
            for i, r in enumerate(batch):
                timing = {"infer_ms": infer_ms, "queue_ms": 1e3 * (r.fired - r.submitted),
                          "batch_size": len(batch), "bucket": self.policy.bucket(len(batch))}
                r.payload[1]({"actions": actions[i], "server_timing": timing})


