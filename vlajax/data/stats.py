"""Feature statistics in LeRobot's format: per episode, and aggregated over episodes.

Every statistic is a numpy array: `min`, `max`, `mean`, `std` and the quantiles `q01 .. q99`
have the feature's shape (`[d]` for vectors, `[1]` for scalars, `[3, 1, 1]` for images, whose
pixels are scaled to [0, 1] and reduced over height and width); `count` is `[1]` (frames).
Aggregation follows lerobot: count-weighted mean, pooled variance, elementwise min/max, and
count-weighted means of the per-episode quantiles (an approximation lerobot also makes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["QUANTILES", "STAT_NAMES", "RunningStats", "episode_stats", "aggregate"]

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)


def episode_stats(values: np.ndarray, is_image: bool = False) -> dict[str, np.ndarray]:
    """Statistics of one episode's values: [T, ...] -> dict of arrays (see module docstring).

    Images are uint8 [T, h, w, 3]; their statistics are per channel, shape [3, 1, 1].
    """
    v = np.asarray(values)
    t = v.shape[0]
    if t == 0:
        raise ValueError("statistics of an empty episode")
    if is_image:
        x = v.reshape(t, -1, v.shape[-1]).astype(np.float64) / 255.0  # [T, h*w, 3]
        flat = x.reshape(-1, x.shape[-1])  # [T*h*w, 3]
        shape = (x.shape[-1], 1, 1)
    else:
        flat = v.reshape(t, -1).astype(np.float64)
        shape = v.shape[1:] or (1,)
    out = {
        "min": flat.min(0), "max": flat.max(0), "mean": flat.mean(0), "std": flat.std(0),
        **{k: np.quantile(flat, q, axis=0) for k, q in QUANTILES.items()},
    }
    out = {k: s.reshape(shape) for k, s in out.items()}
    out["count"] = np.array([t], np.int64)
    return out


def aggregate(per_episode: Sequence[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Combine per-episode statistics ({feature: {stat: array}}) into dataset statistics."""
    if not per_episode:
        raise ValueError("no episodes to aggregate")
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in per_episode[0]:
        eps = [e[key] for e in per_episode if key in e]
        counts = np.array([float(np.asarray(e["count"]).reshape(-1)[0]) for e in eps])
        w = counts / counts.sum()
        means = np.stack([np.asarray(e["mean"], np.float64) for e in eps])
        stds = np.stack([np.asarray(e["std"], np.float64) for e in eps])
        wb = w.reshape(-1, *([1] * (means.ndim - 1)))
        mean = (wb * means).sum(0)
        var = (wb * (stds**2 + (means - mean) ** 2)).sum(0)
        agg = {
            "min": np.min(np.stack([np.asarray(e["min"], np.float64) for e in eps]), 0),
            "max": np.max(np.stack([np.asarray(e["max"], np.float64) for e in eps]), 0),
            "mean": mean,
            "std": np.sqrt(np.maximum(var, 0.0)),
            "count": np.array([int(counts.sum())], np.int64),
        }
        for q in QUANTILES:
            if all(q in e for e in eps):
                agg[q] = (wb * np.stack([np.asarray(e[q], np.float64) for e in eps])).sum(0)
        out[key] = agg
    return out


class RunningStats:
    """openpi's norm statistics of a stream of vectors (`openpi.shared.normalize.RunningStats`, the
    algorithm its `compute_norm_stats` runs): exact running mean and std, and q01 / q99 read off one
    5,000-bin histogram per dimension.

    The histogram's edges span the first batch's [min - 1e-10, max + 1e-10]; when a later batch
    widens the range, the edges become linspace(min, max) of the new range and each old bin's count
    moves into the new bin holding its left edge; values are then binned against the edges as
    `np.histogram` bins them (the last bin closed). A quantile q is the left edge of the first bin
    whose cumulative count reaches q * count. So the quantiles depend on the batches' order and
    size, as openpi's do: feed the batches openpi's loader would.

        stats = RunningStats(); stats.update(x)   # x [..., d], every leading dim a batch dim
        mean, std, q01, q99, lo, hi = stats.finish()   # float64 [d] each
    """

    BINS = 5000

    def __init__(self) -> None:
        self.count = 0
        self.mean = self.sq = self.lo = self.hi = None
        self.hist: np.ndarray | None = None  # [d, BINS]
        self.edges: np.ndarray | None = None  # [d, BINS + 1]

    def update(self, batch: np.ndarray) -> None:
        x = np.asarray(batch)
        x = x.reshape(-1, x.shape[-1])
        n, d = x.shape
        if self.count == 0:
            self.mean, self.sq = x.mean(0), (x**2).mean(0)
            self.lo, self.hi = x.min(0), x.max(0)
            self.hist = np.zeros((d, self.BINS))
            self.edges = np.stack([np.linspace(a - 1e-10, b + 1e-10, self.BINS + 1) for a, b in zip(self.lo, self.hi)])
        else:
            if d != self.mean.size:
                raise ValueError(f"vectors of {d} dims after {self.mean.size}")
            lo, hi = np.minimum(self.lo, x.min(0)), np.maximum(self.hi, x.max(0))
            widened = np.any(lo < self.lo) or np.any(hi > self.hi)
            self.lo, self.hi = lo, hi
            if widened:  # every dimension is re-binned when any range grew (as openpi does)
                for i in range(d):
                    new = np.linspace(self.lo[i], self.hi[i], self.BINS + 1)
                    self.hist[i] = np.histogram(self.edges[i, :-1], bins=new, weights=self.hist[i])[0]
                    self.edges[i] = new
        self.count += n
        w = n / self.count
        self.mean = self.mean + (x.mean(0) - self.mean) * w
        self.sq = self.sq + ((x**2).mean(0) - self.sq) * w
        for i in range(d):
            self.hist[i] += np.histogram(x[:, i], bins=self.edges[i])[0]

    def quantile(self, q: float) -> np.ndarray:
        """[d]: the left edge of the first bin whose cumulative count reaches q * count."""
        cum = np.cumsum(self.hist, axis=1)
        idx = np.array([np.searchsorted(c, q * self.count) for c in cum])
        return self.edges[np.arange(len(idx)), idx]

    def finish(self) -> tuple[np.ndarray, ...]:
        """(mean, std, q01, q99, min, max), float64 [d] each; ValueError under 2 vectors (openpi's rule)."""
        if self.count < 2:
            raise ValueError("statistics of fewer than 2 vectors")
        std = np.sqrt(np.maximum(0.0, self.sq - self.mean**2))
        return self.mean, std, self.quantile(0.01), self.quantile(0.99), self.lo, self.hi
