"""RL-VLA3's asynchrony ablation on the RL workload: each level of asynchrony added in turn.

    .venv/bin/python experiments/rlvla3_async_ablation.py [--debug] [--json runs/experiments/rlvla3.json]

Cells (colocated, both simulator regimes): sync -> rollout_async (env slots + dynamic batching)
-> train_async+rollout_async (staleness 1) -> +streaming. RL-VLA3 reports +59% (rollout async),
then up to +85% with training async and streaming on LIBERO; here the CPU-bound regime is the
latency model around the real MJX step. Writes JSON and a markdown table (`.md` beside it).
"""

import dataclasses
import sys

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from experiments.async_common import Sweep, run_sweep  # noqa: E402
from vlajax.shared import cli  # noqa: E402

MODES = ("sync", "rollout_async", "train_async+rollout_async", "+streaming")


def get_config(debug: bool = False) -> Sweep:
    regimes = ("cpu_longtail",) if debug else ("cpu_longtail", "mjx")
    cells = tuple((f"{r}/{m}", r, "colocated", m, "1:1", ()) for r in regimes for m in MODES)
    sweep = Sweep(cells=cells)
    return dataclasses.replace(sweep, envs=8, horizon=4, width=32, slots=2, updates=2, repeats=1) if debug else sweep


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False
    json: str = "runs/experiments/rlvla3_async_ablation.json"


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    run_sweep(get_config(a.debug), a.json)
