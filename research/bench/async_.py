"""The bench-only slot path of the async pipeline (superseded as `python -m vlajax.bench async`).

`python -m vlajax.bench async` now runs the production loops (`vlajax.bench.async_loops`). This
module keeps the earlier per-decision path -- `run_one` drives `SlotRollout.sample_step` through
`run_sync` / `AsyncRunner` directly, with the RL core (`rl_workload`) or a stand-in (`StandIn`)
behind the `Workload` interface -- because other code still uses it: `research.bench.soak`
(`StandIn`, `mode_config`, `rl_workload`), `research.planner.profile` (`rl_workload`) and the async
experiments (`experiments/async_common.py`: `rl_workload`, `run_one`). It has no command line;
the JSONs it wrote (the older `results/bench/async*.json`) are superseded by the production loops' grids.

The modes (`MODES`, `mode_config`):

| mode                        | rollout                       | staleness | streaming | partial |
|-----------------------------|-------------------------------|-----------|-----------|---------|
| sync                        | all envs in one batch         | -         | -         | -       |
| train_async                 | all envs in one batch, 1 lane | 1         | no        | no      |
| rollout_async               | `slots` env slots + batching  | 0         | no        | no      |
| train_async+rollout_async   | slots                         | 1         | no        | no      |
| +streaming                  | slots                         | 1         | yes       | no      |
| +partial_rollout            | slots                         | 1         | yes       | yes     |

`run_one(workload, regime, placement, mode, ...)`: regime `mjx` (the env step as the workload
builds it) or `cpu_longtail` (each env batch also takes the wall time of its slowest env under
a `LatencyModel`, around C MuJoCo with `longtail_physics='c'`); one row with env_steps_per_s,
idle ratios and staleness after a warm-up update.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import SingleDeviceSharding

from vlajax.config.schema import AsyncConfig, MeshConfig, get_config
from vlajax.pipeline.latency import LatencyModel, with_latency
from vlajax.pipeline.metrics import Timeline, summarize
from vlajax.pipeline.placement import make_placement
from vlajax.pipeline.runner import AsyncRunner, run_sync
from vlajax.pipeline.slots import SlotRollout
from vlajax.rl.async_workload import RLWorkload
from vlajax.rl.setup import build
from vlajax.shared import compile_cache
from vlajax.training.train_state import TrainState

MODES = ("sync", "train_async", "rollout_async", "train_async+rollout_async", "+streaming", "+partial_rollout")


class Workload(Protocol):
    """What the benchmark needs from a workload; the RL core's PPO on the tabletop suite plugs in here.

    envs: total envs (split into `num_slots` slots); horizon: decisions per segment;
    steps_per_decision: low-level env steps per decision and env (the action chunk H).
    """

    envs: int
    horizon: int
    steps_per_decision: int

    def init_state(self, seed: int) -> Any: ...

    def env(self, num_slots: int, latency: LatencyModel | None, physics_impl: str | None = None
            ) -> tuple[Callable, Callable, Callable]:
        """(reset, step, infer) for `SlotRollout` with `envs // num_slots` envs per slot; `physics_impl`
        picks the simulator of a workload that has several (the RL workload: 'jax' MJX or 'c')."""

    def trainer(self, device: Any, streaming: bool, require_batches: int) -> Callable:
        """train_step(state, micro_batches) -> (state, metrics) on `device`, `require_batches` per update."""

    def get_params(self, state: Any) -> Any: ...


# ----------------------------------------------------------------------------------------
# The stand-in workload
# ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StandIn:
    """MLP Gaussian policy on a point-mass env; REINFORCE over `epochs` passes; Adam."""

    envs: int = 32  # total envs (split into slots in the slot modes)
    horizon: int = 8  # decisions per segment
    obs: int = 16
    act: int = 4
    hidden: int = 512
    epochs: int = 32  # passes over each micro-batch (PPO-style update epochs)
    std: float = 0.5

    def init_state(self, seed: int = 0) -> TrainState:
        k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
        p = {"w1": jax.random.normal(k1, (self.obs, self.hidden)) / np.sqrt(self.obs),
             "w2": jax.random.normal(k2, (self.hidden, self.hidden)) / np.sqrt(self.hidden),
             "w3": 0.01 * jax.random.normal(k3, (self.hidden, self.act))}
        return TrainState.create(p, optax.adam(1e-3), jax.random.key(seed + 1))

    def mean(self, p, x):
        return jnp.tanh(jnp.tanh(x @ p["w1"]) @ p["w2"]) @ p["w3"]

    def loss(self, p, batch):
        logp = -0.5 * jnp.sum(((batch["act"] - self.mean(p, batch["obs"])) / self.std) ** 2, -1)
        adv = batch["rew"] - batch["rew"].mean()
        return -jnp.mean(logp * adv)


def _make_fns(w: StandIn):
    @jax.jit
    def policy(p, x, keys):
        mean = w.mean(p, x)
        return mean + w.std * jax.vmap(lambda k: jax.random.normal(k, mean.shape[1:]))(keys)

    @jax.jit
    def advance(x, a, key):
        x = 0.9 * x + 0.2 * jnp.pad(a, ((0, 0), (0, w.obs - w.act))) + 0.05 * jax.random.normal(key, x.shape)
        return x, -jnp.sum(x**2, -1)

    @jax.jit
    def grads(p, batch):  # `epochs` inner SGD passes (PPO-style); returns the summed gradients
        def body(_, carry):
            q, acc = carry
            g = jax.grad(w.loss)(q, batch)
            return jax.tree.map(lambda x, y: x - 1e-3 * y, q, g), jax.tree.map(jnp.add, acc, g)
        return jax.lax.fori_loop(0, w.epochs, body, (p, jax.tree.map(jnp.zeros_like, p)))[1]

    add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
    apply = jax.jit(lambda s, g: s.apply_gradients(g), donate_argnums=0)
    return policy, advance, grads, add, apply


class StandInWorkload:
    """`StandIn` behind the `Workload` interface (jitted functions built once)."""

    def __init__(self, spec: StandIn):
        self.spec, self.fns = spec, _make_fns(spec)
        self.envs, self.horizon, self.steps_per_decision = spec.envs, spec.horizon, 1

    def init_state(self, seed: int) -> TrainState:
        return self.spec.init_state(seed)

    def env(self, num_slots: int, latency: LatencyModel | None, physics_impl: str | None = None):
        if physics_impl not in (None, "jax"):  # the point-mass env is plain JAX
            raise ValueError(f"the stand-in workload has no physics_impl {physics_impl!r}")
        return make_env(self.spec, self.fns, num_slots, latency)

    def trainer(self, device: Any, streaming: bool, require_batches: int = 1) -> Trainer:
        return Trainer(self.fns, device, streaming)

    def get_params(self, state: TrainState) -> Any:
        return state.params


def make_env(w: StandIn, fns, num_slots: int, latency: LatencyModel | None, seed: int = 0):
    policy, advance, *_ = fns
    per_slot = w.envs // num_slots
    root = jax.random.key(seed)

    def reset(slot):
        x = jax.random.normal(jax.random.fold_in(root, slot), (per_slot, w.obs))
        return (x, 0), {"x": x, "key": jax.random.fold_in(root, 10_000 + slot)}

    def step(slot, state, action):
        x, t = state
        x2, rew = advance(x, action, jax.random.fold_in(jax.random.fold_in(root, 20_000 + slot), t))
        rec = {"obs": x, "act": action, "rew": rew}
        return (x2, t + 1), {"x": x2, "key": jax.random.fold_in(jax.random.fold_in(root, 30_000 + slot), t)}, rec

    def infer(p, payloads):  # padded to num_slots rows: one static shape, one compile
        rows = payloads + [payloads[-1]] * (num_slots - len(payloads))
        out = policy(p, jnp.stack([q["x"] for q in rows]), jnp.stack([q["key"] for q in rows]))
        return list(out[: len(payloads)])

    if latency is not None:
        step = with_latency(step, latency, per_slot, seed)
    return reset, step, infer


class Trainer:
    """train_step: one Adam update from the summed gradients of the micro-batches.

    streaming: a gradient per micro-batch as it arrives; otherwise the micro-batches are
    concatenated (along the env axis) into one batch, as the synchronous loop computes it.
    """

    def __init__(self, fns, device, streaming: bool):
        self.grads, self.add, self.apply = fns[2], fns[3], fns[4]
        self.device, self.streaming = device, streaming

    def __call__(self, state, micro_batches):
        if not self.streaming:
            items = list(micro_batches)
            data = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *[it.data for it in items])
            micro_batches = [dataclasses.replace(items[0], data=data)]
        acc = None
        for item in micro_batches:
            g = self.grads(state.params, jax.device_put(item.data, self.device))
            acc = g if acc is None else self.add(acc, g)
        state = self.apply(state, acc)
        jax.block_until_ready(state.params)
        return state, {}


def rl_workload(preset: str, *, envs: int, horizon: int, width: int, update_epochs: int = 1, minibatches: int = 1):
    """The RL core as a bench workload: `preset` with `envs` envs, `horizon` decisions per segment,
    an MLP of `width`, `update_epochs` PPO epochs over `minibatches` minibatches per update.

    With one epoch over one minibatch (the default) the streaming modes run the RL core's
    gradient-on-arrival update, which is the same optimizer update as the other modes'. With more
    (`spec['grad_streaming']` False) that update does not exist (epoch 2 needs the whole batch):
    the streaming modes then prepare each micro-batch (device transfer, advantages) as it
    arrives and run the same epochs x minibatches update as every other mode once the window is
    complete (verl's streaming: samples flow to the trainer one by one). -> (workload, spec)."""

    cfg = get_config(preset)
    compile_cache.enable(cfg.compilation_cache_dir)
    cfg = dataclasses.replace(
        # MJX unless a caller passes `physics_impl` to the workload's `env` (bench async's regimes do); the
        # published figures ran on it (before the config default became 'auto')
        cfg, env=dataclasses.replace(cfg.env, num_envs=envs, physics_impl="jax"),
        model=dataclasses.replace(cfg.model, width=width),
        rl=dataclasses.replace(cfg.rl, rollout_length=horizon, update_epochs=update_epochs,
                               num_minibatches=minibatches, micro_batches=1,
                               normalize_advantages="none"))  # streaming and non-streaming: the same update
    spec = {"preset": preset, "task": cfg.env.task or cfg.env.suite, "obs_mode": cfg.env.obs_mode, "envs": envs,
            "horizon": horizon, "action_horizon": cfg.model.action_horizon, "width": width, "depth": cfg.model.depth,
            "episode_length": cfg.env.episode_length, "algo": cfg.rl.algo, "update_epochs": update_epochs,
            "minibatches": minibatches, "grad_streaming": update_epochs * minibatches == 1}
    return RLWorkload(cfg, build(cfg)), spec


# ----------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------


def mode_config(mode: str, slots: int, placement: str, ratio: str, max_wait_ms: float = 2.0
                ) -> tuple[AsyncConfig, int]:
    """(config, num_slots) of a mode."""
    async_rollout = mode not in ("sync", "train_async")
    n = slots if async_rollout else 1
    cfg = AsyncConfig(
        enabled=mode != "sync", placement=placement, placement_ratio=ratio, num_slots=n, require_batches=n,
        staleness_threshold=0.0 if mode in ("sync", "rollout_async") else 1.0,
        streaming=mode in ("+streaming", "+partial_rollout"), partial_rollout=mode == "+partial_rollout",
        max_batch=n, max_wait_ms=max_wait_ms, queue_timeout_s=300.0, watchdog_s=600.0)
    return cfg, n


def run_one(w: Workload, regime: str, placement: str, mode: str, *, slots: int, updates: int,
            latency: LatencyModel, ratio: str, max_wait_ms: float = 2.0, grad_streaming: bool = True,
            longtail_physics: str | None = None, **overrides: Any) -> dict[str, Any]:
    """One (regime, placement, mode) run; `overrides` replace `AsyncConfig` fields of the mode.

    longtail_physics: the simulator under the latency model in the `cpu_longtail` regime (RL
    workload: 'c' = C MuJoCo on the host, LIBERO-style; 'jax' = MJX; None = the preset's).

    grad_streaming=False: the streaming modes hand the trainer its micro-batches as they arrive
    (`AsyncConfig.streaming`) but the trainer runs the non-streaming update (see `rl_workload`)."""
    cfg, n = mode_config(mode, slots, placement, ratio, max_wait_ms)
    cfg = dataclasses.replace(cfg, **overrides)
    p = make_placement(cfg, MeshConfig())
    train_dev, roll_dev = p.train_devices[0], p.rollout_devices[0]  # colocated: the same device, time-shared
    longtail = regime == "cpu_longtail"
    reset, step, infer = w.env(n, latency if longtail else None, physics_impl=longtail_physics if longtail else None)
    rollout = SlotRollout(cfg, reset=reset, step=step, infer=infer, horizon=w.horizon, samples_per_slot=w.envs // n,
                          env_steps_per_decision=w.envs // n * w.steps_per_decision)
    timeline = Timeline()
    state = jax.device_put(w.init_state(0), train_dev)
    trainer = w.trainer(train_dev, cfg.streaming and grad_streaming, cfg.require_batches)
    marks: list[float] = []
    mark = lambda *_: marks.append(time.monotonic())
    kw = dict(train_step=trainer, get_params=w.get_params, num_updates=updates + 1,
              samples_per_step=w.envs // n, mini_batch=w.envs // n)
    t_start = time.monotonic()
    if mode == "sync":
        params_dev = jax.device_put  # sync colocated/disaggregated: params move to the rollout device per version
        sample = lambda v, prm, c: rollout.sample_step(v, params_dev(prm, roll_dev), c)
        run_sync(cfg, sample_step=sample, state=state, timeline=timeline, on_update=mark, **kw)
    else:
        runner = AsyncRunner(cfg, sample_step=rollout.sample_step, state=state, timeline=timeline,
                             rollout=None if n == 1 else rollout.lanes, on_update=mark,
                             rollout_shardings=SingleDeviceSharding(roll_dev), **kw)
        assert runner.run(timeout=1800) == "done"
    t_end = marks[-1]
    m = summarize(timeline, marks[0], t_end)  # after the warm-up update (compiles excluded)
    return {"regime": regime, "placement": p.kind if placement == "colocated" else f"disaggregated {ratio}",
            "mode": mode, "slots": n, "updates_timed": updates,
            "env_steps_per_s": m["env/steps_per_s"], "trainer_idle_ratio": m.get("trainer/idle_ratio", 0.0),
            "rollouter_idle_ratio": m.get("rollouter/idle_ratio", 0.0),
            "rollouter_wait_inference_ratio": m.get("rollouter/wait_inference_ratio", 0.0),
            "staleness_mean": m.get("staleness/mean", 0.0), "staleness_max": m.get("staleness/max", 0.0),
            "version_span_max": m.get("partial/version_span_max", 0.0),
            "inference_batch_mean": m.get("inference/batch_mean", float(w.envs)),
            "staleness_threshold": cfg.staleness_threshold, "max_wait_ms": cfg.max_wait_ms,
            "grad_streaming": grad_streaming if cfg.streaming else None, "wall_s": t_end - t_start,
            "physics": (longtail_physics if longtail else None) or "preset",
            "loadavg_1m": os.getloadavg()[0]}
