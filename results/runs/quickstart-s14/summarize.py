"""Per-seed figures: before / after per task, lift, and the per-update metrics
(training success, entropy, approx KL, clip fraction) from async_metrics.jsonl.

    .venv/bin/python results/runs/quickstart-s14/summarize.py [dev13 seed16 seed17 seed18]
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _json(path):
    with open(path) as f:
        return json.load(f)


def _jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def quarter_means(xs):
    q = max(len(xs) // 4, 1)
    return sum(xs[:q]) / q, sum(xs[-q:]) / q


def main(names):
    lifts = []
    for name in names:
        d = os.path.join(HERE, name)
        before = _json(os.path.join(d, "eval-before-rl.json"))
        if os.path.exists(os.path.join(d, "eval-after-rl.json")):
            after = _json(os.path.join(d, "eval-after-rl.json"))
            tasks = " | ".join(f"{t.split('/')[-1]} {before['per_task'][t] * 100:.0f}% -> "
                               f"{after['per_task'][t] * 100:.0f}%" for t in before["per_task"])
            lift = (after["mean_success"] - before["mean_success"]) * 100
            lifts.append(lift)
            print(f"{name}: {tasks} | mean {before['mean_success'] * 100:.1f}% -> {after['mean_success'] * 100:.1f}% "
                  f"(lift {lift:+.1f})")
        else:
            tasks = " | ".join(f"{t.split('/')[-1]} {v * 100:.0f}%" for t, v in before["per_task"].items())
            print(f"{name}: before RL {tasks} | mean {before['mean_success'] * 100:.1f}%; NO after-RL evaluation")
        if not os.path.exists(os.path.join(d, "async_metrics.jsonl")):
            continue
        rows = _jsonl(os.path.join(d, "async_metrics.jsonl"))
        tr = [r["train"] for r in rows if "train" in r]
        for key in ("success", "entropy", "approx_kl", "clip_frac", "advantage_mean", "kl_ref"):
            xs = [t[key] for t in tr if key in t]  # kl_ref: only with rl.kl_coef > 0
            if not xs:
                continue
            a, b = quarter_means(xs)
            print(f"  {key:15s} first vs last quarter {a:.3f} -> {b:.3f};  per update: "
                  + " ".join(f"{x:.2f}" for x in xs))
        if not tr:
            continue
        n5 = min(5, len(tr))
        first5, last5 = sum(t["entropy"] for t in tr[:n5]) / n5, sum(t["entropy"] for t in tr[-n5:]) / n5
        print(f"  entropy mean of the first {n5} updates {first5:.2f}, of the last {n5} {last5:.2f}; "
              f"updates {len(tr)}, "
              f"nonfinite {sum(t['nonfinite'] for t in tr):.0f}")
    if lifts:
        print(f"mean lift over {len(lifts)}: {sum(lifts) / len(lifts):+.1f}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["dev13", "seed16", "seed17", "seed18"])
