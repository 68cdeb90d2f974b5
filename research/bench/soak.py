"""`python -m research.bench soak --minutes N --json PATH`: does a long async run keep its memory flat?

Runs the asynchronous pipeline (env slots + dynamic batching + trainer lane + weight control
plane, staleness 1, streaming, partial rollout: the `+partial_rollout` mode of `bench async`)
on a tiny workload for `--minutes`, with a `WindowReporter` summarizing every `--report-every`
updates as a real run does. Every `--sample-s` seconds (default 60) it records the process's
resident memory (VmRSS from /proc/self/status), the updates done, and the entries held by
every per-event structure of the pipeline (timeline records per kind, running-total keys,
inference batch sizes, weight transfer times, buffer versions / items, runner history).

Verdict: RSS growth between the sample at `--settle-min` (5) and the
last sample <= 5 %, and every structure's size at the last sample <= its cap (bounded: it
stopped growing, or is a recent-records window below its fixed length). Writes the samples +
verdict as JSON and, with `--plot`, a PNG of RSS and structure sizes over time.

Workloads: `rl` (default; the RL core: `--preset` rl-debug, MLP PPO on the tabletop MJX envs,
as in `bench async`), `standin` (point-mass + MLP REINFORCE; no MuJoCo), and `train_async`: the
real `rl --pipeline.enabled` loop (`vlajax.rl.async_loop.train_async`, `--preset`'s config with
the pipeline on) with everything a user's run does -- Orbax checkpoints every `--checkpoint-every`
updates, TensorBoard, closed-loop evaluations every `--eval-every` updates, the progress line and
`async_metrics.jsonl` -- in `--out`. Its samples add the open file descriptors and the threads;
its verdict is a slope (`slope_verdict`): RSS MiB/hour after `--settle-min` by least squares, with
its 95% interval, against `--max-mib-per-hour` (5), and no growth in files or threads. When the
minutes are up it writes the JSON and stops the run with SIGTERM (the run's own stop path: the
newest checkpoint stays consistent, exit 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding
from scipy import stats

from research.bench.async_ import StandIn, StandInWorkload, mode_config, rl_workload
from vlajax.config.schema import get_config
from vlajax.pipeline import buffer as buffer_mod
from vlajax.pipeline import runner as runner_mod
from vlajax.pipeline import scheduler, weights
from vlajax.pipeline.metrics import Timeline, WindowReporter
from vlajax.pipeline.runner import AsyncRunner
from vlajax.pipeline.slots import SlotRollout
from vlajax.rl import async_loop
from vlajax.shared import cli

__all__ = ["rss_mb", "process_counts", "structure_sizes", "verdict", "slope_verdict", "main"]


def rss_mb() -> float:
    """This process's resident set size in MiB (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


def process_counts() -> dict[str, int]:
    """Open file descriptors and threads of this process (Linux /proc)."""
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return {"open_files": len(os.listdir("/proc/self/fd")), "threads": threads}


def slope(minutes: list[float], values: list[float]) -> dict[str, float]:
    """Least-squares slope of `values` per hour, with its 95% interval (Student t, n - 2 dof)."""
    x, y = np.asarray(minutes, np.float64) / 60.0, np.asarray(values, np.float64)
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    b = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - (y.mean() + b * (x - x.mean()))
    se = float(np.sqrt((resid ** 2).sum() / max(n - 2, 1) / sxx))
    half = float(stats.t.ppf(0.975, max(n - 2, 1))) * se
    return {"per_hour": b, "lo": b - half, "hi": b + half, "n": n}


