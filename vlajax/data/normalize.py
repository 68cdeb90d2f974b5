"""Normalization statistics from a dataset's `meta/stats.json`, and the maps to and from [-1, 1].

Three modes, as in openpi / LeRobot:
  mean_std   x -> (x - mean) / (std + eps)
  quantile   x -> 2 (x - q01) / (q99 - q01 + eps) - 1   (q01 -> -1, q99 -> +1; actions for flow heads)
  min_max    x -> 2 (x - min) / (max - min + eps) - 1   (the whole range in [-1, 1]; actions for the
             token head, whose bins cover [-1, 1] only: under `quantile` the rarest 1% of each
             action dim, e.g. the gripper's opening commands, falls outside every bin)
All have exact inverses (`unnormalize`). Missing or degenerate statistics are errors naming the
file: a missing file or feature, a wrong shape, non-finite values, a negative std, q99 < q01,
or a feature whose every dimension is constant (a broken recording, not something to divide by).
A single constant dimension is allowed: eps keeps it finite and it maps to a constant.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np

from vlajax.data.lerobot import DatasetError, read_json

__all__ = ["NormStats", "load_norm_stats", "normalize", "unnormalize", "Mode"]

Mode = Literal["mean_std", "quantile", "min_max"]
EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class NormStats:
    """Statistics of one feature, each float32 [d]."""

    mean: np.ndarray
    std: np.ndarray
    q01: np.ndarray
    q99: np.ndarray
    min: np.ndarray | None = None  # optional: needed by the 'min_max' mode
    max: np.ndarray | None = None


def load_norm_stats(root: str, keys: tuple[str, ...], dims: dict[str, int] | None = None) -> dict[str, NormStats]:
    """`{key: NormStats}` for `keys` from `<root>/meta/stats.json`; `dims` checks widths."""
    path = os.path.join(root, "meta", "stats.json")
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: missing file (normalization statistics are required)")
    stats = read_json(path)
    out = {}
    for key in keys:
        if key not in stats:
            raise DatasetError(f"{path}: no statistics for feature {key!r} (have {sorted(stats)})")
        st = stats[key]
        missing = [s for s in ("mean", "std", "q01", "q99") if s not in st]
        if missing:
            raise DatasetError(f"{path}: feature {key!r} lacks statistics {missing}")
        try:
            names = ("mean", "std", "q01", "q99") + tuple(s for s in ("min", "max") if s in st)
            arrs = {s: np.asarray(st[s], np.float32).reshape(-1) for s in names}
        except (TypeError, ValueError) as e:
            raise DatasetError(f"{path}: feature {key!r} has malformed statistics ({e})") from None
        ns = NormStats(**arrs)
        _check(ns, key, path, None if dims is None else dims.get(key))
        out[key] = ns
    return out


def _check(s: NormStats, key: str, path: str, dim: int | None) -> None:
    d = s.mean.shape[0]
    if any(a.shape != (d,) for a in (s.std, s.q01, s.q99)) or (dim is not None and d != dim):
        raise DatasetError(f"{path}: statistics of {key!r} have shapes "
                           f"{[a.shape for a in (s.mean, s.std, s.q01, s.q99)]}, expected [{dim or d}]")
    if not all(np.all(np.isfinite(a)) for a in (s.mean, s.std, s.q01, s.q99)):
        raise DatasetError(f"{path}: statistics of {key!r} contain NaN or inf")
    if np.any(s.std < 0) or np.any(s.q99 < s.q01):
        raise DatasetError(f"{path}: statistics of {key!r} are degenerate (negative std or q99 < q01)")
    if (s.min is None) != (s.max is None) or (s.min is not None and (
            s.min.shape != (d,) or s.max.shape != (d,) or not np.all(np.isfinite(s.min))
            or not np.all(np.isfinite(s.max)) or np.any(s.max < s.min))):
        raise DatasetError(f"{path}: min/max statistics of {key!r} are malformed (shape, NaN or max < min)")
    if np.all(s.std == 0) and np.all(s.q99 == s.q01):
        raise DatasetError(f"{path}: statistics of {key!r} are degenerate (every dimension is constant)")


def normalize(x: np.ndarray, s: NormStats, mode: Mode) -> np.ndarray:
    """[..., d] -> [..., d] float32 in the normalized space."""
    x = np.asarray(x, np.float32)
    if mode == "mean_std":
        return (x - s.mean) / (s.std + EPS)
    if mode == "quantile":
        return 2.0 * (x - s.q01) / (s.q99 - s.q01 + EPS) - 1.0
    if mode == "min_max":
        lo, hi = _min_max(s)
        return 2.0 * (x - lo) / (hi - lo + EPS) - 1.0
    raise ValueError(f"unknown normalization mode {mode!r}")


def unnormalize(y, s: NormStats, mode: Mode):
    """Inverse of `normalize` (works on numpy and jax arrays)."""
    if mode == "mean_std":
        return y * (s.std + EPS) + s.mean
    if mode == "quantile":
        return (y + 1.0) * 0.5 * (s.q99 - s.q01 + EPS) + s.q01
    if mode == "min_max":
        lo, hi = _min_max(s)
        return (y + 1.0) * 0.5 * (hi - lo + EPS) + lo
    raise ValueError(f"unknown normalization mode {mode!r}")


def _min_max(s: NormStats) -> tuple[np.ndarray, np.ndarray]:
    if s.min is None or s.max is None:
        raise ValueError("normalization mode 'min_max' needs min/max statistics (meta/stats.json 'min', 'max')")
    return s.min, s.max
