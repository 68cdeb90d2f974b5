"""Issue 45's sample-size estimate, from the per-seed JSONs of issue 21's protocol (before any issue-45 run).

    .venv/bin/python results/async/preregistration_45_power.py > results/async/preregistration_45_power.txt

Per workload and async arm: the paired differences async - sync at the evaluation points from the midpoint
on, their sd per point, the pooled sd and the correlation of a pair's two late differences over the GRPO
pairs (the planning values), then the simulated power of the pre-registered rule
(`experiments.async_stats.tost_power`: 90% intervals inside +-0.10 at both late points) against the number
of pairs, and the expected width of one 90% t interval.
"""

import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from experiments import async_stats  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
LATE = {"grpo-tokens": (10, 15), "grpo-tokens-factor": (10, 15), "ppo-flow": (10, 15, 20)}


def main() -> None:
    from scipy import stats

    resid = []
    for w, late in LATE.items():
        runs = {}
        for f in sorted(glob.glob(os.path.join(ROOT, w, "*-seed*.json"))):
            with open(f) as fh:
                r = json.load(fh)
            runs.setdefault(r["arm"], {})[r["seed"]] = {c["update"]: c["success"] for c in r["curve"]}
        sync = runs["sync"]
        lift = [sync[s][max(late)] - sync[s][0] for s in sorted(sync)]
        print(f"{w}: sync lift at update {max(late)} per seed {np.round(lift, 3).tolist()}, mean {np.mean(lift):+.3f}")
        for arm in (a for a in runs if a != "sync"):
            seeds = sorted(set(runs[arm]) & set(sync))
            d = np.array([[runs[arm][s][u] - sync[s][u] for u in late] for s in seeds])  # [pairs, late points]
            print(f"  {arm}: {len(seeds)} pairs; per late update {late}: mean {np.round(d.mean(0), 3).tolist()}, "
                  f"sd {np.round(d.std(0, ddof=1), 3).tolist()}")
            if w.startswith("grpo"):
                resid.append(d - d.mean(0))
    dof = sum(x.size - x.shape[1] for x in resid)
    sigma = float(np.sqrt(sum((x**2).sum() for x in resid) / dof))
    upper = sigma * np.sqrt(dof / stats.chi2.ppf(0.2, dof))
    r = np.concatenate([x * np.sqrt(x.shape[0] / (x.shape[0] - 1)) for x in resid])
    rho = float(np.corrcoef(r.T)[0, 1])
    print(f"\npooled sd of the GRPO paired differences (late points, centred per arm and point): {sigma:.3f} "
          f"({dof} degrees of freedom; 80% upper bound {upper:.3f}); correlation of the two late points {rho:.2f}")
    print("\nP(EQUIVALENT) by the pre-registered rule, 2 late points, 1000 simulated experiments each:")
    print(f"| pairs | width of one 90% t interval at sd {sigma:.3f} | sd {sigma:.3f}, true diff 0 | sd {sigma:.3f}, "
          f"true diff -0.05 | sd {upper:.3f}, true diff 0 | sd {sigma:.3f}, true diff -0.10 (size) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (5, 6, 8, 10, 12, 14, 15, 16, 20):
        width = 2 * stats.t.ppf(0.95, n - 1) * sigma / np.sqrt(n)
        p = [async_stats.tost_power(s, n, shift=sh, rho=rho) for s, sh in
             ((sigma, 0.0), (sigma, -0.05), (upper, 0.0), (sigma, -0.1))]
        print(f"| {n} | {width:.3f} | " + " | ".join(f"{x:.2f}" for x in p) + " |")
    for s in (0.03, 0.05, 0.08, sigma, upper):
        n, p = async_stats.pairs_needed(s)
        print(f"the rule's number of pairs at a pilot sd of {s:.3f}: {n} (power {p:.2f})")


if __name__ == "__main__":
    main()
