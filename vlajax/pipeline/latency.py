"""A latency model of CPU-bound simulators (LIBERO-style MuJoCo on CPU workers).

In RL-VLA3's CPU-bound regime every env is stepped by a CPU worker whose step time varies:
most steps take about the median, a few are stragglers (contacts, resets, rendering). A batch
of envs stepped together finishes when its slowest env does, so the batch time is the max of
the per-env latencies: the long tail that env slots and dynamic batching are meant to hide.

`LatencyModel.batch_seconds(rng, n)` draws that max for a batch of n envs from a log-normal
around `median_s` mixed with stragglers (`tail_prob` of steps take `tail_scale` times longer).
`with_latency(step, model)` wraps a slot's `step` so that it also takes that wall time
(sleeping releases the GIL and the CPU, like waiting on worker processes would).

Resets. A chunk call of an env can also end an episode and reset the simulator, which costs
far more than a step (LIBERO-style: re-place the scene, then a few no-op steps for the objects
to settle). `reset_prob` is the probability that one env's chunk call includes a reset
(about H / episode length when episodes end at independent times) and `reset_s` its extra
wall time. Both are 0 by default (no reset latency).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import numpy as np

__all__ = ["LatencyModel", "with_latency"]


@dataclasses.dataclass(frozen=True)
class LatencyModel:
    """Per-env step latency: log-normal(median_s, sigma) x (tail_scale with prob. tail_prob)."""

    median_s: float = 0.01  # typical step time of one env
    sigma: float = 0.25  # log-normal shape (spread around the median)
    tail_prob: float = 0.02  # probability that a step is a straggler
    tail_scale: float = 6.0  # a straggler takes this many times longer
    reset_prob: float = 0.0  # probability that one env's chunk call also resets its episode
    reset_s: float = 0.0  # extra wall time of such a reset

    def __post_init__(self):
        if (self.median_s < 0 or self.sigma < 0 or not 0 <= self.tail_prob <= 1 or self.tail_scale < 1
                or not 0 <= self.reset_prob <= 1 or self.reset_s < 0):
            raise ValueError(f"invalid latency model {self}")

    def env_seconds(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Latencies of n env steps, seconds [n]."""
        base = self.median_s * np.exp(self.sigma * rng.standard_normal(n))
        return base * np.where(rng.random(n) < self.tail_prob, self.tail_scale, 1.0)

    def batch_seconds(self, rng: np.random.Generator, n: int, steps: int = 1) -> float:
        """Wall time of stepping n envs in parallel by `steps` control steps each (an action chunk):
        each env takes the sum of its `steps` step latencies (plus `reset_s` if its call resets,
        probability `reset_prob`); the batch takes the slowest env."""
        if not n:
            return 0.0
        per_env = self.env_seconds(rng, n * steps).reshape(n, steps).sum(axis=1)
        if self.reset_prob > 0:
            per_env = per_env + self.reset_s * (rng.random(n) < self.reset_prob)
        return float(per_env.max())

    def expected_batch_seconds(self, n: int, draws: int = 4000, seed: int = 0, steps: int = 1) -> float:
        """Monte-Carlo mean of `batch_seconds` (grows with n: the tail effect)."""
        rng = np.random.default_rng(seed)
        return float(np.mean([self.batch_seconds(rng, n, steps) for _ in range(draws)]))


def with_latency(step: Callable, model: LatencyModel, envs_per_slot: int, seed: int = 0,
                 steps_per_call: int = 1) -> Callable:
    """`step(slot, state, action)` that also takes the simulated wall time of its env batch
    (`steps_per_call` control steps per env: the chunk of H actions one call executes)."""
    rngs: dict[int, np.random.Generator] = {}
    lock = threading.Lock()

    def timed(slot, state, action):
        with lock:
            rng = rngs.setdefault(slot, np.random.default_rng([seed, slot]))
            delay = model.batch_seconds(rng, envs_per_slot, steps_per_call)
        t0 = time.monotonic()
        out = step(slot, state, action)
        left = delay - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
        return out

    return timed
