"""`python -m research.planner validate --profile-from RUN_DIR --json OUT`: predictions vs measured bench rows.

For every row of the given `python -m vlajax.bench async` JSONs, the planner simulates the row's
configuration -- its mode, placement (the bench runs a placement on one rollout and one train
device: colocated = 1 device, disaggregated 1:1 = 2), slots, timed updates, `max_wait_ms`,
the workload's envs / horizon / chunk from the JSON's `meta` -- with the costs measured by
`python -m research.planner profile` (`RUN_DIR/profile.json`): the `c` costs plus the JSON's latency
model for the `cpu_longtail` regime (C MuJoCo under the latency model), the `jax` costs and no
latency for `mjx`. Nothing in the prediction is fitted to the rows.

Rows of the production-loop bench (`vlajax.bench.async_loops`, e.g. `results/bench/async_production.json`,
the default `results/bench/async_production_planval.json`; the profile's workload must match theirs,
and the compared figure is env steps trained on per second, as those rows report it) are read:
`mjx` -> the `jax` costs; `cpu-sim` -> the `c` costs, no latency; `emulated-farm` -> the `c`
costs plus the JSON's calibrated farm model (`meta.farm.latency_model`). The farm
delays every host simulator call (one control step of n envs) to max(real, slowest of n draws);
the planner does the same per call (`sim._Run._host_calls`).

Reports each row's predicted and measured env steps/s and idle ratios, the signed error
(predicted / measured - 1), and the median absolute error over all rows and per regime.
`--plot PATH` draws predicted vs measured (needs matplotlib, the `report` extra).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shlex
from typing import Literal

import numpy as np

from research.planner.costs import SimLatency
from research.planner.profile import load, pooled, profile_paths
from research.planner.sim import Pipeline, simulate_mean
from vlajax.shared import cli

__all__ = ["DEFAULT_RUNS", "row_pipeline", "steady_rate", "validate", "render", "main"]

DEFAULT_RUNS = ("results/bench/async_production_planval.json",)
PRODUCTION_REGIMES = ("mjx", "cpu-sim", "emulated-farm")  # rows of the production-loop bench (async_loops)


def _production(meta: dict) -> bool:
    return "micro_batches" in meta.get("workload", {})


def check_workload(meta: dict, profile_wl: dict, path: str) -> None:
    """The profile must be of the rows' workload (production rows: preset, envs, slots, horizon, width)."""
    wl = meta["workload"]
    keys = ("preset", "envs", "slots", "horizon", "width")
    diff = {k: (profile_wl.get(k), wl.get(k)) for k in keys if k in wl and profile_wl.get(k) != wl.get(k)}
    if diff:
        raise ValueError(f"{path}: the profile's workload differs from the rows' (profile, rows): {diff}")


