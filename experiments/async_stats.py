"""The statistics of the async-vs-sync protocol (issue 21): per evaluation point, each arm's mean
success over seeds with a 95% bootstrap interval, the paired difference async - sync (paired by
seed) with its 95% bootstrap interval, and the criterion fixed before any run:

    at every evaluation point from the midpoint of the run on (update >= iterations / 2), the
    95% interval of the paired difference (async - sync) contains 0 or lies above it,
    i.e. its upper end is >= 0.

Bootstrap: percentile interval of the mean over seeds, 10,000 resamples of the seeds with
replacement, from a fixed numpy generator (the same inputs give the same interval). With n
seeds whose differences are all negative, every resampled mean is negative and the criterion
fails; with differences of mixed sign the interval straddles 0 and it passes.
"""

from __future__ import annotations

import numpy as np

from vlajax.stats import percentile_bootstrap

BOOT_SEED = 2126  # the bootstrap generator's seed (issue 21, fixed)


def bootstrap_mean(values) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` [n] and its 95% percentile-bootstrap interval
    (`vlajax.stats.percentile_bootstrap`: its 10,000 resamples, this protocol's generator seed)."""
    return percentile_bootstrap(values, np.mean, seed=BOOT_SEED)


def paired(sync: dict[int, float], other: dict[int, float]) -> tuple[list[int], np.ndarray]:
    """(seeds present in both, other - sync per such seed) from {seed: success} maps."""
    seeds = sorted(set(sync) & set(other))
    return seeds, np.asarray([other[s] - sync[s] for s in seeds], np.float64)


def point_table(curves: dict[str, dict[int, list[dict]]], baseline: str = "sync") -> list[dict]:
    """Per evaluation point: every arm's mean and interval, and every non-baseline arm's paired
    difference to `baseline` with its interval.

    curves: {arm: {seed: [{'update', 'env_steps', 'success', 'wall_s', ...} per eval point]}};
    every run of every arm must have the same updates at its eval points."""
    updates = None
    for arm, runs in curves.items():
        for seed, curve in runs.items():
            u = [p["update"] for p in curve]
            if updates is None:
                updates = u
            elif u != updates:
                raise ValueError(f"{arm} seed {seed}: eval points at updates {u}, others at {updates}")
    rows = []
    for i, update in enumerate(updates or []):
        row = {"update": update, "arms": {}, "diff": {}}
        at = {arm: {s: c[i] for s, c in runs.items()} for arm, runs in curves.items()}
        for arm, pts in at.items():
            if not pts:
                continue
            mean, lo, hi = bootstrap_mean([p["success"] for p in pts.values()])
            row["arms"][arm] = {
                "n": len(pts), "mean": mean, "low": lo, "high": hi,
                "env_steps": float(np.mean([p["env_steps"] for p in pts.values()])),
                "env_steps_consumed": float(np.mean([p.get("env_steps_consumed", p["env_steps"])
                                                     for p in pts.values()])),
                "wall_s": float(np.mean([p["wall_s"] for p in pts.values()])) if all(
                    "wall_s" in p for p in pts.values()) else None}
        base = {s: p["success"] for s, p in at.get(baseline, {}).items()}
        for arm, pts in at.items():
            if arm == baseline:
                continue
            seeds, d = paired(base, {s: p["success"] for s, p in pts.items()})
            if seeds:
                mean, lo, hi = bootstrap_mean(d)
                row["diff"][arm] = {"pairs": len(seeds), "seeds": seeds, "values": d.tolist(), "mean": mean,
                                    "low": lo, "high": hi}
        rows.append(row)
    return rows


def criterion(rows: list[dict], arm: str, iterations: int, min_pairs: int) -> dict:
    """The verdict for `arm` against the baseline: 'PASS' when the paired difference's upper
    interval end is >= 0 at every eval point with update >= iterations / 2, 'FAIL' when it is < 0
    at one of them, 'NOT EVALUATED' while fewer than `min_pairs` seed pairs exist at any such point."""
    late = [r for r in rows if r["update"] >= iterations / 2]
    if not late:
        raise ValueError(f"no eval point at or after the midpoint (update {iterations / 2:g})")
    pairs = min((r["diff"].get(arm, {}).get("pairs", 0) for r in late), default=0)
    points = [{"update": r["update"], "low": r["diff"][arm]["low"], "high": r["diff"][arm]["high"],
               "ok": r["diff"][arm]["high"] >= 0.0} for r in late if arm in r["diff"]]
    if pairs < min_pairs:
        return {"arm": arm, "verdict": "NOT EVALUATED", "pairs": pairs, "min_pairs": min_pairs, "points": points,
                "reason": f"{pairs} seed pairs, the criterion needs >= {min_pairs}"}
    bad = [p["update"] for p in points if not p["ok"]]
    return {"arm": arm, "verdict": "FAIL" if bad else "PASS", "pairs": pairs, "min_pairs": min_pairs,
            "points": points, "reason": (f"interval below 0 at update(s) {bad}" if bad
                                         else "every interval from the midpoint on reaches 0 or above")}
