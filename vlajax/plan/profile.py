"""`python -m vlajax.plan profile --out RUN_DIR`: measure the component costs of the bench's RL workload.

Builds the RL workload of the bench-only slot path (`vlajax.bench.async_.rl_workload`, what
`bench async --workload rl` ran before `bench async` drove the production loops; flags: preset,
envs, slots, horizon, width, epochs, minibatches) and times,
on this machine, each piece the pipeline calls, alone (nothing overlapping):

- `infer(params, payloads)` of the slots (one call per decision, padded to the slot count),
  for 1 slot (sync / train_async) and `--slots` slots;
- one slot's `step` (the env chunk, behaviour scoring, the next value) for `envs / n` envs,
  with each `--physics` (`jax` = MJX, `c` = C MuJoCo), without any latency model;
- the trainer's update over one sync window (prepared micro-batches, `epochs x minibatches`),
  and one micro-batch's preparation alone;
- a weight publication (`device_put` of the params onto another device, completed).

Each is the median of `--repeats` calls after a compiling one. Writes `RUN_DIR/profile.json`:
`{"workload": ..., "costs": {"jax": Costs, "c": Costs}, "raw": per-call seconds}` -- the
`Costs` the planner reads with `--profile-from RUN_DIR` (`shared_compute`: a CPU host).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import time
from typing import Literal

import jax
import numpy as np

from vlajax import cli
from vlajax.plan.costs import Costs

__all__ = ["main", "load", "profile", "costs_from_raw", "STATISTICS"]


def _timed(fn, log: list):
    def wrapped(*args):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        log.append(time.perf_counter() - t0)
        return out
    return wrapped


STATISTICS = ("median", "min")


def _stat(xs: list[float], skip: int, statistic: str = "median") -> float:
    xs = xs[skip:] if len(xs) > skip else xs
    return float(np.median(xs) if statistic == "median" else np.min(xs))


def costs_from_raw(raw: dict[str, list[float]], envs: int, horizon: int, slots: int,
                   statistic: str = "median") -> dict[str, Costs]:
    """Per physics, the `Costs` of the per-call seconds in `raw` (the first, compiling call's entries
    skipped). `statistic`: 'median' of the calls, or 'min' (the least disturbed call: on a loaded
    machine other jobs only ever add time, so the minimum is the closer estimate of a quiet one)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    out = {}
    prep_item = _stat(raw["train/prepare_item"], 1, statistic)
    update = _stat(raw["train/update_window"], 1, statistic)
    for physics in sorted({k.split("/")[0] for k in raw} - {"train", "sync"}):
        infer, env = [], []
        for n in sorted({1, slots}):
            infer.append(_stat(raw[f"{physics}/infer_slots{n}"], horizon, statistic))
            env.append((envs // n, _stat(raw[f"{physics}/step_envs{envs // n}"], horizon * n, statistic)))
        out[physics] = Costs(
            infer_s=((envs, float(np.mean(infer))),),  # padded to all envs either way
            train_update_s=((envs * horizon, max(update - slots * prep_item, 0.0)),),
            prep_s_per_sample=prep_item / (envs // slots * horizon), env_compute_s=tuple(sorted(env)),
            env_on_device=True, sync_s=_stat(raw["sync/device_put"], 1, statistic), shared_compute=True,
            infer_padded=True, source=f"python -m vlajax.plan profile ({physics} physics, {statistic} of the calls)")
    return out


def profile(args) -> dict:
    from vlajax.bench.async_ import rl_workload
    from vlajax.config import AsyncConfig
    from vlajax.pipeline.slots import SlotRollout

    w, spec = rl_workload(args.preset, envs=args.envs, horizon=args.horizon, width=args.width,
                          update_epochs=args.update_epochs, minibatches=args.minibatches)
    dev = jax.devices()
    state = jax.device_put(w.init_state(0), dev[0])
    params = w.get_params(state)
    raw: dict[str, list[float]] = {}
    items_by_n: dict[int, list] = {}
    for physics in args.physics:
        for n in sorted({1, args.slots}):
            reset, step, infer = w.env(n, None, physics_impl=physics)
            inf_log, step_log = [], []
            cfg = AsyncConfig(num_slots=n, require_batches=n, max_batch=n)
            ro = SlotRollout(cfg, reset=reset, step=_timed(step, step_log), infer=_timed(infer, inf_log),
                             horizon=w.horizon, samples_per_slot=w.envs // n,
                             env_steps_per_decision=w.envs // n * w.steps_per_decision)
            for call in range(1 + args.repeats):  # one segment of every slot per call; the first compiles
                items = ro.sample_step(0, params, call)
            items_by_n.setdefault(n, items)
            raw[f"{physics}/infer_slots{n}"] = inf_log
            raw[f"{physics}/step_envs{w.envs // n}"] = step_log

    # the trainer: one update over a window of prepared micro-batches; preparation alone
    n = args.slots
    trainer = w.trainer(dev[0], False, n)
    upd_log, prep_log = [], []
    for _ in range(1 + args.repeats):
        t0 = time.perf_counter()
        state, _ = trainer(state, iter(items_by_n[n]))
        jax.block_until_ready(state.params)
        upd_log.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        jax.block_until_ready(w._prepare(jax.device_put(items_by_n[n][0].data, dev[0])))
        prep_log.append(time.perf_counter() - t0)
    raw["train/update_window"], raw["train/prepare_item"] = upd_log, prep_log

    # a weight publication onto another device (the control plane's device_put, completed)
    target = dev[1] if len(dev) > 1 else dev[0]
    sync_log = []
    for _ in range(1 + args.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(jax.device_put(w.get_params(state), target))
        sync_log.append(time.perf_counter() - t0)
    raw["sync/device_put"] = sync_log

    out = {k: c.to_json() for k, c in costs_from_raw(raw, w.envs, w.horizon, args.slots).items()}
    return {"workload": spec, "slots": args.slots, "costs": out, "raw": raw,
            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cpu_count": os.cpu_count(), "devices": jax.device_count(),
                        "loadavg_1m": os.getloadavg()[0]}}


def load(run_dir: str | os.PathLike, physics: str, statistic: str = "median") -> Costs:
    """The `Costs` of `physics` ('jax' | 'c') from `RUN_DIR/profile.json` (recomputed from its
    per-call seconds with `statistic`, see `costs_from_raw`)."""
    path = pathlib.Path(run_dir) / "profile.json"
    d = json.loads(path.read_text())
    wl = d["workload"]
    costs = costs_from_raw(d["raw"], wl["envs"], wl["horizon"], d.get("slots", 4), statistic)
    if physics not in costs:
        raise ValueError(f"{path} has no costs for physics {physics!r} (has {sorted(costs)})")
    return costs[physics]


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment); workload flags as `async_.rl_workload`."""

    out: str  # run directory; writes profile.json there
    preset: str = "rl-debug"  # the TrainConfig preset the RL workload starts from
    envs: int = 16  # total envs
    slots: int = 4  # env slots of the slot modes
    horizon: int = 8  # decisions per segment
    width: int = 1024  # MLP width (actor and critic)
    update_epochs: int = 10  # PPO epochs per update
    minibatches: int = 4  # PPO minibatches per epoch
    physics: tuple[Literal["jax", "c"], ...] = ("jax", "c")  # simulators to time
    repeats: int = 5  # timed calls after the compiling one
    cpu_devices: int = 8  # virtual CPU devices (as the bench)


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m vlajax.plan profile", description=__doc__.splitlines()[0])
    if a.slots < 1 or a.envs % a.slots or a.repeats < 1 or not a.physics:
        cli.error("--envs must split into --slots, --repeats must be >= 1 and --physics non-empty")
    with contextlib.suppress(RuntimeError):
        jax.config.update("jax_num_cpu_devices", a.cpu_devices)
    result = profile(a)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps(result, indent=1) + "\n")
    for physics, c in result["costs"].items():
        print(f"{physics}: " + json.dumps({k: v for k, v in c.items() if k != "source"}))
    print(f"wrote {out / 'profile.json'}")
    return 0

