"""Summary of c_concurrency_rounds.sh (descriptive, no criterion): the C slot steps' concurrency (median serial wall /
median threaded wall, as `plan profile` computes it) per profile from all 28 rounds, without the first, and from
each block of 7 rounds (what a default profile measures). From the repository root:

    .venv/bin/python results/bench/plan_44/c_concurrency_rounds.py   # -> c_concurrency_rounds/summary.json
"""

import json
import pathlib

import numpy as np

OUT = pathlib.Path("results/bench/plan_44/c_concurrency_rounds")


def conc(serial, threads) -> float:
    return float(np.median(serial) / np.median(threads))


def main() -> None:
    summary, all_s, all_t = {}, [], []
    for run in sorted(p for p in OUT.iterdir() if (p / "profile.json").is_file()):
        raw = json.loads((run / "profile.json").read_text())["raw"]
        s, t = np.array(raw["c/steps_serial"]), np.array(raw["c/steps_threads"])
        all_s.append(s)
        all_t.append(t)
        ratios = s / t
        summary[run.name] = {
            "rounds": len(s), "all": conc(s, t), "without_first": conc(s[1:], t[1:]),
            "blocks_of_7": [conc(s[i:i + 7], t[i:i + 7]) for i in range(0, len(s) - 6, 7)],
            "first_round_ratio": float(ratios[0]), "first_round_is_lowest": bool(ratios[0] == ratios.min()),
            "ratio_range": [float(ratios.min()), float(ratios.max())],
            "threads_first_ms": float(t[0] * 1e3), "threads_median_ms": float(np.median(t) * 1e3),
        }
        r = summary[run.name]
        print(f"{run.name}: 28 rounds {r['all']:.2f}, without the first {r['without_first']:.2f}, blocks of 7 "
              f"{[round(x, 2) for x in r['blocks_of_7']]}, first round {r['first_round_ratio']:.2f} "
              f"(lowest: {r['first_round_is_lowest']}), rounds {r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}")
    pooled_s, pooled_t = np.concatenate(all_s), np.concatenate(all_t)
    summary["pooled"] = conc(pooled_s, pooled_t)
    print(f"pooled ({len(pooled_s)} rounds): {summary['pooled']:.2f}")
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
