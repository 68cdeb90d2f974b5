"""What a simulated run of `research.planner.sim` reports, taken as `bench async` takes it.

    run_metrics(p, rollout_devices, update_ends, env_steps, idle, consumed_log, batches) -> dict

The window runs from the end of the first (warm-up) update -- of update K + 1 with `Pipeline.warmup`
= K -- to the end of the last: env steps
produced in it / its length, env steps trained on (what the production bench's rows report),
trainer idle (waiting for samples), rollouter idle (every slot lane's, averaged; waiting for
inference is not idle), staleness (trainer version minus the item's oldest), requests per
inference call.
"""

from __future__ import annotations

import numpy as np

__all__ = ["run_metrics"]


def _overlap(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Seconds of the (start, end) `spans` inside [t0, t1]."""
    return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans)


def run_metrics(p, rollout_devices: int, update_ends: list[float], env_steps: list[tuple[float, int]],
                idle: dict[str, list[tuple[float, float]]], consumed_log: list[tuple[float, int]],
                batches: list[int]) -> dict:
    """`p`: the run's `sim.Pipeline`; `update_ends`: each update's end time; `env_steps`: (time, env
    steps) as they are produced; `idle`: lane -> its idle spans; `consumed_log`: (time, staleness) per
    consumed item; `batches`: requests per inference call. -> the metrics dict (see the module docstring)."""
    update_ends = update_ends[p.warmup:]
    t0, t1 = update_ends[0], update_ends[-1]
    span = t1 - t0
    steps = sum(n for t, n in env_steps if t0 < t <= t1)

    def idle_ratio(prefix: str) -> float:
        lanes = [k for k in idle if k.startswith(prefix)] or [None]
        return float(np.mean([_overlap(idle.get(k, []), t0, t1) for k in lanes])) / span

    stale = [s for t, s in consumed_log if t0 < t <= t1]
    if p.mode != "sync":  # every slot lane counts (lanes that never idled add 0)
        lanes = [f"rollouter/d{d}s{s}" for d in range(rollout_devices) for s in range(p.num_slots)]
        roll = float(np.mean([_overlap(idle.get(k, []), t0, t1) for k in lanes])) / span
    else:
        roll = idle_ratio("rollouter")
    per_update = p.envs * p.horizon * p.steps_per_decision  # env steps each update trains on
    return {"env_steps_per_s": steps / span,
            # what bench async's production rows report: env steps trained on per second
            "trained_env_steps_per_s": (len(update_ends) - 1) * per_update / span,
            "trainer_idle_ratio": idle_ratio("trainer"),
            "rollouter_idle_ratio": roll, "staleness_mean": float(np.mean(stale)) if stale else 0.0,
            "staleness_max": float(max(stale)) if stale else 0.0,
            # requests per call in the slot modes; the envs of one call otherwise (as the bench reports)
            "inference_batch_mean": float(np.mean(batches)) if p.slot_modes and batches
            else float(p.envs // rollout_devices),
            "seconds_per_update": span / max(len(update_ends) - 1, 1)}
