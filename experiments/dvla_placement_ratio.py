"""D-VLA's placement sweep: colocated vs disaggregated rollout:train device ratios 1:1 and 3:1.

    .venv/bin/python experiments/dvla_placement_ratio.py [--debug] [--json runs/experiments/dvla_ratio.json]

Cells: the fully async mode (`+streaming`) under colocated, disaggregated 1:1 and 3:1, in both
simulator regimes (sync colocated first, as the reference). On one 2-core CPU the "devices" are
virtual: a ratio moves where jitted work is placed, not how many cores it gets, so read the
idle ratios rather than expecting D-VLA's GPU scaling. Writes JSON and a markdown table.
"""

import dataclasses
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from experiments.async_common import Sweep, run_sweep  # noqa: E402
from vlajax.shared import cli  # noqa: E402


def get_config(debug: bool = False) -> Sweep:
    regimes = ("cpu_longtail",) if debug else ("cpu_longtail", "mjx")
    cells = []
    for r in regimes:
        cells.append((f"{r}/sync colocated", r, "colocated", "sync", "1:1", ()))
        cells.append((f"{r}/colocated", r, "colocated", "+streaming", "1:1", ()))
        for ratio in ("1:1", "3:1"):
            cells.append((f"{r}/disaggregated {ratio}", r, "disaggregated", "+streaming", ratio, ()))
    sweep = Sweep(cells=tuple(cells))
    return dataclasses.replace(sweep, envs=8, horizon=4, width=32, slots=2, updates=2, repeats=1) if debug else sweep


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False
    json: str = "runs/experiments/dvla_placement_ratio.json"


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    run_sweep(get_config(a.debug), a.json)
