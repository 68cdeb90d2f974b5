"""Cross-client dynamic batching over one or more policy replicas, static batch-size buckets.

Requests from every connection go into one `vlajax.pipeline.scheduler.DynamicBatcher` (the
async RL pipeline's scheduler): a batch fires when `max_batch` (B_max) requests wait or the
oldest has waited `max_wait_s` (T_max) -- and only while at least one replica is idle, so
requests arriving while every replica computes gather into the next, larger batch.

Replicas: the policy's params live once on each of `devices` (one replica per local
accelerator, or per CPU device), each served by its own inference thread. A fired batch of n
requests with k idle replicas is split into the j <= k parts whose largest bucket is fastest by
the bucket times measured at warm-up (ties: fewer parts). Where a batch costs about the same as
a single request (an accelerator with room to spare) nothing is split; where cost grows with
the batch (a compute-bound CPU) the batch is spread over the idle replicas.

Each part (n <= B_max requests) is padded to the smallest bucket >= n (default buckets 1, 2,
4, ..., B_max) by repeating its first request, so the sampling function sees only
`len(buckets)` static shapes: traced once per bucket, compiled once per bucket and replica by
`warmup()` before the server accepts connections, and never again under load
(`BatchedPolicy.traces` counts the traces; tests assert it stays at `len(buckets)`).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from vlajax.pipeline.lanes import Lifetime, PipelineStopped
from vlajax.pipeline.scheduler import DynamicBatcher, Request
from vlajax.serve.spec import Parsed
from vlajax.shared.robots import NOISE, STATE, TOKEN_MASK, TOKENS, image_key

log = logging.getLogger(__name__)

__all__ = ["BatchedPolicy", "InferenceWorker", "default_buckets"]

_SPLIT_TIE = 0.05  # a split must be this much faster (relative) than fewer parts to be chosen


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to and including `max_batch`."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


class BatchedPolicy:
    """`bridge` + `model` + `params` as a function of a list of parsed requests, on each of `devices`.

    `__call__(requests, replica=0) -> actions float32 [n, H, env_action_dim]` (env actions in
    [-1, 1]), computed on `devices[replica]`. deterministic: the ODE sampler / argmax tokens
    (what `eval` uses); else the model's stochastic sampler. The rng of batch k (counted over
    all replicas) is `fold_in(key(seed), k)`.
    """

    def __init__(self, bridge, model, params, buckets: Sequence[int], *, deterministic: bool = True,
                 seed: int = 0, devices: Sequence[jax.Device] | None = None):
        if not buckets or sorted(set(buckets)) != list(buckets) or buckets[0] < 1:
            raise ValueError(f"buckets must be increasing positive sizes, got {buckets}")
        self.bridge, self.buckets = bridge, tuple(int(b) for b in buckets)
        self.devices = tuple(devices or jax.local_devices()[:1])
        self.traces = 0  # times the sampling function was traced (= static shapes)
        self.batches = 0
        self.bucket_ms: dict[int, float] = {}  # bucket -> measured ms per call (warmup; the split's cost model)
        self._lock = threading.Lock()
        host = jax.device_get(params)
        self._params = [jax.device_put(host, d) for d in self.devices]
        cameras = bridge.cameras

        def sample(params, images, state, tokens, token_mask, k, noise=None):
            self.traces += 1
            rng = jax.random.fold_in(jax.random.key(seed), k)  # batch k's key, derived inside the jitted call
            env_obs = {**{image_key(c): images[i] for i, c in enumerate(cameras)}, STATE: state,
                       TOKENS: tokens, TOKEN_MASK: token_mask, **({} if noise is None else {NOISE: noise})}
            # the policy eval and the RL rollout run (vlajax.policies.bridge.Bridge.sample)
            return bridge.sample(model, {"params": params}, env_obs, rng, deterministic=deterministic)[0]

        self._sample = jax.jit(sample)

    @property
    def max_batch(self) -> int:
        return self.buckets[-1]

    @property
    def replicas(self) -> int:
        return len(self.devices)

    def bucket(self, n: int) -> int:
        for b in self.buckets:
            if b >= n:
                return b
        raise ValueError(f"batch of {n} exceeds the largest bucket {self.buckets[-1]}")

    def split(self, n: int, idle: int) -> list[int]:
        """Sizes of the parts a batch of `n` is run as on `idle` free replicas (sum = n).

        j parts of sizes ceil/floor(n / j) finish when the largest bucket does; the j with the
        fastest measured bucket wins, a larger j only when >= 5% faster. Without measurements
        (before warmup) nothing is split.
        """
        best, best_ms = 1, self.bucket_ms.get(self.bucket(n), 0.0)
        for j in range(2, min(idle, n) + 1):
            ms = self.bucket_ms.get(self.bucket(math.ceil(n / j)))
            if ms is not None and ms < best_ms * (1 - _SPLIT_TIE):
                best, best_ms = j, ms
        q, r = divmod(n, best)
        return [q + 1] * r + [q] * (best - r)

    def __call__(self, requests: Sequence[Parsed], replica: int = 0) -> np.ndarray:
        n = len(requests)
        b = self.bucket(n)
        rows = list(requests) + [requests[0]] * (b - n)  # padding rows: valid inputs, results dropped
        images = tuple(np.stack([r.images[c] for r in rows]) for c in self.bridge.cameras)
        state = np.stack([r.state for r in rows])
        tokens = np.stack([r.tokens for r in rows])
        mask = np.stack([r.token_mask for r in rows])
        with self._lock:
            k = self.batches
            self.batches += 1
        # Host arrays straight into the jitted call: they follow the replica's committed params onto its
        # device inside jit's C++ dispatch. (An explicit jax.device_put of the inputs and an eager fold_in
        # for the key cost about as much host CPU again as the call itself: 1.6 vs 0.8 ms per batch of 8.)
        noise = None  # test-only: requests carrying the flow's starting noise (vlajax.serve --noise-key)
        if any(getattr(r, "noise", None) is not None for r in rows):
            m, draw = self.bridge.model, np.random.default_rng(k)
            noise = np.stack([r.noise if r.noise is not None else draw.standard_normal(
                (m.action_horizon, m.action_dim)).astype(np.float32) for r in rows])
        out = self._sample(self._params[replica], images, state, tokens, mask, np.uint32(k % (1 << 32)), noise)
        return np.asarray(out)[:n]

    def warmup(self, example: Parsed, repeats: int = 5) -> float:
        """Compile every bucket on every replica and time each bucket on replica 0 into `bucket_ms`:
        the fastest of `repeats` rounds over all buckets. Rounds interleave the buckets so a slow
        phase of a shared machine hits all of them, and the minimum is taken because other processes
        only ever add time (a median of 3 calls per bucket once timed bucket 16 at 20.4 ms, below
        bucket 8 at 24.6 ms, on a machine at load 11, and that server never split). -> seconds taken."""
        t0 = time.perf_counter()
        for r in range(self.replicas):
            for b in self.buckets:
                jax.block_until_ready(self([example] * b, r))
        times: dict[int, list[float]] = {b: [] for b in self.buckets}
        for _ in range(repeats):
            for b in self.buckets:
                t = time.perf_counter()
                self([example] * b)
                times[b].append(1e3 * (time.perf_counter() - t))
        self.bucket_ms.update({b: float(min(ts)) for b, ts in times.items()})
        return time.perf_counter() - t0


class _Batcher(DynamicBatcher):
    """The pipeline's firing rule, plus one (adaptive wait): the waiting requests fire at once when
    `all_waiting()` says every open connection has its request in the server. A closed-loop client
    sends its next request only after its answer, so no request can arrive before one goes out:
    a lone client is never held T_max (T_max = 0 with one connection). (Counting only the requests
    still queued -- not those being computed -- was tried and measured worse: 4 clients on 2 replicas
    228 vs 525 requests/s, bench serve A/B at load 7-10, docs/serving.md.)"""

    def __init__(self, max_batch: int, max_wait_s: float, all_waiting: Callable[[], bool] | None, **kwargs):
        super().__init__(max_batch, max_wait_s, **kwargs)
        self._all_waiting = all_waiting

    def _ready(self, now: float) -> str | None:
        trigger = super()._ready(now)
        if trigger is None and self._queue and self._all_waiting is not None and self._all_waiting():
            return "all"
        return trigger


class InferenceWorker:
    """A dispatcher thread that fires batches from a `DynamicBatcher` while a replica is idle,
    splits them (`BatchedPolicy.split`), and one thread per replica that runs its parts.

    `submit(parsed, done)`: `done(result_or_exception)` is called from a replica thread with
    `{'actions': float32 [H, A], 'server_timing': {...}}` or the exception inference raised.
    With `deliver`, a replica thread instead calls `deliver([(done, result_or_exception), ...])`
    once per part it ran (the server resolves a whole part with one event-loop wake-up).
    """

    def __init__(self, policy: BatchedPolicy, max_wait_s: float,
                 deliver: Callable[[list[tuple[Any, Any]]], None] | None = None,
                 all_waiting: Callable[[], bool] | None = None):
        self.policy = policy
        self._deliver = deliver or (lambda pairs: [done(result) for done, result in pairs])
        self.lifetime = Lifetime()
        self.batcher = _Batcher(policy.max_batch, max_wait_s, all_waiting, lifetime=self.lifetime)
        self._idle = list(range(policy.replicas))
        self._idle_cv = threading.Condition()
        self._inbox: list[queue.Queue] = [queue.Queue() for _ in range(policy.replicas)]
        self._threads = [threading.Thread(target=self._dispatch, name="vlajax-serve-dispatch", daemon=True)]
        self._threads += [threading.Thread(target=self._replica, args=(r,), name=f"vlajax-serve-replica{r}",
                                           daemon=True) for r in range(policy.replicas)]
        self._slot = 0

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def submit(self, parsed: Parsed, done: Callable[[Any], None]) -> Request:
        self._slot += 1
        return self.batcher.submit(self._slot, (parsed, done))

    def stop(self, timeout: float = 10.0) -> None:
        self.lifetime.stop()
        for box in self._inbox:
            box.put(None)
        with self._idle_cv:
            self._idle_cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0.0))

    def _dispatch(self) -> None:
        while not self.lifetime.stopped:
            with self._idle_cv:
                while not self._idle and not self.lifetime.stopped:
                    self._idle_cv.wait(0.1)
            try:
                batch = self.batcher.next_batch(0.1)
            except PipelineStopped:
                break
            if not batch:
                continue
            with self._idle_cv:
                sizes = self.policy.split(len(batch), len(self._idle))
                replicas = [self._idle.pop(0) for _ in sizes]
            start = 0
            for r, size in zip(replicas, sizes):
                self._inbox[r].put(batch[start:start + size])
                start += size

    def _replica(self, replica: int) -> None:
        while True:
            part = self._inbox[replica].get()
            if part is None:
                return
            try:
                self._run(part, replica)
            finally:
                with self._idle_cv:
                    self._idle.append(replica)
                    self._idle_cv.notify_all()

    def _run(self, part: list[Request], replica: int) -> None:
        t0 = time.monotonic()
        try:
            actions = self.policy([r.payload[0] for r in part], replica)
        except Exception as e:  # an inference failure answers this part; the server lives on
            log.exception("serve: inference failed for a batch of %d on replica %d", len(part), replica)
            self._deliver([(r.payload[1], e) for r in part])
            return
        infer_ms = 1e3 * (time.monotonic() - t0)
        bucket = self.policy.bucket(len(part))
        self._deliver([(r.payload[1], {"actions": actions[i], "server_timing": {
            "infer_ms": infer_ms, "queue_ms": 1e3 * (r.fired - r.submitted), "batch_size": len(part),
            "bucket": bucket, "replica": replica}, **({"warnings": list(r.payload[0].warnings)}
                                                      if r.payload[0].warnings else {})})
            for i, r in enumerate(part)])
