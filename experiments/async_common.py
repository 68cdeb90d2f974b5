"""Shared driver of the async-pipeline experiments: run (regime, placement, mode, overrides) cells
of `research.bench.async_` on the RL workload, repeat them, keep the median, write JSON + markdown."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
from typing import Any

import jax

from experiments.outputs import write_results


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The fixed workload of an experiment and its cells: (label, regime, placement, mode, ratio, overrides)."""

    cells: tuple[tuple[str, str, str, str, str, tuple[tuple[str, Any], ...]], ...]
    preset: str = "rl-debug"
    envs: int = 16
    horizon: int = 8
    width: int = 256
    slots: int = 4
    updates: int = 4
    repeats: int = 3
    median_ms: float = 10.0
    tail_prob: float = 0.02
    tail_scale: float = 6.0


def run_sweep(sweep: Sweep, json_path: str) -> list[dict]:
    """Every cell `repeats` times (repeats outermost); a row is the median run by env steps/s."""
    with contextlib.suppress(RuntimeError):
        jax.config.update("jax_num_cpu_devices", 8)
    from research.bench.async_ import rl_workload, run_one
    from vlajax.pipeline.latency import LatencyModel

    w, spec = rl_workload(sweep.preset, envs=sweep.envs, horizon=sweep.horizon, width=sweep.width)
    latency = LatencyModel(median_s=sweep.median_ms / 1e3, tail_prob=sweep.tail_prob, tail_scale=sweep.tail_scale)
    runs: dict[str, list[dict]] = {}
    for _ in range(sweep.repeats):
        for label, regime, placement, mode, ratio, overrides in sweep.cells:
            r = run_one(w, regime, placement, mode, slots=sweep.slots, updates=sweep.updates, latency=latency,
                        ratio=ratio, **dict(overrides))
            runs.setdefault(label, []).append(r | {"label": label})
            print(json.dumps(runs[label][-1]), flush=True)
    rows = []
    for reps in runs.values():
        reps = sorted(reps, key=lambda r: r["env_steps_per_s"])
        row = dict(reps[len(reps) // 2])
        row["env_steps_per_s_all"] = [r["env_steps_per_s"] for r in reps]
        row["loadavg_1m_median"] = statistics.median(r["loadavg_1m"] for r in reps)
        rows.append(row)
    base = rows[0]["env_steps_per_s"]
    for row in rows:
        row["ratio_to_first"] = row["env_steps_per_s"] / base
    write_results({"workload": spec, "sweep": dataclasses.asdict(sweep), "rows": rows}, markdown(rows), json_path)
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| cell | regime | placement | mode | staleness thr. | env steps/s | x first | trainer idle "
            "| rollouter idle | staleness mean / max | load |\n|" + "---|" * 11 + "\n")
    return head + "".join(
        f"| {r['label']} | {r['regime']} | {r['placement']} | {r['mode']} | {r['staleness_threshold']:g} "
        f"| {r['env_steps_per_s']:.0f} | {r['ratio_to_first']:.2f} | {r['trainer_idle_ratio']:.2f} "
        f"| {r['rollouter_idle_ratio']:.2f} | {r['staleness_mean']:.2f} / {r['staleness_max']:.0f} "
        f"| {r['loadavg_1m_median']:.1f} |\n" for r in rows)
