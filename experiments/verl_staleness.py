"""verl's staleness ablation: staleness_threshold 0, 0.1, 0.3, 0.5 in the fully async mode.

    .venv/bin/python experiments/verl_staleness.py [--debug] [--json runs/experiments/verl_staleness.json]

Cells: `train_async+rollout_async` (colocated, CPU-bound regime) with each threshold: how far
rollout may run ahead of the trainer (a fraction of one sync window). verl reports throughput
rising with the threshold and the staleness of consumed samples staying within it; rows give
env steps/s, both idle ratios and the measured staleness mean / max. Writes JSON + markdown.
"""

import dataclasses
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from experiments.async_common import Sweep, run_sweep  # noqa: E402
from vlajax.shared import cli  # noqa: E402

THRESHOLDS = (0.0, 0.1, 0.3, 0.5)


def get_config(debug: bool = False) -> Sweep:
    cells = tuple((f"staleness {t:g}", "cpu_longtail", "colocated", "train_async+rollout_async", "1:1",
                   (("staleness_threshold", t),)) for t in THRESHOLDS)
    sweep = Sweep(cells=cells)
    return dataclasses.replace(sweep, envs=8, horizon=4, width=32, slots=2, updates=2, repeats=1) if debug else sweep


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False
    json: str = "runs/experiments/verl_staleness.json"


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    run_sweep(get_config(a.debug), a.json)
