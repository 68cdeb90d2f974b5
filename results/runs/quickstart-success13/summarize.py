"""Per-seed summary of the binary-reward quickstart runs, from the files kept beside this script.

    .venv/bin/python results/runs/quickstart-success13/summarize.py [SEED ...]

For each seed folder: the greedy evaluation before / after RL (report's 80 episodes), per-update
metrics from async_metrics.jsonl (groups dropped of 8, training success of the 32 sampled episodes,
approx KL, entropy), and the dev rule's checks (a) of run.sh.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _json(path: str):
    with open(path) as f:
        return json.load(f)


def _lines(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f]


def main(seeds: list[str]) -> None:
    for k in seeds:
        d = os.path.join(HERE, f"seed{k}")
        before = _json(os.path.join(d, "eval-before-rl.json"))
        after = _json(os.path.join(d, "eval-after-rl.json"))
        rows = _lines(os.path.join(d, "async_metrics.jsonl"))
        train = [r["train"] | {"update": r["update"]} for r in rows if "train" in r]
        print(f"seed {k}")
        for t in before["per_task"]:
            print(f"  {t:22s} {before['per_task'][t] * 100:5.1f}% -> {after['per_task'][t] * 100:5.1f}%")
        lift = (after["mean_success"] - before["mean_success"]) * 100
        print(f"  mean {before['mean_success'] * 100:.1f}% -> {after['mean_success'] * 100:.1f}%  "
              f"lift {lift:+.2f} points")
        dropped = [t["groups_dropped"] for t in train]
        print(f"  updates {len(train)}; groups_dropped per update {[int(x) for x in dropped]}")
        all_dropped = sum(x == t["groups"] for x, t in zip(dropped, train))
        print(f"  (a) updates with groups_dropped > 0: {sum(x > 0 for x in dropped)}; "
              f"updates dropping all {int(train[0]['groups'])} groups: {all_dropped}")
        print(f"  training success per update {[round(t['success'], 2) for t in train]}")
        q = max(1, len(train) // 4)
        mean = lambda xs: sum(xs) / len(xs)
        kl = max(t["approx_kl"] for t in train)
        print(f"  entropy first/last quarter {mean([t['entropy'] for t in train[:q]]):.2f} -> "
              f"{mean([t['entropy'] for t in train[-q:]]):.2f}; approx_kl max {kl:.3f}, "
              f"valid_frac mean {mean([t['valid_frac'] for t in train]):.2f}; "
              f"nonfinite {sum(t.get('nonfinite', 0) for t in train):.0f}")


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(d[4:] for d in os.listdir(HERE) if d.startswith("seed")))
