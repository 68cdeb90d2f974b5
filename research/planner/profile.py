"""`python -m research.planner profile --out RUN_DIR`: measure the component costs of `bench async`'s production
workload.

Builds the workload `python -m vlajax.bench async` runs (`vlajax.bench.async_loops.run_config`:
the same preset, envs, slots, horizon, width, one PPO epoch over one minibatch of `slots`
micro-batches; flags as `bench async`'s, or `--from-bench JSON` to take them from a bench JSON's
`meta`) and times, on this machine, with the code the production loops run, each piece alone
(nothing overlapping), for each `--physics` (`jax` = MJX, `c` = C MuJoCo, no farm):

- `collect`: the synchronous loop's jitted fused collect (`rl.setup.collect`, the `lax.scan`
  rollout over all envs + advantages + the learner batch; sync and train_async roll out through
  it), and with C MuJoCo the real seconds and count of its host simulator calls
  (`c_physics.host_timing`, as the bench records them);
- `infer` / `step`: the slot modes' per-decision calls (`rl.async_workload.RLWorkload.env`:
  the slots' batched `actor.sample`, padded to the slot count; one slot's `step`), with the
  host simulator calls of a step;
- the trainer (`rl.async_workload.Trainer` around the loop's sharded, donated `learner.update`):
  one update on a collect batch (sync, train_async), one non-streaming update on `slots` slot
  segments (preparation included), one slot segment's preparation alone, and streaming's
  per-arrival work (preparation + gradient + accumulation) and its closing step;
- a weight publication (the param server's snapshot copy + `device_put` onto the rollout
  sharding, completed);
- the slot steps' concurrency (`step_concurrency`): every slot's steps from its own thread, as
  the slot lanes run them, against the same calls one after the other. Python's GIL (each step
  dispatches jitted and eager calls from Python, and C MuJoCo's host callback runs Python around
  its native step) can serialize them beyond what the cores would: the model caps concurrent
  slot steps at the measured ratio (`Costs.concurrency`, `sim._Shared`).

Every call is timed in wall seconds and in this process's CPU seconds. On a shared machine the
process is not offered all its cores, so the profile also probes what it gets (`_probe`, before
and after the calls): the CPU/wall of one busy thread of GIL-free native work, and of
`PROBE_THREADS` such threads. Costs count cores in threads' worth: the host's capacity is the
ratio of the two probes (between 1 and the cores this process may use: `capacity`), a call's
parallelism is its CPU/wall over one thread's (`Costs.parallelism`; the host simulator calls run
on one thread: 1). The costs are the `--statistic`-of-the-calls after a compiling round (the
statistic is fixed when the profile is read, `load`). Writes `RUN_DIR/profile.json`:
`{"workload", "raw": per-call seconds and the probes, "costs": {"jax": Costs, "c": Costs},
"uptime_before/after", ...}`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import os
import pathlib
import subprocess
import tempfile
import threading
import time
from typing import Literal

import jax
import numpy as np

from research.planner.costs import Costs
from vlajax.shared import cli

__all__ = ["main", "load", "profile", "costs_from_raw", "capacity", "step_concurrency", "STATISTICS", "HOSTS"]

STATISTICS = ("median", "min")
HOSTS = ("probed", "affinity")


def _stat(xs: list[float], statistic: str = "median") -> float:
    return float(np.median(xs) if statistic == "median" else np.min(xs))


class _Clock:
    """Per-call wall and process-CPU seconds into `raw[name]` / `raw[name + '@cpu']`."""

    def __init__(self, raw: dict[str, list[float]]):
        self.raw = raw

    @contextlib.contextmanager
    def __call__(self, name: str, keep: bool = True):
        t0, c0 = time.perf_counter(), time.process_time()
        yield
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if keep:
            self.raw.setdefault(name, []).append(wall)
            self.raw.setdefault(name + "@cpu", []).append(cpu)


def _cores(raw: dict, name: str, cores: float, host: str | None = None, thread: float = 1.0) -> float:
    """Median over calls of the cores a call kept busy, in threads' worth (`thread`: the CPU/wall one
    busy thread got, `capacity`): CPU s / wall s / thread (with `host`: the call's host simulator
    seconds, one thread's, taken out of both)."""
    wall, cpu = np.asarray(raw[name]), np.asarray(raw[name + "@cpu"])
    if host is not None:
        h = np.asarray(raw[host])
        wall, cpu = wall - h, cpu - h * thread
    return float(np.clip(np.median(cpu / np.maximum(wall, 1e-9)) / thread, 0.05, cores))


def _concurrency(raw: dict, physics: str, slots: int) -> float | None:
    """Solo-speed steps the slots' concurrent steps advance at together: median serial wall / median
    threaded wall of the same calls (`step_concurrency`), in [1/slots, slots]; None without that
    measurement (older profiles: no cap)."""
    if f"{physics}/steps_threads" not in raw:
        return None
    ratio = float(np.median(raw[f"{physics}/steps_serial"]) / np.median(raw[f"{physics}/steps_threads"]))
    return float(np.clip(ratio, 1.0 / slots, slots))


def _relative(xs: list[float]) -> tuple[float, ...]:
    """Per-call seconds as factors of their mean (the spread of the calls, mean 1: `Costs.jitter`)."""
    a = np.asarray(xs, dtype=float)
    return tuple(float(x) for x in a / a.mean())


def capacity(raw: dict, cores: float) -> tuple[float, float]:
    """(host capacity in threads' worth, CPU/wall of one busy thread) from the profile's probes.

    On a shared machine this process is not offered `cores` cores: the probes (`_probe`) run 1 and
    `PROBE_THREADS` threads of GIL-free native work (C MuJoCo batch steps) and read the process's
    CPU s / wall s. One thread's figure is what a single-threaded call got when profiled alone; the
    capacity is how many such threads' worth the process gets when it keeps many busy: their
    ratio, between 1 and `cores`. Without probes (older profiles): (cores, 1)."""
    if "probe/one_thread" not in raw:
        return cores, 1.0
    one, many = float(np.median(raw["probe/one_thread"])), float(np.median(raw["probe/threads"]))
    return float(np.clip(many / max(one, 1e-9), 1.0, cores)), one


def costs_from_raw(raw: dict[str, list[float]], wl: dict, cores: float, statistic: str = "median") -> dict[str, Costs]:
    """Per physics, the `Costs` of the per-call seconds in `raw` (timed calls only: the compiling
    round is not in `raw`). `statistic`: 'median' of the calls, or 'min' (the least disturbed call)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    st = functools.partial(_stat, statistic=statistic)
    cores, thread = capacity(raw, cores)
    _c = functools.partial(_cores, cores=cores, thread=thread)
    envs, slots, horizon = wl["envs"], wl["slots"], wl["horizon"]
    decisions = envs * horizon
    update = st(raw["train/update"])
    slots_update = st(raw["train/slots_update"])
    par_train = {"train": _c(raw, "train/update"), "prep": _c(raw, "train/prepare"),
                 "stream_item": _c(raw, "train/stream_item")}
    out = {}
    for physics in sorted({k.split("/")[0] for k in raw} - {"train", "sync", "probe"}):
        c = physics == "c"
        collect = st(raw[f"{physics}/collect"])
        host = {}
        if c:  # host simulator seconds and calls, of a collect (16 envs) and of a slot's step
            n_col = st(raw["c/collect_host_calls"])
            n_step = st(raw["c/step_host_calls"])
            host = {envs: st(raw["c/collect_host"]) / n_col, envs // slots: st(raw["c/step_host"]) / n_step}
            collect -= st(raw["c/collect_host"])
            calls_per_decision = n_col / horizon
            if abs(n_step - calls_per_decision) > 1e-9:
                raise ValueError(f"host calls per decision differ: collect {calls_per_decision}, slot step {n_step}")
        par = par_train | {
            "collect": _c(raw, f"{physics}/collect", host="c/collect_host" if c else None),
            "infer": _c(raw, f"{physics}/infer"),
            "step": _c(raw, f"{physics}/step", host="c/step_host" if c else None),
            "host_sim": 1.0}
        conc = _concurrency(raw, physics, slots)
        out[physics] = Costs(
            infer_s=((envs, st(raw[f"{physics}/infer"])),),  # slot infer: padded to all slots' envs
            train_update_s=((decisions, update),),
            prep_s_per_sample=max(slots_update - update, 0.0) / decisions,  # what the slot path adds to the update
            env_compute_s=((envs // slots, st(raw[f"{physics}/step"])),), env_on_device=True,
            sync_s=st(raw["sync/publish"]), shared_compute=True, infer_padded=True,
            collect_s=((envs, collect),), host_sim_s=tuple(sorted(host.items())),
            host_calls_per_decision=calls_per_decision if c else 0.0,
            stream_item_s=st(raw["train/stream_item"]), stream_finish_s=st(raw["train/stream_finish"]),
            cores=cores, parallelism=tuple(sorted(par.items())),
            concurrency=() if conc is None else (("step", conc),),
            jitter=tuple((name, _relative(raw[f"{physics}/{name}"]))
                         for name in ("infer", "step", "step_threaded", "step_dispatch") if f"{physics}/{name}" in raw),
            dispatch_s=((("step", st(raw[f"{physics}/step_dispatch"])),) if f"{physics}/step_dispatch" in raw else ()),
            source=f"python -m research.planner profile ({physics} physics, {statistic} of the calls)")
    return out


PROBE_THREADS = 4  # threads of the many-thread probe (>= the cores, so the process asks for all of them)


def _probe(raw: dict, rounds: int = 3, seconds: float = 0.25) -> None:
    """Append `rounds` x (CPU/wall of 1 thread, of `PROBE_THREADS` threads) of GIL-free native work
    (C MuJoCo `mujoco.batch` steps of the tabletop scene, one batch per thread) to `raw` (see `capacity`)."""
    import threading

    import mujoco
    import mujoco.batch

    from vlajax.envs import registry

    model = registry.load("goal/stack", physics_impl="c", obs_mode="state").mj_model
    batches = [mujoco.batch.Batch(model, 4, nthread=1) for _ in range(PROBE_THREADS)]
    for b in batches:
        b.reset()

    def busy(k: int) -> float:
        stop = time.perf_counter() + seconds

        def run(b):
            while time.perf_counter() < stop:
                b.step(nstep=20)  # ~1-2 ms in C without the GIL

        ts = [threading.Thread(target=run, args=(b,)) for b in batches[:k]]
        t0, c0 = time.perf_counter(), time.process_time()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return (time.process_time() - c0) / (time.perf_counter() - t0)

    for _ in range(rounds):
        raw.setdefault("probe/one_thread", []).append(busy(1))
        raw.setdefault("probe/threads", []).append(busy(PROBE_THREADS))


def _threads_wall(fns) -> float:
    """Wall seconds of every fn in its own thread, all started together."""
    ts = [threading.Thread(target=f) for f in fns]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def step_concurrency(raw: dict, physics: str, step, envs_of: dict, outs, slots: int, horizon: int,
                      repeats: int) -> None:
    """The slot steps as the slot lanes run them: each slot's `horizon` step calls back to back in its
    own thread (no mesh context, like the lanes), all slots at once; and the same calls one after the
    other in one thread. Appends the wall seconds of each to `raw[physics + '/steps_threads']` and
    `[.. '/steps_serial']` (`repeats` rounds after a compiling one, interleaved): serial / threaded is
    how many solo-speed steps run at once (`Costs.concurrency` 'step'; `plan contention` reports it too).
    Each step of the threaded rounds is timed too, as it ran beside the other slots' steps, in the order the
    steps ended: `raw[physics + '/step_threaded']` (the spread `plan validate --threaded-step-jitter` draws)."""
    block = jax.block_until_ready
    threaded: list[float] = []  # list.append is atomic: the slot threads append their steps' seconds

    def steps_of(s: int, times: list[float] | None = None):
        def run():
            env_state, payload = envs_of[s]
            for _ in range(horizon):
                t0 = time.perf_counter()
                env_state, payload, _ = block(step(s, env_state, outs[s]))
                if times is not None:
                    times.append(time.perf_counter() - t0)
            envs_of[s] = (env_state, payload)
        return run

    def serial():
        for s in range(slots):
            steps_of(s)()

    for r in range(1 + repeats):
        threaded.clear()
        t_serial = _threads_wall([serial])
        t_threads = _threads_wall([steps_of(s, threaded) for s in range(slots)])
        if r > 0:
            raw.setdefault(f"{physics}/steps_serial", []).append(t_serial)
            raw.setdefault(f"{physics}/steps_threads", []).append(t_threads)
            raw.setdefault(f"{physics}/step_threaded", []).extend(threaded)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def profile(a: Args, wl: dict) -> dict:
    import jax.numpy as jnp

    import vlajax.config.presets  # noqa: F401  (registers the presets)
    from vlajax.bench.async_loops import run_config
    from vlajax.config.schema import get_config
    from vlajax.envs.tabletop import c_physics
    from vlajax.pipeline.buffer import Trajectory
    from vlajax.pipeline.slots import _stack
    from vlajax.rl import learner
    from vlajax.rl import setup as rl_setup
    from vlajax.rl.async_workload import RLWorkload, Trainer
    from vlajax.training import sharding
    from vlajax.training.train_state import TrainState

    uptime_before = _uptime()
    base = dataclasses.replace(get_config(wl["preset"]), seed=a.seed)
    raw: dict[str, list[float]] = {}
    _probe(raw)  # what this process is offered, before and after the calls
    clock = _Clock(raw)
    block = jax.block_until_ready
    tmp = tempfile.mkdtemp(prefix="plan_profile_")
    envs, slots, horizon = wl["envs"], wl["slots"], wl["horizon"]
    kw = dict(envs=envs, slots=slots, horizon=horizon, width=wl["width"], updates=2,
              max_wait_ms=wl.get("max_wait_ms", 2.0), out_dir=tmp)
    for physics in a.physics:
        regime = "mjx" if physics == "jax" else "cpu-sim"
        cfg = run_config(base, regime, "sync", **kw)
        cfg_slots = run_config(base, regime, "+streaming", **kw)
        setup = rl_setup.build(cfg)
        wl["action_horizon"] = setup.action_horizon
        mesh, rules = sharding.make_mesh(cfg.mesh), cfg.mesh.logical_rules
        tx = learner.make_optimizer(cfg.rl)
        init = lambda rng: TrainState.create(setup.init_params(rng), tx, jax.random.fold_in(rng, 1))  # noqa: B023
        state, shardings = sharding.init_sharded(init, mesh, rules, jax.random.key(cfg.seed))
        # the loops' own jitted steps (rl.loop.train / rl.async_loop.train_async)
        collect_fn = jax.jit(functools.partial(rl_setup.collect, cfg, setup), donate_argnums=(1,))
        update_fn = jax.jit(functools.partial(learner.update, cfg.rl, setup.actor.logp_value),
                            in_shardings=(None, shardings, None), out_shardings=(shardings, None), donate_argnums=(1,))
        timing_cm = c_physics.host_timing() if physics == "c" else contextlib.nullcontext()
        with sharding.use_mesh(mesh, rules), timing_cm as tm:
            host = lambda: (tm.real_s, tm.calls) if tm is not None else (0.0, 0)  # noqa: B023
            env_state = rl_setup.place_env_state(
                jax.jit(functools.partial(rl_setup.initial_env_state, cfg, setup.env))(), mesh)
            # -- the fused collect ------------------------------------------------------------
            batch = None
            for call in range(1 + a.repeats):
                k_collect, _ = rl_setup.iteration_keys(cfg.seed, call)
                h0 = host()
                with clock(f"{physics}/collect", keep=call > 0):
                    env_state, batch, roll = collect_fn(state.params, env_state, k_collect, jnp.int32(call))
                    block((env_state, batch))
                    jax.device_get(roll)
                if call > 0 and tm is not None:
                    raw.setdefault("c/collect_host", []).append(host()[0] - h0[0])
                    raw.setdefault("c/collect_host_calls", []).append(float(host()[1] - h0[1]))
            # -- the slot modes' per-decision calls ----------------------------------------------
            work = RLWorkload(cfg_slots, setup)
            reset, step, infer = work.env(slots, None)
            envs_of = {s: reset(s) for s in range(slots)}
            records = {s: [] for s in range(slots)}
            for seg in range(1 + a.repeats):
                records = {s: [] for s in range(slots)}
                for _ in range(horizon):
                    with clock(f"{physics}/infer", keep=seg > 0):
                        outs = block(infer(state.params, [envs_of[s][1] for s in range(slots)]))
                    for s, out in zip(range(slots), outs):
                        h0 = host()
                        with clock(f"{physics}/step", keep=seg > 0):
                            t0 = time.perf_counter()
                            dispatched = step(s, envs_of[s][0], out)  # returns once dispatched (JAX async)
                            t_dispatch = time.perf_counter() - t0
                            env_state_s, payload, rec = block(dispatched)
                        if seg > 0:
                            raw.setdefault(f"{physics}/step_dispatch", []).append(t_dispatch)
                        if seg > 0 and tm is not None:
                            raw.setdefault("c/step_host", []).append(host()[0] - h0[0])
                            raw.setdefault("c/step_host_calls", []).append(float(host()[1] - h0[1]))
                        envs_of[s] = (env_state_s, payload)
                        records[s].append(rec)
            step_concurrency(raw, physics, step, envs_of, outs, slots, horizon, a.concurrency_repeats or a.repeats)
            per = envs // slots
            items = [Trajectory(_stack(records[s]), np.zeros(horizon, np.int32), per * horizon,
                                horizon * per * setup.action_horizon) for s in range(slots)]
            if physics != a.physics[0]:
                continue
            # -- the trainer (once: the same model and batch shapes whatever the physics) ---------
            col_item = [Trajectory(batch, np.zeros(1, np.int32), envs * horizon, envs * horizon * setup.action_horizon)]
            tr = Trainer(cfg, setup.actor, None, False, True, prepare=None, update_fn=update_fn)
            for call in range(1 + a.repeats):
                with clock("train/update", keep=call > 0):
                    state, _ = tr(state, iter(col_item))
                    block(state.params)
            tr = Trainer(cfg_slots, setup.actor, None, False, True, prepare=work._prepare, update_fn=update_fn)
            for call in range(1 + a.repeats):
                with clock("train/slots_update", keep=call > 0):
                    state, _ = tr(state, iter(items))
                    block(state.params)
                with clock("train/prepare", keep=call > 0):
                    block(work._prepare(items[call % slots].data))
            tr = Trainer(cfg_slots, setup.actor, None, True, True, prepare=work._prepare, update_fn=update_fn)
            for call in range(1 + a.repeats):
                k_update = rl_setup.iteration_keys(cfg.seed, call)[1]
                acc = None
                for i, item in enumerate(items):
                    with clock("train/stream_item", keep=call > 0):
                        out = tr._grads(state.params, tr._batch(item), jax.random.fold_in(k_update, i))
                        acc = block(out if acc is None else tr._add(acc, out))
                with clock("train/stream_finish", keep=call > 0):
                    state, m = tr._finish(state, *acc)
                    jax.device_get(m)
                with clock("train/stream_update", keep=call > 0):  # the whole streaming update (a cross-check)
                    state, _ = tr(state, iter(items))
                    block(state.params)
            # -- a weight publication: the param server's snapshot + device_put onto the rollout sharding
            snap = jax.jit(lambda t: jax.tree.map(jnp.copy, t))
            for call in range(1 + a.repeats):
                with clock("sync/publish", keep=call > 0):
                    block(jax.device_put(snap(state.params), shardings.params))
    _probe(raw)
    cores = float(len(os.sched_getaffinity(0)))
    costs = {k: c.to_json() for k, c in costs_from_raw(raw, wl, cores, a.statistic).items()}
    capacity_threads, thread_cpu_per_wall = capacity(raw, cores)
    return {"workload": wl, "slots": slots, "costs": costs, "statistic": a.statistic, "raw": raw,
            "command": "", "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "uptime_before": uptime_before, "uptime_after": _uptime(),
            "machine": {"cpu_count": os.cpu_count(), "cores": cores, "devices": jax.device_count(),
                        "capacity_threads": capacity_threads, "thread_cpu_per_wall": thread_cpu_per_wall,
                        "loadavg_1m": os.getloadavg()[0]}}


def profile_paths(run_dirs) -> list[pathlib.Path]:
    """`RUN_DIR/profile.json` of one run directory (a str or path) or of each of several."""
    dirs = [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else list(run_dirs)
    return [pathlib.Path(r) / "profile.json" for r in dirs]


def pooled(run_dirs) -> dict:
    """`RUN_DIR/profile.json` of one run directory, or of several profiles of one workload pooled: each
    timed quantity's samples of all of them together (the statistic is then taken over the pool)."""
    paths = profile_paths(run_dirs)
    dirs = [p.parent for p in paths]
    ds = [json.loads(p.read_text()) for p in paths]
    d = ds[0]
    for r, other in zip(dirs[1:], ds[1:]):
        if other["workload"] != d["workload"] or other["machine"]["cores"] != d["machine"]["cores"]:
            raise ValueError(f"{r}: another workload or host than {dirs[0]}; profiles pool only of one workload")
    if len(ds) == 1:
        return d
    raw: dict[str, list[float]] = {}
    for other in ds:
        for k, v in other["raw"].items():
            raw.setdefault(k, []).extend(v)
    return d | {"raw": raw, "pooled_from": [str(r) for r in dirs]}


def load(run_dir, physics: str, statistic: str = "median", host: str = "probed") -> Costs:
    """The `Costs` of `physics` ('jax' | 'c') from `RUN_DIR/profile.json` -- or from several run
    directories' profiles pooled (`pooled`) -- recomputed from the per-call seconds with `statistic`
    (see `costs_from_raw`). `host`: 'probed' (the capacity the profile's probes measured,
    `capacity`) or 'affinity' (all the cores the process may use, each thread a whole core: the
    model before the probes)."""
    if host not in HOSTS:
        raise ValueError(f"host must be one of {HOSTS}, got {host!r}")
    d = pooled(run_dir)
    path = ", ".join(map(str, profile_paths(run_dir)))
    raw = d["raw"] if host == "probed" else {k: v for k, v in d["raw"].items() if not k.startswith("probe/")}
    costs = costs_from_raw(raw, d["workload"], d["machine"]["cores"], statistic)
    if physics not in costs:
        raise ValueError(f"{path} has no costs for physics {physics!r} (has {sorted(costs)})")
    return costs[physics]


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment); workload flags as `bench async`'s."""

    out: str  # run directory; writes profile.json there
    from_bench: str = ""  # take the workload (preset, envs, slots, horizon, width, max_wait_ms) from a bench JSON
    preset: str = "rl-debug"  # the TrainConfig preset the workload starts from
    envs: int = 16  # env.num_envs
    slots: int = 4  # env slots of the slot modes; micro-batches of every mode's update
    horizon: int = 8  # rl.rollout_length
    width: int = 256  # model.width of the MLP actor and critic
    max_wait_ms: float = 2.0  # dynamic batching of the slot modes (recorded; not timed)
    physics: tuple[Literal["jax", "c"], ...] = ("jax", "c")  # simulators to time (jax = the mjx regime, c = cpu-sim)
    repeats: int = 7  # timed rounds after the compiling one
    # timed rounds of the slot steps' concurrency (0: --repeats); C MuJoCo's ratio is noisy per round: three
    # 28-round profiles agreed within 0.03 where 7-round blocks spread 1.08-1.38 (experiments/planner, "fifth")
    concurrency_repeats: int = 0
    statistic: Literal["median", "min"] = "median"  # of the calls, for the printed costs (validate re-reads raw)
    seed: int = 0