def slope_verdict(samples: list[dict[str, Any]], settle_min: float, max_per_hour: float) -> dict[str, Any]:
    """RSS slope (MiB/hour, 95% interval) over the samples at >= settle_min; ok when the interval's
    upper end is <= max_per_hour and the open files and threads did not grow past their settle values
    (+2: a write or a transient helper thread in flight when sampled)."""
    settled = [s for s in samples if s["minute"] >= settle_min]
    if len(settled) < 3:
        return {"ok": False, "reason": f"fewer than 3 samples after minute {settle_min}"}
    t = [s["minute"] for s in settled]
    rss = slope(t, [s["rss_mb"] for s in settled])
    grow = {k: {"settle": settled[0][k], "max": max(s[k] for s in settled), "last": settled[-1][k]}
            for k in ("open_files", "threads")}
    flat = all(g["max"] <= g["settle"] + 2 for g in grow.values())
    return {"ok": rss["hi"] <= max_per_hour and flat, "rss_mib_per_hour": rss, "max_mib_per_hour": max_per_hour,
            "rss_settle_mb": settled[0]["rss_mb"], "rss_last_mb": settled[-1]["rss_mb"], "counts": grow,
            "settle_minute": t[0], "last_minute": t[-1],
            "updates_settle_to_last": settled[-1]["updates"] - settled[0]["updates"]}


