"""`python -m vlajax.bench env --json PATH`: env steps/s with and without rendering, vs C MuJoCo.

For each batch size (default 16, 64, 256) and with/without rendering (pixels obs: agent-view + wrist
cameras at `--image-size`, pure-JAX ray caster; without: state obs), it times a jitted `lax.scan`
of `--steps` vmapped env steps with random actions (one env step = `n_substeps` physics steps
plus rewards/observation), with each `--physics-impl`: `jax` (MJX) and/or `c` (C MuJoCo through
the env's host callback, one env after the other on the calling thread). The reference,
measured in the same run, is C MuJoCo stepping the same scene with `mujoco.rollout` on all
cores (`cpu_mujoco_steps_per_s`, physics steps; divide by `n_substeps` for env-step
equivalents, given as `cpu_mujoco_env_steps_per_s`).

Rows: {env, num_envs, render, physics_impl, steps_per_s, physics_steps_per_s, compile_s, seconds}.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import platform
import time
from typing import Literal

import jax
import mujoco
import numpy as np
from mujoco import rollout

from vlajax.bench import write_result
from vlajax.envs import registry
from vlajax.shared import cli, compile_cache


def _cpu_name() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_env(task: str, num_envs: int, render: bool, image_size: int, steps: int, repeats: int,
             physics_impl: str = "jax") -> dict:
    """Median steps/s over `repeats` timed calls of a jitted scan of `steps` batched env steps."""
    env = registry.load(task, obs_mode="pixels" if render else "state", image_size=image_size,
                        physics_impl=physics_impl)
    reset = jax.jit(jax.vmap(env.reset))

    @jax.jit
    def run(state, rng):
        actions = jax.random.uniform(rng, (steps, num_envs, env.action_size), minval=-1.0, maxval=1.0)
        state, _ = jax.lax.scan(lambda s, a: (jax.vmap(env.step)(s, a), None), state, actions)
        return state

    state = reset(jax.random.split(jax.random.PRNGKey(0), num_envs))
    t0 = time.perf_counter()
    state = jax.block_until_ready(run(state, jax.random.PRNGKey(1)))  # compile + first call
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(run(state, jax.random.PRNGKey(2 + i)))
        times.append(time.perf_counter() - t0)
    sec = float(np.median(times))
    rate = num_envs * steps / sec
    return {
        "env": task,
        "num_envs": num_envs,
        "render": render,
        "physics_impl": physics_impl,
        "steps_per_s": round(rate, 1),
        "physics_steps_per_s": round(rate * env.config.n_substeps, 1),
        "compile_s": round(compile_s, 1),
        "seconds": [round(t, 3) for t in times],
    }


def time_c_mujoco(task: str, num_envs: int, nstep: int, repeats: int) -> tuple[float, int]:
    """C MuJoCo physics steps/s on the same scene: `mujoco.rollout` with one MjData per core."""
    env = registry.load(task, obs_mode="state")
    m = env.mj_model
    nthread = os.cpu_count() or 1
    datas = [mujoco.MjData(m) for _ in range(nthread)]
    # Initial states: the env's randomized resets, copied into MuJoCo's full physics state vector.
    states = jax.device_get(jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), num_envs)))
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    init = np.zeros((num_envs, mujoco.mj_stateSize(m, spec)))
    d = datas[0]
    for i in range(num_envs):
        d.qpos[:] = states.data.qpos[i]
        d.qvel[:] = 0.0
        d.mocap_pos[:] = states.data.mocap_pos[i]
        mujoco.mj_getState(m, d, init[i], spec)
    rng = np.random.default_rng(0)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    control = rng.uniform(lo, hi, size=(num_envs, nstep, m.nu))
    rollout.rollout(m, datas, init, control[:, :2])  # warm-up (thread pool, allocation)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rollout.rollout(m, datas, init, control)
        times.append(time.perf_counter() - t0)
    return num_envs * nstep / float(np.median(times)), nthread


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: pathlib.Path | None = None  # write the results here
    task: str = "goal/put_in_square"
    num_envs: tuple[int, ...] = (16, 64, 256)
    image_size: int = 64
    steps: int = 20  # env steps per timed call
    repeats: int = 3
    physics_impl: tuple[Literal['jax', 'c'], ...] = ("jax",)
    """env physics to time: 'jax' (MJX) and/or 'c' (C MuJoCo through a host callback)"""
    render: bool = True  # time pixel observations too (--no-render: state observations only)


def main(argv: list[str]) -> int:
    args = cli.parse(Args, argv, prog="python -m vlajax.bench env", description=__doc__.splitlines()[0])
    compile_cache.enable()

    load_start = os.getloadavg()
    rows = []
    for n in args.num_envs:
        for physics in args.physics_impl:
            for render in (False, True) if args.render else (False,):
                row = time_env(args.task, n, render, args.image_size, args.steps, args.repeats, physics)
                rows.append(row)
                print(f"{row['env']:22s} num_envs={n:4d} physics={physics:3s} render={render!s:5s} "
                      f"{row['steps_per_s']:10.1f} env steps/s  (compile {row['compile_s']} s)", flush=True)
    n_substeps = registry.load(args.task, obs_mode="state").config.n_substeps
    c_rate, nthread = time_c_mujoco(args.task, max(args.num_envs), args.steps * n_substeps, args.repeats)
    print(f"C MuJoCo mujoco.rollout, {nthread} threads: {c_rate:.0f} physics steps/s "
          f"({c_rate / n_substeps:.0f} env-step equivalents)")

    result = {
        "benchmark": "env",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "load_average_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
            "platform": platform.platform(),
        },
        "jax": jax.__version__,
        "mujoco": mujoco.__version__,
        "backend": jax.default_backend(),
        "render_backend": "jax",
        "image_size": args.image_size,
        "cameras": list(registry.get_default_config().cameras),
        "n_substeps": n_substeps,
        "steps_per_call": args.steps,
        "rows": rows,
        "cpu_mujoco_steps_per_s": round(c_rate, 1),
        "cpu_mujoco_env_steps_per_s": round(c_rate / n_substeps, 1),
        "cpu_mujoco_threads": nthread,
        "cpu_mujoco_num_envs": max(args.num_envs),
    }
    write_result(args.json, result)
    return 0