def main(argv: list[str]) -> int:
    a = cli.parse(Args, argv, prog="python -m research.planner profile", description=__doc__.splitlines()[0])
    if a.from_bench:
        if not os.path.isfile(a.from_bench):
            cli.error(f"--from-bench {a.from_bench}: no such file")
        meta = json.loads(pathlib.Path(a.from_bench).read_text())["meta"]
        w = meta["workload"]
        wl = {k: w[k] for k in ("preset", "envs", "slots", "horizon", "width")}
        wl["max_wait_ms"] = meta.get("max_wait_ms", 2.0)
    else:
        wl = {"preset": a.preset, "envs": a.envs, "slots": a.slots, "horizon": a.horizon, "width": a.width,
              "max_wait_ms": a.max_wait_ms}
    if wl["slots"] < 1 or wl["envs"] % wl["slots"] or a.repeats < 1 or not a.physics:
        cli.error("--envs must split into --slots, --repeats must be >= 1 and --physics non-empty")
    if a.concurrency_repeats < 0:
        cli.error(f"--concurrency-repeats must be >= 0 (0: --repeats), got {a.concurrency_repeats}")
    result = profile(a, wl)
    result["command"] = "python -m research.planner profile " + " ".join(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.json").write_text(json.dumps(result, indent=1) + "\n")
    for physics, c in result["costs"].items():
        print(f"{physics}: " + json.dumps({k: v for k, v in c.items() if k != "source"}))
    print(f"{result['uptime_before']}\n{result['uptime_after']}\nwrote {out / 'profile.json'}")
    return 0