def _flag(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def row_pipeline(meta: dict, row: dict) -> Pipeline:
    """The `Pipeline` a bench row ran (see the module docstring)."""
    wl, argv = meta["workload"], meta.get("argv", [])
    slots = int(wl["slots"]) if "slots" in wl else int(_flag(argv, "--slots", "4"))
    disagg = row["placement"].startswith("disaggregated")
    ratio = tuple(int(x) for x in row["placement"].split()[-1].split(":")) if disagg else (1, 1)
    max_wait_ms = row.get("max_wait_ms")
    max_wait_ms = meta.get("max_wait_ms", 2.0) if max_wait_ms is None else max_wait_ms
    # the row's batching rule (rows written before the adaptive rule existed ran the fixed wait)
    return Pipeline(envs=wl["envs"], horizon=wl["horizon"], steps_per_decision=wl.get("action_horizon", 1),
                    mode=row["mode"], slots=slots, max_wait_s=max_wait_ms / 1e3,
                    adaptive=row.get("batching") == "adaptive",
                    placement="disaggregated" if disagg else "colocated", devices=2 if disagg else 1,
                    ratio=ratio, updates=row.get("updates_timed", 8))


def run_ends(meta: dict, run: dict) -> tuple[list[float], list[float]]:
    """A production row's run -> (its updates' end times, env steps trained on in each), from the stored
    loop times: the sync loop's `iteration_times` (start, end, env steps), the async loop's `update_times`
    with the workload's env steps per update."""
    loop = run.get("loop", {})
    if "iteration_times" in loop:
        return [t[1] for t in loop["iteration_times"]], [float(t[2]) for t in loop["iteration_times"]]
    if "update_times" in loop:
        ends = list(loop["update_times"])
        return ends, [float(meta["workload"]["env_steps_per_update"])] * len(ends)
    raise ValueError(f"{run.get('regime')} {run.get('mode')}: the run stores no update times (an older bench JSON)")


def steady_rate(meta: dict, run: dict, warmup: int) -> float:
    """Env steps trained on per second from the end of update `warmup` (0: the first, as the bench's
    window) to the end of the last."""
    ends, steps = run_ends(meta, run)
    if warmup >= len(ends) - 1:
        raise ValueError(f"--warmup {warmup} leaves no update of the {len(ends) - 1} timed")
    return sum(steps[warmup + 1:]) / (ends[-1] - ends[warmup])


def measured(meta: dict, row: dict, rows: list[dict], warmup: int) -> dict:
    """A bench row's measured env steps/s (median of its repeats), each repeat's, and x sync (median of
    the repeats' ratios to the same repeat's sync run), over the window after `warmup` updates. With
    `warmup` 0 the row's own stored figures (the bench's window)."""
    if warmup == 0:
        m = row["env_steps_per_s"]
        return {"value": m, "all": row.get("env_steps_per_s_all", [m]), "range": row.get("env_steps_per_s_range"),
                "speedup_vs_sync": row.get("speedup_vs_sync")}
    if not _production(meta):
        raise ValueError("--warmup needs the production-loop bench's rows (their stored update times)")
    rates = {run["repeat"]: steady_rate(meta, run, warmup) for run in row["runs"]}
    sync = next((r for r in rows if r["regime"] == row["regime"] and r["mode"] == "sync"
                 and r["placement"] == row["placement"]), None)
    ratios = []
    if sync is not None:
        base = {run["repeat"]: steady_rate(meta, run, warmup) for run in sync["runs"]}
        ratios = [v / base[k] for k, v in rates.items() if k in base]
    vals = list(rates.values())
    return {"value": float(np.median(vals)), "all": vals, "range": [min(vals), max(vals)],
            "speedup_vs_sync": float(np.median(ratios)) if ratios else None}


def _mean_batch(row: dict) -> float | None:
    """Requests per inference call of a bench row: its runs' `inference_batch_mean`, median (None: no batcher)."""
    vals = [r.get("inference_batch_mean") for r in row.get("runs", []) if r.get("inference_batch_mean")]
    return float(np.median(vals)) if vals else row.get("inference_batch_mean")


def validate(runs: list[str], run_dir: str | tuple[str, ...], seeds: int = 5, statistic: str = "median",
             cores: dict[str, float] | None = None, host: str = "probed", fifo_steps: bool = False,
             jitter: bool = False, warmup: int = 0, group_cores: bool = False, local_jitter: bool = False,
             threaded_step_jitter: bool = False, async_dispatch: bool = False) -> dict:
    """`run_dir`: the profile's run directory, or several of one workload (their calls pooled);
    `cores`: regime -> host cores replacing the profile's (a what-if, reported as such); `host`: the
    host capacity model (`profile.load`); `warmup`: updates after the first left out of both the
    measured and the simulated window (0: the bench's window); `local_jitter`: `jitter` draws each call's
    variation from the calls timed beside it (`Costs.local_jitter`); `threaded_step_jitter`: the slot steps'
    factors from the steps timed beside each other (`Costs.threaded_steps`, applied before `local_jitter`);
    `async_dispatch`: slots post their requests once their steps are dispatched (`Pipeline.async_dispatch`)."""
    cores = cores or {}
    rows, capacity, costs_of = [], {}, {}
    prof = pooled(run_dir)
    for path in runs:
        d = json.loads(pathlib.Path(path).read_text())
        meta = d["meta"]
        production = _production(meta)
        if production:
            check_workload(meta, prof["workload"], path)
        for row in d["rows"]:
            longtail = row["regime"] == "cpu_longtail"
            if row["regime"] in ("cpu-sim", "emulated-farm"):  # the production-loop bench
                physics = "c"
            else:
                physics = row.get("physics") if longtail and row.get("physics") not in (None, "preset") else "jax"
            if physics not in costs_of:  # the profile(s) read and pooled once per physics, not per row
                costs_of[physics] = load(run_dir, physics, statistic, host)
                if threaded_step_jitter:
                    costs_of[physics] = costs_of[physics].threaded_steps()
                if local_jitter:
                    costs_of[physics] = costs_of[physics].local_jitter()
            costs = costs_of[physics]
            capacity[physics] = costs.cores
            if longtail:
                costs = dataclasses.replace(costs, sim=SimLatency(**meta["latency_model"]))
            elif row["regime"] == "emulated-farm":
                costs = dataclasses.replace(costs, sim=SimLatency(**meta["farm"]["latency_model"]))
            if row["regime"] in cores:
                costs = dataclasses.replace(costs, cores=cores[row["regime"]])
            pipe = dataclasses.replace(row_pipeline(meta, row), fifo_steps=fifo_steps, jitter=jitter, warmup=warmup,
                                       group_cores=group_cores, async_dispatch=async_dispatch)
            pred = simulate_mean(pipe, costs, seeds)
            meas = measured(meta, row, d["rows"], warmup)
            m = meas["value"]
            # production rows report env steps trained on per second; the older bench, produced ones
            predicted = pred["trained_env_steps_per_s"] if production else pred["env_steps_per_s"]
            rows.append({
                "source": path, "regime": row["regime"], "physics": physics, "placement": row["placement"],
                "mode": row["mode"], "measured_env_steps_per_s": m,
                "measured_all": meas["all"], "measured_range": meas["range"],
                "predicted_env_steps_per_s": predicted,
                "error": predicted / m - 1.0,
                "measured_speedup_vs_sync": meas["speedup_vs_sync"],
                "measured_loadavg_1m": row.get("loadavg_1m"),
                # (the production bench's sync rows have no idle ratios: the sync loop does not report them)
                "measured_trainer_idle": row.get("trainer_idle_ratio"),
                "predicted_trainer_idle": pred["trainer_idle_ratio"],
                "measured_rollouter_idle": row.get("rollouter_idle_ratio"),
                "predicted_rollouter_idle": pred["rollouter_idle_ratio"],
                "measured_staleness_mean": row["staleness_mean"], "predicted_staleness_mean": pred["staleness_mean"],
                "measured_inference_batch": _mean_batch(row),
                "predicted_inference_batch": pred.get("inference_batch_mean"),
            })
    for r in rows:  # predicted speed-up over the same source's and regime's sync row
        base = next((b for b in rows if b["source"] == r["source"] and b["regime"] == r["regime"]
                     and b["mode"] == "sync" and b["placement"] == r["placement"]), None)
        r["predicted_speedup_vs_sync"] = (r["predicted_env_steps_per_s"] / base["predicted_env_steps_per_s"]
                                          if base else None)
    err = np.abs([r["error"] for r in rows])
    by_regime = {g: float(np.median([abs(r["error"]) for r in rows if r["regime"] == g]))
                 for g in sorted({r["regime"] for r in rows})}
    paths = [str(p) for p in profile_paths(run_dir)]
    return {"runs": list(runs), "profile": paths[0] if len(paths) == 1 else paths, "seeds": seeds,
            "fifo_steps": fifo_steps, "jitter": jitter, "warmup": warmup, "group_cores": group_cores,
            "local_jitter": local_jitter, "threaded_step_jitter": threaded_step_jitter,
            "async_dispatch": async_dispatch,
            "profile_uptime": [prof.get("uptime_before"), prof.get("uptime_after")],
            "statistic": statistic, "host": host, "host_capacity": capacity, "cores_override": cores,
            "rows": rows, "median_abs_error": float(np.median(err)), "mean_abs_error": float(np.mean(err)),
            "max_abs_error": float(np.max(err)), "median_abs_error_by_regime": by_regime}


def render(result: dict) -> str:
    """Markdown table of a `validate` result."""
    out = ["| regime | placement | mode | measured env steps/s | predicted | error | x sync meas. / pred. "
           "| trainer idle meas. / pred. | rollouter idle meas. / pred. | requests per call meas. / pred. | source |",
           "|" + "---|" * 11]
    f = lambda v: "-" if v is None else f"{v:.2f}"
    for r in result["rows"]:
        out.append(f"| {r['regime']} | {r['placement']} | {r['mode']} | {r['measured_env_steps_per_s']:.0f} "
                   f"| {r['predicted_env_steps_per_s']:.0f} | {100 * r['error']:+.1f}% "
                   f"| {f(r.get('measured_speedup_vs_sync'))} / {f(r.get('predicted_speedup_vs_sync'))} "
                   f"| {f(r['measured_trainer_idle'])} / {r['predicted_trainer_idle']:.2f} "
                   f"| {f(r['measured_rollouter_idle'])} / {r['predicted_rollouter_idle']:.2f} "
                   f"| {f(r.get('measured_inference_batch'))} / {f(r.get('predicted_inference_batch'))} "
                   f"| {pathlib.Path(r['source']).name} |")
    regimes = ", ".join(f"{k} {100 * v:.1f}%" for k, v in result["median_abs_error_by_regime"].items())
    out.append(f"\nmedian |error| {100 * result['median_abs_error']:.1f}% over {len(result['rows'])} rows "
               f"({regimes}); mean {100 * result['mean_abs_error']:.1f}%, max {100 * result['max_abs_error']:.1f}%")
    return "\n".join(out) + "\n"


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for regime, marker in (("cpu_longtail", "o"), ("mjx", "s"), ("cpu-sim", "^"), ("emulated-farm", "D")):
        rs = [r for r in result["rows"] if r["regime"] == regime]
        if rs:
            ax.scatter([r["measured_env_steps_per_s"] for r in rs], [r["predicted_env_steps_per_s"] for r in rs],
                       marker=marker, label=regime, alpha=0.8)
    vals = [v for r in result["rows"] for v in (r["measured_env_steps_per_s"], r["predicted_env_steps_per_s"])]
    lo, hi = 0.9 * min(vals), 1.1 * max(vals)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [0.85 * lo, 0.85 * hi], [1.15 * lo, 1.15 * hi], color="grey", alpha=0.15, label="±15%")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured env steps/s (bench async)")
    ax.set_ylabel("predicted env steps/s (research.planner)")
    ax.set_title(f"median |error| {100 * result['median_abs_error']:.1f}% ({len(result['rows'])} rows)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    # run directory with profile.json (python -m research.planner profile); several: their calls pooled (one workload)
    profile_from: tuple[str, ...]
    runs: tuple[str, ...] = DEFAULT_RUNS  # bench async JSONs with measured rows
    json: str = ""  # write the comparison here
    plot: str = ""  # write predicted vs measured (PNG) here (needs matplotlib)
    seeds: int = 5  # simulated runs averaged per row
    statistic: Literal["median", "min"] = "median"  # of the profile's calls (min: the least disturbed call)
    # what-if: REGIME=CORES replaces the profiled host's cores for that regime's rows (e.g. cpu-sim=1)
    override_cores: tuple[str, ...] = ()
    # the host's capacity: probed = what the profile's probes measured this process is offered (threads' worth);
    # affinity = every core the process may use, a thread a whole core (the model before the probes)
    host: Literal["probed", "affinity"] = "probed"
    fifo_steps: bool = False  # model option (issue 44.5): slot steps first come, first served within their cap
    # model option (issue 44.5, second try): slot steps' and inference calls' seconds drawn from the profile's calls
    jitter: bool = False
    # updates after the first left out of the measured and the simulated window (issue 44.5, third: the runs'
    # warm-up); 0 = the bench's own window; needs production-loop rows (their stored update times)
    warmup: int = 0
    # model option (issue 44.5, fifth try): concurrent slot steps' cores per solo-speed unit at most the host's
    # capacity / their measured concurrency, so together they reach it (without: their solo cores, water-filled first)
    group_cores: bool = False
    # model option (issue 44.5, seventh): with --jitter, each call's factor relative to the median of the 5 calls
    # timed beside it (what spreads concurrent slots apart; the drift all of them share is left out)
    local_jitter: bool = False
    # model option (after issue 44.5's ninth): with --jitter, the slot steps' factors from the steps the profile
    # timed beside each other (its concurrency rounds) instead of one after another; needs profiles that have them
    threaded_step_jitter: bool = False
    # model option (issue 44.5, tenth): a slot posts its next request once its step is dispatched (JAX returns
    # before computing; the profile's measured dispatch, under the GIL), the step computing after it; needs
    # profiles that time the dispatch
    async_dispatch: bool = False


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m research.planner validate", description=__doc__.splitlines()[0])
    if a.local_jitter and not a.jitter:
        cli.error("--local-jitter changes the factors --jitter draws: give --jitter too")
    if a.threaded_step_jitter and not a.jitter:
        cli.error("--threaded-step-jitter changes the factors --jitter draws: give --jitter too")
    for r in a.profile_from:
        if not (pathlib.Path(r) / "profile.json").is_file():
            cli.error(f"{r}/profile.json not found (python -m research.planner profile --out {r})")
    try:
        prof = pooled(a.profile_from)
    except (KeyError, ValueError) as e:
        cli.error(f"--profile-from: {e}")
    if a.threaded_step_jitter and not any(k.endswith("/step_threaded") for k in prof["raw"]):
        cli.error("--threaded-step-jitter: the profiles have no per-step timings of their concurrency rounds "
                  "(step_threaded); take them again with this version of `python -m research.planner profile`")
    if a.async_dispatch and not any(k.endswith("/step_dispatch") for k in prof["raw"]):
        cli.error("--async-dispatch: the profiles do not time the slot steps' dispatch (step_dispatch); "
                  "take them again with this version of `python -m research.planner profile`")
    for r in a.runs:
        if not pathlib.Path(r).is_file():
            cli.error(f"bench JSON {r} not found")
    if a.seeds < 1:
        cli.error("--seeds must be >= 1")
    if a.warmup < 0:
        cli.error("--warmup must be >= 0")
    if a.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            cli.error("--plot needs matplotlib (pip install -e '.[report]')")
    try:
        cores = {k: float(v) for k, v in (x.split("=") for x in a.override_cores)}
        if any(v <= 0 for v in cores.values()):
            raise ValueError
    except ValueError:
        cli.error(f"--override-cores takes REGIME=CORES with CORES > 0, got {' '.join(a.override_cores)}")
    if a.warmup:
        for path in a.runs:
            d = json.loads(pathlib.Path(path).read_text())
            try:
                for row in d["rows"]:
                    measured(d["meta"], row, d["rows"], a.warmup)
            except (KeyError, ValueError) as e:
                cli.error(f"--warmup {a.warmup}: {path}: {e}")
    result = validate(list(a.runs), a.profile_from, a.seeds, a.statistic, cores, a.host, a.fifo_steps, a.jitter,
                      a.warmup, a.group_cores, a.local_jitter, a.threaded_step_jitter, a.async_dispatch)
    result["command"] = "python -m research.planner validate " + shlex.join(argv)
    print(render(result), end="")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {a.json}")
    if a.plot:
        plot(result, a.plot)
        print(f"wrote {a.plot}")
    return 0
