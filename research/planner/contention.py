"""`python -m research.planner contention --json OUT`: do the production workload's calls overlap on this host?

A diagnostic beside `plan profile` (which times each call alone): it runs the same calls of
`bench async`'s workload (`vlajax.bench.async_loops.run_config`) concurrently in Python threads,
as the async loop's lanes do, and compares with running them one after the other:

- `slot_steps`: the slot modes' `step` calls of 4 slots x `horizon` decisions, serially in one
  thread vs one thread per slot (each blocking on its own calls): `plan profile`'s
  `step_concurrency`, the measurement its model uses;
- `update_beside_collect`: the trainer's update (`Trainer` around the loop's `learner.update`,
  one collect batch) alone vs while another thread runs the fused collect back to back;
- `collect_beside_updates`: one fused collect alone vs while another thread runs updates back to back.

Each for MJX (`jax`) and C MuJoCo (`c`, its host callback), and for C MuJoCo also with Python's
GIL switch interval at 0.5 ms instead of the default 5 ms (`sys.setswitchinterval`): a thread
waiting for the GIL waits up to that interval while another holds it, so if Python held by one
lane is what serializes the others, the concurrent times move with the interval. (The C MuJoCo
callback steps its envs natively without the GIL since commit 34456ff.) On a shared machine these
ratios follow the CPU this process is offered while they run: repeat them, and compare runs made
back to back (experiments/planner). The model of `research.planner.sim` caps concurrent slot steps at
the concurrency `plan profile` measures for them (the slot steps above, from the profile itself);
between lanes (the update beside a collect) it assumes no GIL or lock: this measures how far that holds.
"""

# ruff: noqa: B023  (the closures below run inside the iteration that defines them)

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import jax
import numpy as np

from research.planner.profile import step_concurrency
from vlajax.bench import write_result
from vlajax.shared import cli

__all__ = ["main"]


def _slowdown(fn, background, n: int) -> dict:
    """`fn` timed `n` times alone, then `n` times while `background` runs in a loop in another thread."""

    def timed() -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    alone, stop = timed(), threading.Event()

    def loop():
        while not stop.is_set():
            background()

    bg = threading.Thread(target=loop)
    bg.start()
    time.sleep(0.05)
    beside = timed()
    stop.set()
    bg.join()
    return {"alone_s": alone, "beside_s": beside, "slowdown": float(np.median(beside) / np.median(alone))}


def measure(a: Args) -> dict:
    import jax.numpy as jnp

    import vlajax.config.presets  # noqa: F401
    from vlajax.bench.async_loops import run_config
    from vlajax.config.schema import get_config
    from vlajax.envs.tabletop import c_physics
    from vlajax.pipeline.buffer import Trajectory
    from vlajax.rl import learner
    from vlajax.rl import setup as rl_setup
    from vlajax.rl.async_workload import RLWorkload, Trainer
    from vlajax.training import sharding
    from vlajax.training.train_state import TrainState

    base = dataclasses.replace(get_config(a.preset), seed=0)
    kw = dict(envs=a.envs, slots=a.slots, horizon=a.horizon, width=a.width, updates=2, max_wait_ms=2.0,
              out_dir=tempfile.mkdtemp(prefix="plan_contention_"))
    block = jax.block_until_ready
    out: dict = {}
    for physics in a.physics:
        for interval in ((0.005, 0.0005) if physics == "c" else (0.005,)):
            sys.setswitchinterval(interval)
            regime = "mjx" if physics == "jax" else "cpu-sim"
            cfg = run_config(base, regime, "sync", **kw)
            setup = rl_setup.build(cfg)
            mesh, rules = sharding.make_mesh(cfg.mesh), cfg.mesh.logical_rules
            tx = learner.make_optimizer(cfg.rl)
            init = lambda rng: TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))
            state, shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(0))
            # the env state not donated: the loop's own collect program (vlajax/rl/loop.py, async_loop._Collect)
            collect_fn = jax.jit(functools.partial(rl_setup.collect, cfg, setup))
            update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                                in_shardings=(None, shardings, None), out_shardings=(shardings, None),
                                donate_argnums=(1,))
            res: dict = {"switch_interval_s": interval}
            with sharding.use_mesh(mesh, rules), (c_physics.host_timing() if physics == "c"
                                                  else contextlib.nullcontext()):
                env_box = [rl_setup.place_env_state(
                    jax.jit(functools.partial(rl_setup.initial_env_state, cfg, setup.env))(), mesh)]
                params = jax.tree.map(jnp.copy, state.params)
                calls = [0]

                def one_collect():
                    k, _ = rl_setup.iteration_keys(0, calls[0])
                    calls[0] += 1
                    env_box[0], batch, roll = collect_fn(params, env_box[0], k, jnp.int32(0))
                    block(batch)
                    jax.device_get(roll)
                    return batch

                batch = one_collect()  # compiles
                item = [Trajectory(batch, np.zeros(1, np.int32), a.envs * a.horizon, 1)]
                tr = Trainer(cfg, setup.actor, None, False, True, prepare=None, update_fn=update_fn)
                st = [state]

                def one_update():
                    st[0], _ = tr(st[0], iter(item))
                    block(st[0].params)

                one_update()  # compiles
                res["update_beside_collect"] = _slowdown(one_update, one_collect, a.rounds * 4)
                res["collect_beside_updates"] = _slowdown(one_collect, one_update, a.rounds)
                # -- slot steps: serial vs one thread per slot -------------------------------------
                cfg_s = run_config(base, regime, "+streaming", **kw)
                work = RLWorkload(cfg_s, setup)
                reset, step, infer = work.env(a.slots, None)
                envs_of = {s: reset(s) for s in range(a.slots)}
                outs = block(infer(params, [envs_of[s][1] for s in range(a.slots)]))
                raw: dict[str, list[float]] = {}  # the profile's own measurement (a compiling round first)
                step_concurrency(raw, physics, step, envs_of, outs, a.slots, a.horizon, a.rounds)
                serial, concurrent = raw[f"{physics}/steps_serial"], raw[f"{physics}/steps_threads"]
                res["slot_steps"] = {"calls": a.slots * a.horizon, "serial_s": serial, "threads_s": concurrent,
                                     "overlap": float(np.median(serial) / np.median(concurrent))}
            out[f"{physics}@switch{interval * 1e3:g}ms"] = res
            print(json.dumps({physics: {k: (v.get("slowdown", v.get("overlap")) if isinstance(v, dict) else v)
                                        for k, v in res.items()}}), flush=True)
    sys.setswitchinterval(0.005)
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment); workload flags as `bench async`'s."""

    json: str = ""  # write the measurements here
    preset: str = "rl-debug"
    envs: int = 16
    slots: int = 4
    horizon: int = 8
    width: int = 256
    physics: tuple[str, ...] = ("jax", "c")
    rounds: int = 5  # timed rounds of each comparison


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m research.planner contention", description=__doc__.splitlines()[0])
    up = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    before = up()
    res = measure(a)
    data = {"command": "python -m research.planner contention " + " ".join(argv), "uptime_before": before,
            "uptime_after": up(), "cores": len(os.sched_getaffinity(0)),
            "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "results": res}
    write_result(a.json, data)
    return 0
