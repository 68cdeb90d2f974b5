"""Component costs the planner's model is fed with: measured by `python -m research.planner profile`,
or written by hand (JSON / a preset) for hardware we do not have.

All times are seconds. "Device" is one accelerator (GPU) of the pod, or on a CPU host the host
itself (`shared_compute=True`: every device of the run is the same cores, so inference,
training and in-process simulator compute queue on one resource whatever the placement).

    costs = Costs.from_json(json.load(open(path)))    # or Costs(...) / presets.get(name)
    costs.infer_seconds(rows)                         # one inference call of `rows` env rows
    costs.env_compute_seconds(n)                      # in-process compute of one chunk call of n envs
    costs.train_seconds(samples, devices)             # one optimizer update over `samples` decisions
    costs.comm_seconds(samples, train_devices)        # its gradient synchronization (`comm`; 0 without)
    costs.publish_seconds(train_devices, rollout)     # one weight publication (`comm`, else `sync_s`)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from research.planner.comm import Comm

LOCAL_WINDOW = 5  # calls a jitter factor is compared with (`Costs.local_jitter`): a decision's 4 slot steps and one

__all__ = ["Costs", "SimLatency", "interp"]


def interp(points: dict[int, float] | tuple[tuple[int, float], ...], x: float) -> float:
    """Piecewise-linear in x through the measured (x, seconds) points; linear extrapolation from
    the two outermost points on either side (a single point scales proportionally)."""
    pts = sorted((float(k), float(v)) for k, v in (points.items() if isinstance(points, dict) else points))
    if not pts:
        return 0.0
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0] if pts[0][0] else pts[0][1]
    xs, ys = zip(*pts)
    if x <= xs[0]:
        lo, hi = pts[0], pts[1]
    elif x >= xs[-1]:
        lo, hi = pts[-2], pts[-1]
    else:
        return float(np.interp(x, xs, ys))
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
    return max(lo[1] + slope * (x - lo[0]), 0.0)


@dataclasses.dataclass(frozen=True)
class SimLatency:
    """Simulator wall time per env and control step off the devices (CPU workers, one per env):
    log-normal(median_s, sigma) x tail_scale with prob. tail_prob; a chunk call of an env sums
    its H steps and, with prob. reset_prob, adds reset_s. The same law as
    `vlajax.pipeline.latency.LatencyModel` (what the bench's latency model draws)."""

    median_s: float = 0.0
    sigma: float = 0.0
    tail_prob: float = 0.0
    tail_scale: float = 1.0
    reset_prob: float = 0.0
    reset_s: float = 0.0

    def batch_seconds(self, rng: np.random.Generator, n: int, steps: int) -> float:
        """Wall time of n envs stepped in parallel by `steps` control steps: the slowest env."""
        if n == 0 or self.median_s <= 0:
            return 0.0
        base = self.median_s * np.exp(self.sigma * rng.standard_normal((n, steps)))
        per_env = (base * np.where(rng.random((n, steps)) < self.tail_prob, self.tail_scale, 1.0)).sum(axis=1)
        if self.reset_prob > 0:
            per_env = per_env + self.reset_s * (rng.random(n) < self.reset_prob)
        return float(per_env.max())


_TABLES = ("infer_s", "train_update_s", "env_compute_s", "collect_s", "host_sim_s")


@dataclasses.dataclass(frozen=True)
class Costs:
    """What one workload's components cost on one kind of device (see the module docstring)."""

    infer_s: tuple[tuple[int, float], ...]  # (env rows in one inference call, seconds of the call)
    train_update_s: tuple[tuple[int, float], ...]  # (decisions in one update, seconds on one device)
    prep_s_per_sample: float = 0.0  # preparing a micro-batch (advantages, transfer) per decision
    env_compute_s: tuple[tuple[int, float], ...] = ()  # (envs in one chunk call, in-process compute seconds)
    env_on_device: bool = False  # simulator compute holds the rollout device (GPU simulators, or a CPU host)
    sim: SimLatency = SimLatency()  # off-device simulator wall time (CPU workers / the bench's latency model)
    sync_s: float = 0.0  # weight publication: snapshot -> rollout devices, ready to use (without `comm`)
    allreduce_s: float = 0.0  # per update and doubling of train devices beyond one (data-parallel sync; without `comm`)
    shared_compute: bool = False  # all devices are one host (CPU): every compute queues on one resource
    infer_padded: bool = False  # an inference call costs its full configured batch (our slots pad rows)
    source: str = ""  # where the figures come from
    # -- the production loops on a CPU host (`python -m research.planner profile`); empty / 0 = not used --
    collect_s: tuple[tuple[int, float], ...] = ()  # (envs, seconds of one fused `lax.scan` collect call without
    #   its host simulator calls): sync and train_async roll out through it (rl.loop / the async loop's collect)
    host_sim_s: tuple[tuple[int, float], ...] = ()  # (envs, real seconds of one host simulator call = one control
    #   step of n envs, C MuJoCo in a host callback); a farm delays each call to max(real, slowest of n draws)
    host_calls_per_decision: float = 0.0  # host simulator calls per decision (the executed chunk's control steps)
    stream_item_s: float = 0.0  # streaming: work on each arriving micro-batch (preparation + its gradient)
    stream_finish_s: float = 0.0  # streaming: the closing step (scale + apply the summed gradient)
    cores: float = 1.0  # capacity of a shared host (`shared_compute`) in cores: jobs overlap up to it (measured
    #   on a shared machine in threads' worth: what the process is offered, `plan.profile.capacity`)
    parallelism: tuple[tuple[str, float], ...] = ()  # (component, cores one call of it keeps busy alone);
    #   components: collect, host_sim, infer, step, train, prep, stream_item; missing = 1
    concurrency: tuple[tuple[str, float], ...] = ()  # (group, G): concurrent calls of the group advance at most
    #   G solo-speed units together (measured: the calls from `slots` threads as the lanes run them, serial wall /
    #   threaded wall); group 'step' = a slot's step with its host simulator calls; missing = no cap beyond `cores`
    comm: Comm | None = None  # a model size and the pod's links (`plan.comm`): gradient synchronization and weight
    #   broadcast from bytes and bandwidths, replacing `sync_s` / `allreduce_s`; None = those constants
    jitter: tuple[tuple[str, tuple[float, ...]], ...] = ()  # (component, factors): a call's seconds x one factor
    #   drawn with replacement (`Pipeline.jitter`); the profile's timed calls / their mean (mean 1); components:
    #   step (a slot's step with its host calls), infer (an inference call), step_threaded (a slot's step timed
    #   beside the other slots' in the profile's concurrency rounds; drawn only through `threaded_steps`);
    #   missing = every call the same; step_dispatch (the part of a slot step before it returns to Python, below)
    dispatch_s: tuple[tuple[str, float], ...] = ()  # (component, seconds until a call returns to its Python thread:
    #   JAX dispatches asynchronously, the rest computes after it); component step: a slot's step, whose slot posts
    #   its next request then (`Pipeline.async_dispatch`); part of the step's `env_compute_s`, not in addition

    def __post_init__(self):
        if self.comm is not None and (self.sync_s or self.allreduce_s):
            raise ValueError("give either comm or the constants sync_s / allreduce_s, not both")

    def jitter_factors(self, component: str) -> tuple[float, ...]:
        """The factors a `component` call's seconds are drawn with (`jitter`); () = no variability known."""
        return dict(self.jitter).get(component, ())

    def threaded_steps(self) -> Costs:
        """These costs with the slot steps' factors taken from the steps timed beside each other (component
        `step_threaded`: the profile's concurrency rounds, every slot at once) instead of one after another: the
        spread concurrent steps have among themselves, which the serially timed calls lack (experiments/planner,
        "ninth"). Raises ValueError for a profile without those timings (taken before the option existed)."""
        f = self.jitter_factors("step_threaded")
        if not f:
            raise ValueError("the profile has no per-step timings of its concurrency rounds (step_threaded); "
                             "take it again with this version of `python -m research.planner profile`")
        return dataclasses.replace(self, jitter=tuple((n, f if n == "step" else v) for n, v in self.jitter))

    def local_jitter(self, window: int = LOCAL_WINDOW) -> Costs:
        """These costs with each jitter factor divided by the median of the `window` calls centred on it (the
        profile's order), then scaled to mean 1: only how a call differs from the calls timed beside it. The
        profile times a decision's slot steps one after another; their factors drift together (lag-1
        autocorrelation 0.37-0.75 in prod7-prod9's profiles), and what moves all concurrent calls alike does
        not spread the slots apart -- the drift is in the median costs already (experiments/planner "seventh")."""
        half = window // 2
        out = []
        for name, f in self.jitter:
            a = np.asarray(f, dtype=float)
            local = np.array([a[i] / np.median(a[max(0, i - half):i + half + 1]) for i in range(a.size)])
            out.append((name, tuple(float(x) for x in local / local.mean())))
        return dataclasses.replace(self, jitter=tuple(out))

    def dispatch_seconds(self, component: str) -> float:
        """Seconds until a `component` call returns to Python (`dispatch_s`); 0 = not measured."""
        return dict(self.dispatch_s).get(component, 0.0)

    def cores_of(self, component: str) -> float:
        return dict(self.parallelism).get(component, 1.0)

    def host_sim_seconds(self, n: int) -> float:
        return interp(self.host_sim_s, n) if self.host_sim_s else 0.0

    def collect_seconds(self, n: int) -> float:
        return interp(self.collect_s, n)

    def infer_seconds(self, rows: int) -> float:
        return interp(self.infer_s, rows)

    def env_compute_seconds(self, n: int) -> float:
        return interp(self.env_compute_s, n) if self.env_compute_s else 0.0

    def train_seconds(self, samples: int, devices: int = 1) -> float:
        """One update over `samples` decisions on `devices` data-parallel devices."""
        per_device = interp(self.train_update_s, samples / max(devices, 1))
        return per_device + (self.allreduce_s * math.log2(devices) if devices > 1 else 0.0)

    def comm_seconds(self, samples: int, train_devices: tuple[int, ...]) -> float:
        """Gradient synchronization of one update over `samples` decisions on the GPUs `train_devices`
        (indices in the run): `comm.update_seconds`, 0 without `comm` (then `allreduce_s` is in `train_seconds`)."""
        return self.comm.update_seconds(samples, train_devices) if self.comm is not None else 0.0

    def publish_seconds(self, train_devices: tuple[int, ...], rollout_devices: tuple[int, ...]) -> float:
        """One weight publication, train group -> rollout devices: `comm.broadcast_seconds`, else `sync_s`."""
        return self.comm.broadcast_seconds(train_devices, rollout_devices) if self.comm is not None else self.sync_s

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in _TABLES:
            d[k] = [list(p) for p in d[k]]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Costs:
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown cost fields {sorted(unknown)}")
        d = dict(d)
        for k in _TABLES:
            if k in d:
                d[k] = tuple((int(a), float(b)) for a, b in d[k])
        for k in ("parallelism", "concurrency", "dispatch_s"):
            if k in d:
                d[k] = tuple((str(a), float(b)) for a, b in d[k])
        if "jitter" in d:
            d["jitter"] = tuple((str(a), tuple(float(x) for x in b)) for a, b in d["jitter"])
        if "sim" in d:
            d["sim"] = SimLatency(**d["sim"])
        if d.get("comm") is not None:
            unknown = set(d["comm"]) - {f.name for f in dataclasses.fields(Comm)}
            if unknown:
                raise ValueError(f"unknown comm fields {sorted(unknown)}")
            d["comm"] = Comm(**d["comm"])
        return cls(**d)
