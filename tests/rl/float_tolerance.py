"""How far a recomputed log-probability may sit from the recorded one: an ulp-scaled bound.

The rollout records `old_logp` in its own compiled program (the sampling pass); the learner
recomputes it in another (inside `grad`, scans over micro-batches, other batch shapes). The
two programs evaluate the same formula, but XLA fuses, vectorises and reassociates each one
independently, and which fusion it picks depends on the shapes, the surrounding program and
the compiler (a cold compile cache on a fresh clone ended 1 ulp apart on 1 of 64 MLP rows;
9 ulps (6.6e-6 at |logp| 6.1) on the flow_sde_last VLA head). Bit equality is therefore not promised; what is
promised is agreement to float32 rounding, stated here as a number of float32 ulps at the
magnitude of the quantity:

- A sum of n float32 terms evaluated in two different orders differs by at most
  (n - 1) * eps * sum|t_i| (each order is within (n - 1) * u * sum|t_i| of the exact sum,
  u = eps / 2); each term's own few roundings add a few eps * |t_i| more. `gaussian_rows`
  computes that bound row by row for a diagonal Gaussian over n entries.
- A head whose recomputation re-runs network forwards (the VLA flow heads re-run the
  transformer's denoising steps) also sees the forwards' O(ulp) differences amplified by
  d logN / d mean = z / std; `ULPS_NETWORK` ulps at max(1, |logp|) covers that (measured
  <= 9; a wrong mask, temperature or std would be off by > 1e-2, i.e. > 1e4 ulps).
"""

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7: one ulp at magnitude 1
ULPS_NETWORK = 64  # ulps at max(1, max|logp|) for log-probs recomputed through network forwards
TERM_ROUNDINGS = 4  # roundings inside one Gaussian term: subtract, divide, square, add


def network_logp_tol(old_logp) -> float:
    """Bound on |recomputed - recorded| log-prob for heads that re-run network forwards."""
    return ULPS_NETWORK * EPS32 * max(1.0, float(np.abs(np.asarray(old_logp)).max()))


def gaussian_rows(actions, mean, log_std) -> np.ndarray:
    """Per-row bound [N] for a diagonal-Gaussian log-prob summed over all n entries of a row.

    actions / mean [N, ...entries] (e.g. [N, H, A]), log_std broadcastable to them.
    Returns (n - 1 + TERM_ROUNDINGS) * eps * sum_i |t_i| [N], the terms t_i evaluated in float64.
    """
    a, mu = np.asarray(actions, np.float64), np.asarray(mean, np.float64)
    ls = np.broadcast_to(np.asarray(log_std, np.float64), a.shape)
    z = (a - mu) / np.exp(ls)
    terms = np.abs(-0.5 * z * z - ls - 0.5 * np.log(2 * np.pi)).reshape(a.shape[0], -1)
    return (terms.shape[1] - 1 + TERM_ROUNDINGS) * EPS32 * terms.sum(1)
