"""Mean success per axis and level (4 goal tasks x 10 episodes) of several `eval --robustness` results side by side.

    python results/robustness/quickstart-s18b/summarize.py NAME=PATH/robustness.json ...

Prints a markdown table (one column per result, plus the mean of the columns named `rl-s*`) and, per axis, the
mean drop over its levels from each result's own unperturbed row.
"""

import json
import sys


def main(argv: list[str]) -> int:
    results = {}
    for arg in argv:
        name, _, path = arg.partition("=")
        if not path:
            print(f"error: {arg!r} is not NAME=PATH", file=sys.stderr)
            return 2
        with open(path) as f:
            results[name] = json.load(f)
    names = list(results)
    rl = [n for n in names if n.startswith("rl-s")]
    rows = [(a, lv) for a, levels in next(iter(results.values()))["mean"].items() for lv in levels]
    head = names + ([f"mean of {len(rl)} RL seeds"] if len(rl) > 1 else [])
    print("| axis | level | " + " | ".join(head) + " |")
    print("|---|---:|" + "---:|" * len(head))
    for a, lv in rows:
        vals = [results[n]["mean"][a][lv] for n in names]
        extra = [sum(results[n]["mean"][a][lv] for n in rl) / len(rl)] if len(rl) > 1 else []
        print(f"| {a} | {lv} | " + " | ".join(f"{100 * v:.1f}%" for v in vals + extra) + " |")
    print()
    print("Mean drop over an axis' levels (points, from each policy's own unperturbed row):")
    print()
    print("| axis | " + " | ".join(head) + " |")
    print("|---|" + "---:|" * len(head))
    for a in next(iter(results.values()))["summary"]:
        vals = [results[n]["summary"][a]["mean_drop"] for n in names]
        extra = [sum(results[n]["summary"][a]["mean_drop"] for n in rl) / len(rl)] if len(rl) > 1 else []
        print(f"| {a} | " + " | ".join(f"{100 * v:+.1f}" for v in vals + extra) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
