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

__all__ = ["QUANTILES", "STAT_NAMES", "episode_stats", "aggregate"]

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
