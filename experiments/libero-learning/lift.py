"""RL's lift over its SFT start on LIBERO's held-out initial states: the pre-registered verdict from eval JSON.

    python experiments/libero-learning/lift.py --sft results/libero-learning/sft_eval.json \
        --rl results/libero-learning/rl_seed0_eval.json results/libero-learning/rl_seed1_eval.json \
             results/libero-learning/rl_seed2_eval.json --json results/libero-learning/lift.json

Inputs are `eval --suite libero_* --checkpoint` outputs (`eval.json`: `episodes[i]` with `task`, `init`,
`success`): one of the SFT checkpoint the RL runs started from, one per RL seed (its final checkpoint), all on
the same episodes (task, init). The criterion (experiments/libero-learning/README.md, fixed before the runs):

    d[s, (task, init)] = success of RL seed s - success of SFT, on the same (task, init)   (in {-1, 0, 1})
    lift = mean of d over seeds and pairs (percentage points x 100)
    95% interval: percentile bootstrap over (task, init) pairs (a resampled pair carries all its seeds' d),
                  10,000 resamples, numpy default_rng(0)
    verdict: LIFT if the interval's low > 0; HARM if its high < 0; NO DETECTABLE LIFT otherwise;
             with fewer than `--min-seeds` (3) seeds: NOT MEASURED AT 3 SEEDS (the figures still reported)

Writes the verdict JSON (`--json`; also printed): the statistic, its interval, per-seed lifts, the sizes.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tyro


@dataclasses.dataclass(frozen=True)
class Args:
    """Recompute the pre-registered RL-lift verdict from per-seed LIBERO eval JSON."""

    sft: str  # eval.json of the SFT checkpoint (RL's start)
    rl: tuple[str, ...]  # eval.json of each RL seed's final checkpoint (one per seed)
    json: str = ""  # where to write the verdict JSON ('' = print only)
    min_seeds: int = 3  # seeds the criterion needs
    resamples: int = 10_000  # bootstrap resamples over (task, init) pairs
    seed: int = 0  # the bootstrap's numpy seed


def outcomes(path: str) -> dict[tuple[int, int], int]:
    """eval.json -> {(task, init): 0 | 1}; an episode with an error is refused (not a result)."""
    with open(path) as f:
        ev = json.load(f)
    out: dict[tuple[int, int], int] = {}
    for e in ev["episodes"]:
        if "error" in e:
            raise SystemExit(f"error: {path}: episode {e.get('id')} has an error ({e['error']}); not a result")
        out[(int(e["task"]), int(e["init"]))] = int(bool(e["success"]))
    return out


def verdict(sft: dict[tuple[int, int], int], seeds: list[dict[tuple[int, int], int]], *, min_seeds: int = 3,
            resamples: int = 10_000, seed: int = 0) -> dict:
    """The criterion on outcome maps (the module docstring). d: [S, P] over the pairs common to all."""
    pairs = sorted(set(sft).intersection(*[set(s) for s in seeds])) if seeds else []
    if not pairs:
        raise SystemExit("error: no (task, init) pair is in the SFT eval and every RL eval")
    d = np.array([[s[p] - sft[p] for p in pairs] for s in seeds], np.float64)  # [S, P]
    per_pair = d.mean(axis=0)  # [P]: each pair's mean over seeds
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    boot = per_pair[idx].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    lift = float(d.mean())
    if len(seeds) < min_seeds:
        v = f"NOT MEASURED AT {min_seeds} SEEDS"
    elif lo > 0:
        v = "LIFT"
    elif hi < 0:
        v = "HARM"
    else:
        v = "NO DETECTABLE LIFT"
    sft_rate = float(np.mean([sft[p] for p in pairs]))
    return {"verdict": v, "lift_pp": round(100 * lift, 2), "ci95_pp": [round(100 * float(lo), 2),
                                                                      round(100 * float(hi), 2)],
            "seeds": len(seeds), "pairs": len(pairs), "tasks": sorted({t for t, _ in pairs}),
            "inits": sorted({i for _, i in pairs}), "sft_success": round(sft_rate, 4),
            "rl_success_per_seed": [round(float(np.mean([s[p] for p in pairs])), 4) for s in seeds],
            "lift_pp_per_seed": [round(100 * float(x), 2) for x in d.mean(axis=1)],
            "pairs_up_down_per_seed": [[int((r > 0).sum()), int((r < 0).sum())] for r in d],
            "statistic": "mean over seeds and (task, init) pairs of RL success - SFT success; 95% percentile "
                         f"bootstrap over pairs ({resamples} resamples, default_rng({seed}))",
            "min_seeds": min_seeds}


def main(args: Args) -> dict:
    out = verdict(outcomes(args.sft), [outcomes(p) for p in args.rl], min_seeds=args.min_seeds,
                  resamples=args.resamples, seed=args.seed)
    out["inputs"] = {"sft": args.sft, "rl": list(args.rl)}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
