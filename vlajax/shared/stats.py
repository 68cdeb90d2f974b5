"""Intervals for figures measured over a few runs (seeds, rounds, repeats).

`percentile_bootstrap`: the statistic of the values and its percentile-bootstrap interval. The
values are resampled with replacement `resamples` times from a seeded numpy generator (the same
inputs give the same interval); the bounds are the (1 -/+ confidence) / 2 quantiles of the
resampled statistics. With n values the interval can only span what the resamples of those n
values give: with every value negative, so is every resampled mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000


def percentile_bootstrap(values, statistic: Callable = np.mean, *, resamples: int = RESAMPLES,
                         confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float, float]:
    """(statistic, low, high) of `values` [n] (n >= 1); `statistic` reduces along `axis`
    (np.mean, np.median, ...). One value gives (v, v, v)."""
    x = np.asarray(values, np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"percentile_bootstrap needs a non-empty 1-d list of values, got shape {x.shape}")
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ValueError(f"confidence must be in (0, 1) and resamples >= 1, got {confidence}, {resamples}")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    stats = statistic(x[idx], axis=1)  # [resamples]
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(statistic(x)), float(lo), float(hi)


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """(low, high): the Wilson score interval of a success rate k / n (k successes of n; 95% at the default z);
    n = 0 gives (0, 1)."""
    if n <= 0:
        return 0.0, 1.0
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)
