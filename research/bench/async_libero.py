"""`python -m research.bench async_libero --regimes libero`: sync vs async RL on real LIBERO workers, with the planner's
prediction of the same rows.

    python -m research.bench async_libero --regimes libero --json results/bench/libero_async_<date>.json \
        [--modes sync train_async +partial_rollout] [--updates 3] [--repeats 1] [--workers 2] [--max-steps 20]

Every row is a real `vlajax.libero.rl_train.train` run (the production LIBERO RL chain: worker processes in
`.venv-libero` stepping LIBERO with cameras, the in-process batching endpoint sampling the imported dummy-size
pi05_libero, the RL core's GRPO trainer, checkpoints); the runs differ only in `pipeline`:

| mode              | staleness | partial rollout | what overlaps                                              |
|-------------------|-----------|-----------------|------------------------------------------------------------|
| sync              | 0         | no              | nothing: a group rolls out, then the update                |
| train_async       | 1         | no              | the next group's rollout with the update (weights per group) |
| +partial_rollout  | 1         | yes             | the same, and episodes in flight take each new version     |

(the pipeline's slot modes do not apply: LIBERO workers are their own env slots -- each worker env its own
connection, requests batched dynamically at the endpoint -- in every mode.)

Timing: from the end of each run's first update (compiles, env builds) to the end of its last; updates/s and
env steps trained/s in that window; the trainer's idle ratio and staleness from the pipeline's timeline.
Repeats are the outer loop (repeat -> mode); a speed-up is the ratio to the same repeat's sync run. The
1-minute load average is recorded before and after every run (the machine is shared).

The planner's prediction (`research.planner.sim`), made before the async rows of a repeat run: its costs come
from that repeat's sync run only -- inference seconds per batch (the endpoint's timings), update seconds
(the trainer's), LIBERO's step-time distribution (the workers' per-episode median and mean step times ->
a log-normal: median = p50, sigma = sqrt(2 ln(mean / p50))), and reset + wait seconds per episode (one per
T decisions) -- with `shared_compute` on this host's cores. It is written into the row beside the
measurement. The criterion (docs/libero-training.md, fixed before the first run): for every async mode, predicted
speed-up / measured speed-up within [0.8, 1.25], and the same sign of (speed-up - 1).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
from typing import Literal

import numpy as np

from research.planner.costs import Costs, SimLatency
from research.planner.sim import Pipeline, simulate_mean
from vlajax.bench import write_result
from vlajax.config.schema import get_config
from vlajax.libero import pool as pool_mod
from vlajax.libero import rl_train
from vlajax.policies import import_openpi
from vlajax.shared import cli

MODES = ("sync", "train_async", "+partial_rollout")
CRITERION = ("for every async mode: predicted speed-up / measured speed-up (both vs the same repeat's sync run) "
             "in [0.8, 1.25], and the same sign of (speed-up - 1)")
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..",
                        "shared", "fixtures", "openpi", "policies")


@dataclasses.dataclass(frozen=True)
class Args:
    """Sync vs async RL on real LIBERO workers (module docstring)."""

    regimes: tuple[Literal["libero"], ...] = ("libero",)  # (this module is the `libero` regime)
    json: str = ""  # write the rows here
    modes: tuple[Literal["sync", "train_async", "+partial_rollout"], ...] = MODES
    repeats: int = 1  # runs per mode; the outer loop
    updates: int = 3  # timed updates per run (after one warm-up update)
    workers: int = 2  # LIBERO worker processes (one env each): the group's episodes run in parallel
    group: int = 2  # rl.group_size: episodes per group = per update
    max_steps: int = 20  # LIBERO steps per episode after the wait (the smoke's override of the suite's 220)
    replan: int = 5  # rl.chunk_steps: chunk steps executed per request
    num_steps_wait: int = 2  # dummy steps at the start
    checkpoint: str = ""  # an imported pi05_libero (default: import the reference fixture's, dummy size)
    time_limit_s: float = 3000.0  # the whole bench; a run that would start past it is skipped (recorded)


def _check(a: Args) -> None:
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        cli.error(f"--json {a.json}: its directory does not exist")
    if a.repeats < 1 or a.updates < 2:
        cli.error("--repeats must be >= 1 and --updates >= 2 (the window runs from the first timed update's end)")
    if min(a.workers, a.group, a.max_steps, a.replan) < 1 or a.num_steps_wait < 0:
        cli.error("--workers, --group, --max-steps and --replan must be >= 1, --num-steps-wait >= 0")
    if "sync" not in a.modes:
        cli.error("--modes must include sync (the baseline and the planner's profile)")
    if a.checkpoint and not os.path.isdir(a.checkpoint):
        cli.error(f"--checkpoint {a.checkpoint}: not a directory")


def _config(a: Args, ckpt: str, mode: str, out: str):
    """The `rl-pi05-libero-dummy` preset with the bench's workload and the mode's pipeline."""
    base = get_config("rl-pi05-libero-dummy")
    r = dataclasses.replace
    return r(base, name=f"bench-libero-{mode}", output_dir=out,
             model=r(base.model, tokenizer_path=os.path.join(FIXTURES, "tokenizer.model")),
             env=r(base.env, suite="libero_spatial", num_envs=a.group),
             libero=r(base.libero, tasks=(0,), workers=a.workers, max_steps=a.max_steps,
                      num_steps_wait=a.num_steps_wait),
             rl=r(base.rl, init_from=ckpt, num_iterations=a.updates + 1, group_size=a.group, chunk_steps=a.replan),
             pipeline=r(base.pipeline, staleness_threshold=0.0 if mode == "sync" else 1.0,
                        partial_rollout=mode == "+partial_rollout"),
             checkpoint=r(base.checkpoint, every_steps=1000))


def run_one(a: Args, ckpt: str, mode: str, out: str) -> dict:

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = rl_train.train(_config(a, ckpt, mode, out))
    wall = time.perf_counter() - t0
    hist, ends = res["history"], res["update_times"]
    window = ends[-1] - ends[0]
    timed = hist[1:]
    steady = res["summary_steady"]
    return {"mode": mode, "updates_timed": len(timed), "window_s": window,
            "updates_per_s": len(timed) / window, "env_steps_per_s": sum(h["env_steps"] for h in timed) / window,
            "trainer_idle_ratio": steady.get("trainer/idle_ratio"), "rollouter_idle_ratio":
                steady.get("rollouter/idle_ratio"),
            "staleness": [h["staleness"][0] for h in hist], "version_span": [h["span"][0] for h in hist],
            "update_s": [h["update_s"] for h in hist], "rollout_s": [h["train"]["rollout_s"] for h in hist],
            "step_s_p50": float(np.mean([h["train"]["step_s_p50"] for h in timed])),
            "step_s_mean": float(np.mean([h["train"]["step_s_mean"] for h in timed])),
            "reset_s": float(np.mean([h["train"]["reset_s"] for h in timed])),
            "decisions_per_update": float(np.mean([h["train"]["decisions"] for h in timed])),
            "infer_times": res["infer_times"], "restarts": len(res["restarts"]), "wall_s": wall,
            "load_1m_start": load0, "load_1m_end": os.getloadavg()[0]}


def planner_costs(a: Args, sync_row: dict):
    """The planner's `Costs` from one sync run (module docstring)."""
    infer = [s for n, s in sync_row["infer_times"][len(sync_row["infer_times"]) // 4:]]  # past the compiles
    upd = sync_row["update_s"][1:]
    t = math.ceil(a.max_steps / a.replan)
    p50, mean = sync_row["step_s_p50"], sync_row["step_s_mean"]
    sigma = math.sqrt(2 * math.log(mean / p50)) if mean > p50 > 0 else 0.0
    sim = SimLatency(median_s=p50, sigma=sigma, reset_prob=1.0 / t,
                     reset_s=sync_row["reset_s"] + a.num_steps_wait * mean)
    return Costs(infer_s=((a.group, float(np.median(infer))),),
                 train_update_s=((a.group * t, float(np.median(upd))),), sim=sim, shared_compute=True,
                 cores=2.0, source="bench async --regimes libero: this repeat's sync run"), t


def predict(a: Args, sync_row: dict, modes: list[str]) -> dict:
    """{mode: predicted updates/s} from the sync run's costs (the planner's simulator, 5 seeds)."""
    costs, t = planner_costs(a, sync_row)
    out = {}
    for mode in modes:
        pipe = Pipeline(envs=a.group, horizon=t, steps_per_decision=a.replan, mode=mode, slots=1, max_batch=a.group,
                        max_wait_s=0.02, updates=a.updates)
        sim = simulate_mean(pipe, costs, seeds=5)
        out[mode] = {"updates_per_s": 1.0 / sim["seconds_per_update"],
                     "env_steps_per_s": sim["trained_env_steps_per_s"],
                     "trainer_idle_ratio": sim["trainer_idle_ratio"], "staleness_max": sim["staleness_max"]}
    return {"costs": costs.to_json(), "rows": out}


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m research.bench async_libero --regimes libero",
                  description=__doc__.split("\n")[0])
    _check(a)

    try:
        pool_mod.libero_python()
    except pool_mod.LiberoEnvMissing as e:
        cli.error(str(e))

    root = tempfile.mkdtemp(prefix="bench_async_libero_")
    ckpt = a.checkpoint
    if not ckpt:
        ckpt = os.path.join(root, "imported")
        tok = os.path.join(FIXTURES, "tokenizer.model")
        if import_openpi.main(["--checkpoint", os.path.join(FIXTURES, "pi05_libero", "ckpt"), "--config",
                               "pi05_libero", "--size", "dummy", "--tokenizer", tok, "--out", ckpt]) != 0:
            cli.error("importing the reference pi05_libero failed")
    modes = [m for m in MODES if m in a.modes]
    t_start = time.monotonic()
    data = {"benchmark": "async", "regime": "libero", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "args": dataclasses.asdict(a), "criterion": CRITERION, "order": "repeat -> mode",
            "reality": "real LIBERO (libero_spatial task 0, two 256x256 cameras rendered for the frames requests "
                       "read, EGL software rendering) in worker processes; real inference (dummy-size pi05_libero, "
                       "flow_sde) and real GRPO updates (VLM frozen) in this process; all on this shared 2-core "
                       "machine: the workers, the endpoint and the trainer compete for the same cores",
            "rows": [], "predictions": [], "skipped": []}
    for rep in range(a.repeats):
        sync_row = None
        for mode in modes:
            if time.monotonic() - t_start > a.time_limit_s:
                data["skipped"].append({"repeat": rep, "mode": mode, "why": "time limit"})
                continue
            row = run_one(a, ckpt, mode, os.path.join(root, f"r{rep}_{mode.replace('+', 'p')}")) | {"repeat": rep}
            if mode == "sync":
                sync_row = row
                pred = predict(a, row, modes) | {"repeat": rep, "made_at_utc": time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "before_rows": [m for m in modes if m != "sync"]}
                data["predictions"].append(pred)
            if sync_row is not None:
                p = data["predictions"][-1]["rows"][mode]
                row["speedup"] = row["updates_per_s"] / sync_row["updates_per_s"]
                row["predicted_updates_per_s"] = p["updates_per_s"]
                row["predicted_speedup"] = p["updates_per_s"] / data["predictions"][-1]["rows"]["sync"][
                    "updates_per_s"]
                if mode != "sync":
                    ratio = row["predicted_speedup"] / row["speedup"]
                    row["criterion_met"] = bool(0.8 <= ratio <= 1.25 and
                                                (row["predicted_speedup"] - 1) * (row["speedup"] - 1) >= 0)
            data["rows"].append(row)
            short = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                     if k in ("repeat", "mode", "updates_per_s", "speedup", "predicted_speedup", "criterion_met",
                              "staleness", "load_1m_start", "load_1m_end", "wall_s")}
            print(json.dumps(short), flush=True)
    if a.json:
        write_result(a.json, data)
    print(render_markdown(data), end="")
    return 0


def _fmt(r: dict, k: str, d: int = 3) -> str:
    return "" if r.get(k) is None else f"{r[k]:.{d}f}"


def render_markdown(data: dict) -> str:
    lines = ["| repeat | mode | updates/s | env steps/s | speed-up vs sync | planner: updates/s | planner: speed-up | "
             "criterion | staleness | trainer idle | load 1m start-end |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for r in data["rows"]:
        crit = "" if "criterion_met" not in r else ("met" if r["criterion_met"] else "not met")
        lines.append(f"| {r['repeat']} | {r['mode']} | {_fmt(r, 'updates_per_s', 4)} | "
                     f"{_fmt(r, 'env_steps_per_s', 2)} | {_fmt(r, 'speedup', 2)} | "
                     f"{_fmt(r, 'predicted_updates_per_s', 4)} | "
                     f"{_fmt(r, 'predicted_speedup', 2)} | {crit} | {r['staleness']} | "
                     f"{_fmt(r, 'trainer_idle_ratio', 2)} | {r['load_1m_start']:.1f}-{r['load_1m_end']:.1f} |")
    return "\n".join(lines) + "\n"