def soak_train_async(a: Args) -> int:
    """The `train_async` workload (see the module docstring); exits through the run's SIGTERM path."""
    import logging
    import signal

    # the run's log lines, as `python -m vlajax.train rl` prints them (evaluations, checkpoints, the stop line)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)

    base = get_config(a.preset)
    cfg = base.replace(
        output_dir=a.out,
        env=dataclasses.replace(base.env, physics_impl="jax"),  # MJX, as the published soaks (before 'auto')
        rl=dataclasses.replace(base.rl, num_iterations=10**9, eval_every=a.eval_every),
        pipeline=dataclasses.replace(base.pipeline, enabled=True),
        checkpoint=dataclasses.replace(base.checkpoint, every_steps=a.checkpoint_every),
        logging=dataclasses.replace(base.logging, tensorboard=True, progress="plain"))
    metrics = os.path.join(a.out, "async_metrics.jsonl")
    samples: list[dict[str, Any]] = []
    t0, seen = time.monotonic(), {"offset": 0, "updates": 0, "rest": b""}

    def updates() -> int:  # async_metrics.jsonl's per-update "train" lines (read incrementally; the window
        if os.path.exists(metrics):  # reporter's lines in the same file are not updates)
            with open(metrics, "rb") as f:
                f.seek(seen["offset"])
                chunk = f.read()
            seen["offset"] += len(chunk)
            lines = (seen["rest"] + chunk).split(b"\n")
            seen["rest"] = lines.pop()  # a line still being written
            seen["updates"] += sum(b'"train": ' in ln for ln in lines)
        return seen["updates"]

    def sampler() -> None:
        k = 0
        while True:
            s = {"minute": (time.monotonic() - t0) / 60.0, "rss_mb": rss_mb(), "updates": updates(),
                 **process_counts()}
            samples.append(s)
            print(json.dumps(s), flush=True)
            k += 1
            if s["minute"] >= a.minutes:
                break
            time.sleep(max(t0 + k * a.sample_s - time.monotonic(), 0.0))
        out = {"meta": {"workload": "train_async", "preset": a.preset, "minutes": a.minutes, "sample_s": a.sample_s,
                        "out": a.out, "checkpoint_every": a.checkpoint_every, "eval_every": a.eval_every,
                        "cpu_count": os.cpu_count(), "argv": sys.argv[1:], "loadavg_1m_end": os.getloadavg()[0]},
               "samples": samples, "verdict": slope_verdict(samples, a.settle_min, a.max_mib_per_hour)}
        print(json.dumps(out["verdict"]), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        if a.plot:
            plot([s | {"sizes": {k: s[k] for k in ("open_files", "threads")}} for s in samples], a.plot)
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own stop path ends the process (exit 0)

    os.makedirs(a.out, exist_ok=True)
    threading.Thread(target=sampler, name="soak-sampler", daemon=True).start()
    return async_loop.run_async(cfg)


def structure_sizes(runner: AsyncRunner, rollout: SlotRollout) -> dict[str, int]:
    """Entries held by every per-event structure of a running pipeline."""
    out = {f"timeline/{k}": v for k, v in runner.timeline.sizes().items()}
    for g, b in enumerate(getattr(rollout, "batchers", [])):
        out[f"batcher{g}/batch_sizes"] = len(b.batch_sizes)
        out[f"batcher{g}/batch_hist"] = len(b.batch_hist)
    out["weights/transfer_s"] = len(runner.weights.transfer_s)
    out["buffer/consumed_at"] = len(runner.buffer._consumed_at)
    out["buffer/items"] = len(runner.buffer)
    out["runner/history"] = len(runner.history)
    return out


def caps(runner: AsyncRunner, rollout: SlotRollout) -> dict[str, int]:
    """The most entries each structure may hold (its recent-records window, or its key domain)."""
    tl, lanes = runner.timeline, len(runner.timeline.lanes)
    out = {"timeline/idle": tl.retain * lanes, "timeline/open_idle": lanes, "timeline/dropped_marks": 6 + lanes,
           "weights/transfer_s": weights.RECENT, "buffer/consumed_at": buffer_mod.KEEP_VERSIONS + 2,
           "buffer/items": runner.buffer.budget, "runner/history": runner_mod.HISTORY,
           **{f"timeline/{k}": tl.retain for k in ("produced", "consumed", "rejected", "depth", "batches",
                                                    "env_steps")}}
    for g, _ in enumerate(getattr(rollout, "batchers", [])):
        out[f"batcher{g}/batch_sizes"] = scheduler.RECENT
        out[f"batcher{g}/batch_hist"] = rollout.max_batch
    return out


def verdict(samples: list[dict[str, Any]], settle_min: float, cap: dict[str, int], max_growth_pct: float = 5.0
            ) -> dict[str, Any]:
    """RSS growth from the first sample at >= settle_min to the last; structures vs their caps.

    A structure without a cap (running-total keys) must not have grown from the settle sample
    to the last.
    """
    settled = [s for s in samples if s["minute"] >= settle_min]
    if len(settled) < 2:
        return {"ok": False, "reason": f"fewer than 2 samples after minute {settle_min}"}
    a, b = settled[0], settled[-1]
    growth = 100.0 * (b["rss_mb"] - a["rss_mb"]) / a["rss_mb"]
    unbounded = {}
    for k, v in b["sizes"].items():
        limit = cap.get(k)
        if (limit is not None and v > limit) or (limit is None and v > a["sizes"].get(k, 0)):
            unbounded[k] = {"settle": a["sizes"].get(k, 0), "last": v, "cap": limit}
    return {"ok": growth <= max_growth_pct and not unbounded, "rss_growth_pct": growth,
            "rss_settle_mb": a["rss_mb"], "rss_last_mb": b["rss_mb"], "settle_minute": a["minute"],
            "last_minute": b["minute"], "updates_settle_to_last": b["updates"] - a["updates"],
            "unbounded": unbounded, "max_growth_pct": max_growth_pct}


def plot(samples: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["minute"] for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    ax1.plot(t, [s["rss_mb"] for s in samples], marker="o")
    ax1.set_ylabel("RSS (MiB)")
    ax1.set_title("bench soak: async pipeline memory over time")
    for k in sorted(samples[-1]["sizes"]):
        ys = [s["sizes"].get(k, 0) for s in samples]
        if max(ys) > 0:
            ax2.plot(t, ys, label=k)
    ax2.set_yscale("symlog")
    ax2.set_ylabel("entries held")
    ax2.set_xlabel("minutes")
    ax2.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    minutes: float = 30.0  # wall-clock length of the run
    json: str = ""  # write the samples and the verdict here
    plot: str = ""  # write a PNG of RSS and structure sizes here
    sample_s: float = 60.0  # seconds between samples
    settle_min: float = 5.0  # growth is measured from this minute on
    workload: Literal['rl', 'standin', 'train_async'] = "rl"
    preset: str = "rl-debug"  # rl / train_async workloads: the TrainConfig preset it starts from
    slots: int = 2
    envs: int = 8  # total envs over the slots
    horizon: int = 4  # decisions per slot segment
    width: int = 64  # MLP width
    report_every: int = 10  # WindowReporter period (updates)
    cpu_devices: int = 8  # virtual CPU devices when running on CPU (not train_async: one device, as a user's run)
    out: str = "runs/soak-train-async"  # train_async: the run's output directory (checkpoints, tb, metrics)
    checkpoint_every: int = 10  # train_async: checkpoint.every_steps (updates)
    eval_every: int = 50  # train_async: rl.eval_every (updates; closed-loop evaluation in the trainer lane)
    max_mib_per_hour: float = 5.0  # train_async: the RSS slope criterion (upper end of its 95% interval)


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m research.bench soak", description=__doc__.split("\n")[0])
    if a.minutes <= 0 or a.sample_s <= 0:
        cli.error("--minutes and --sample-s must be > 0")
    if a.workload == "train_async":
        return soak_train_async(a)
    with contextlib.suppress(RuntimeError):  # only possible before the backend starts
        jax.config.update("jax_num_cpu_devices", a.cpu_devices)

    if a.workload == "rl":
        w, spec = rl_workload(a.preset, envs=a.envs, horizon=a.horizon, width=a.width)
    else:
        spec = StandIn(envs=a.envs, horizon=a.horizon, hidden=a.width, epochs=1)
        w, spec = StandInWorkload(spec), {"name": "standin", "envs": a.envs, "horizon": a.horizon, "width": a.width}
    cfg, n = mode_config("+partial_rollout", a.slots, "colocated", "1:1")
    dev = jax.devices()[0]
    reset, step, infer = w.env(n, None)
    rollout = SlotRollout(cfg, reset=reset, step=step, infer=infer, horizon=w.horizon, samples_per_slot=w.envs // n,
                          env_steps_per_decision=w.envs // n * w.steps_per_decision)
    timeline = Timeline()
    reporter = WindowReporter(timeline, None, every=a.report_every)
    runner = AsyncRunner(cfg, sample_step=rollout.sample_step, train_step=w.trainer(dev, True, cfg.require_batches),
                         get_params=w.get_params, state=jax.device_put(w.init_state(0), dev),
                         num_updates=2**62, samples_per_step=w.envs // n, mini_batch=w.envs // n,
                         rollout=rollout.lanes, timeline=timeline, rollout_shardings=SingleDeviceSharding(dev),
                         on_update=lambda r, rec: reporter(rec["update"]))
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()

    def sample() -> None:
        s = {"minute": (time.monotonic() - t0) / 60.0, "rss_mb": rss_mb(), "updates": runner.counters.updates,
             "sizes": structure_sizes(runner, rollout)}
        samples.append(s)
        print(json.dumps(s), flush=True)

    def sampler() -> None:
        k = 0
        while not runner.lifetime.stopped:
            sample()
            k += 1
            if (time.monotonic() - t0) / 60.0 >= a.minutes:
                runner.lifetime.stop()
                return
            runner.lifetime.sleep(max(t0 + k * a.sample_s - time.monotonic(), 0.0))

    th = threading.Thread(target=sampler, name="soak-sampler", daemon=True)
    th.start()
    status = runner.run()
    th.join(a.sample_s + 10)
    out = {"meta": {"workload": spec, "minutes": a.minutes, "sample_s": a.sample_s, "slots": n,
                    "async": {k: getattr(cfg, k) for k in ("staleness_threshold", "streaming", "partial_rollout")},
                    "retain": timeline.retain, "cpu_count": os.cpu_count(), "argv": sys.argv[1:],
                    "loadavg_1m_end": os.getloadavg()[0]},
           "status": status, "updates": runner.counters.updates, "samples": samples,
           "verdict": verdict(samples, a.settle_min, caps(runner, rollout))}
    print(json.dumps(out["verdict"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    if a.plot and samples:
        plot(samples, a.plot)
    return 0
