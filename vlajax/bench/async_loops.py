"""`python -m vlajax.bench async --json PATH`: the production RL loops, sync vs async, in three simulator regimes.

Every run is a real `rl` run: the synchronous loop `vlajax.rl.loop.train` or the pipeline
`vlajax.rl.async_loop.train_async`, on one TrainConfig that differs between runs only in its
`pipeline` section (the mode) and `env.physics_impl` (the regime). Nothing here steps envs,
samples actions or updates weights itself; it builds configs, calls the loops and reads what
they return (`iteration_times` of the sync loop; `update_times`, `history` and the pipeline's
own `summary_steady` of the async loop).

Modes (the pipeline's `AsyncConfig`; S = `--slots`):

| mode                      | entry point                   | slots | staleness | streaming | partial |
|---------------------------|-------------------------------|-------|-----------|-----------|---------|
| sync                      | `rl.loop.train`               | -     | -         | -         | -       |
| train_async               | `rl.async_loop.train_async`   | 1 (the loop's jitted collect) | 1 | no | no |
| rollout_async             | `rl.async_loop.train_async`   | S     | 0         | no        | no      |
| train_async+rollout_async | `rl.async_loop.train_async`   | S     | 1         | no        | no      |
| +streaming                | `rl.async_loop.train_async`   | S     | 1         | yes       | no      |
| +partial_rollout          | `rl.async_loop.train_async`   | S     | 1         | yes       | yes     |

Every mode runs the same optimizer update (one PPO epoch over one minibatch of S accumulated
micro-batches, `rl.normalize_advantages='none'`: what streaming requires, so the update is the
same in all modes) on the same envs, horizon and policy.

The policy is the preset's: a state preset's MLP at `--width`, or for a pixel PPO preset
(`rl-ppo-flow`) the `sft-small` VLA with the preset's head from fresh weights, its privileged
critic replaced by the VLA's value head in every mode (`workload_model`, `workload_critic`);
`--model PRESET` takes that preset's policy instead (e.g. `pi0`: openpi's widths, at `--model-depth`
Gemma layers with SigLIP whole; the env renders at its image size). The JSON's `workload.model_flops`
gives the policy's model FLOPs per decision, per trained sample and per env step (`vlajax.models.flops`).

Batching (`--batching`, the slot modes; each rule a row of its own): `adaptive` fires a forward once
every slot with a segment in flight has posted, or at `--adaptive-max-wait-ms` (T_max);
`fixed` only at `--slots` waiting requests or `--max-wait-ms`. Rows give the requests per forward
(`inference_batch_mean`) beside the slots in flight when each fired (`inference_active_mean`).

Regimes (what is real in each is written into every row, `reality`):

- `mjx`: MJX physics in-process (`env.physics_impl='jax'`); simulation, inference and training
  all real, on this machine's cores.
- `cpu-sim`: C MuJoCo in-process (`env.physics_impl='c'`, `vlajax/envs/tabletop/c_physics.py`:
  each call steps its envs in one native batch without Python's GIL): real simulator cost on
  this machine's cores.
- `emulated-farm`: C MuJoCo in-process for the observations, and every physics call also lasts
  as long as a remote worker farm would take for its envs: each env's control step is drawn
  from a `LatencyModel` calibrated on the per-env C MuJoCo step times of a `cpu-sim` sync run
  before the rows (its envs stepped one native call each, to time them; not a row), times
  `--farm-scale`; a call waits for its slowest env and sleeps
  what its real steps left (`c_physics.host_timing`). The row reports the emulated fraction of
  its wall time (union of the sleeps / window).

Throughput is timed inside each run from the end of its first update (which compiles) to the
end of its last: env steps trained on per second (`env_steps_per_s`; the async loop's own
produced rate is `produced_env_steps_per_s`) and updates per second. Repeats are the outer
loop (repeat -> regime -> mode), so every mode samples the machine's load alike; a row is the
median over repeats with [min, max], and its speed-up is the median of the per-repeat ratios
to the same repeat's sync run of the regime. The 1-minute load average is recorded before and
after every run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any, Literal

import numpy as np

from vlajax.bench import write_result
from vlajax.config.presets.sft import SMALL_CPU_MODEL
from vlajax.config.schema import AsyncConfig, ConfigError, ModelConfig, TrainConfig, get_config
from vlajax.envs.tabletop import c_physics, tasks
from vlajax.models import flops
from vlajax.models.sp_tokenizer import train_tiny_model
from vlajax.pipeline.latency import LatencyModel
from vlajax.policies.memory import reduced_depth
from vlajax.rl import async_loop, loop
from vlajax.rl.setup import build
from vlajax.shared import cli

REGIMES = ("mjx", "cpu-sim", "emulated-farm")
MODES = ("sync", "train_async", "rollout_async", "train_async+rollout_async", "+streaming", "+partial_rollout")
ENTRY = {"sync": "vlajax.rl.loop.train"} | {m: "vlajax.rl.async_loop.train_async" for m in MODES[1:]}
REALITY = {
    "mjx": "MJX physics in-process (env.physics_impl='jax'); simulation, inference and training all real on this "
           "machine's CPU cores",
    "cpu-sim": "C MuJoCo in-process (env.physics_impl='c', host callback); simulation, inference and training all "
               "real on this machine's CPU cores",
    "emulated-farm": "C MuJoCo in-process for the observations (real); each physics call also waits, asleep, until a "
                     "remote worker farm would have stepped its envs (per-env step time from the latency model "
                     "calibrated on this run's C MuJoCo step times x farm_scale; the call waits for its slowest env): "
                     "the sleeps are emulated, inference and training real",
}


SLOT_MODES = MODES[2:]  # the modes whose slots post to a dynamic batcher (--batching applies to them)


def pipeline_config(mode: str, slots: int, max_wait_ms: float, timeout_s: float, adaptive: bool = True
                    ) -> AsyncConfig:
    """The `pipeline` section of a mode (see the module docstring); `adaptive`: the batcher's rule."""
    if mode == "sync":
        return AsyncConfig(enabled=False)
    n = 1 if mode == "train_async" else slots
    return AsyncConfig(enabled=True, num_slots=n, require_batches=n, max_batch=n, max_wait_ms=max_wait_ms,
                       adaptive_batching=adaptive,
                       staleness_threshold=0.0 if mode == "rollout_async" else 1.0,
                       streaming=mode in ("+streaming", "+partial_rollout"), partial_rollout=mode == "+partial_rollout",
                       queue_timeout_s=timeout_s, watchdog_s=timeout_s)


# the RL sampler's fields a pixel preset sets on its model (kept on the sft-small architecture)
HEAD_FIELDS = ("action_head", "flow_sampler", "noise_level", "flow_x1", "flow_sde_steps", "value_head")


def policy_model(base: TrainConfig, preset: str, depth: int = 0, image_size: int = 0) -> ModelConfig:
    """`--model`: the policy of `preset` (e.g. pi0: openpi's widths) with `base`'s head and sampler fields;
    a π model at `depth` Gemma layers (both experts; 0 = the preset's) with SigLIP at its full depth, at
    `image_size` (0 = the preset's; the env renders at the model's size). Fresh weights."""

    cfg = get_config(preset)
    if depth:
        if cfg.model.family == "vla":
            cfg = cfg.replace(model=dataclasses.replace(cfg.model, depth=depth))
        else:
            cfg = reduced_depth(cfg, depth)
            cfg = cfg.replace(model=dataclasses.replace(cfg.model, siglip_depth=get_config(preset).model.siglip_depth))
    fields = {f: getattr(base.model, f) for f in HEAD_FIELDS if f != "value_head"}
    fields["value_head"] = "expert" if base.rl.critic == "privileged" else base.model.value_head
    if image_size:
        fields["image_size"] = image_size
    tok = cfg.model.tokenizer_path
    if cfg.model.family != "vla" and not (tok and os.path.exists(os.path.expanduser(tok))):
        # fresh weights: any prompt tokenizer within the vocabulary will do; a tiny one of the tabletop instructions
        path = os.path.join(tempfile.gettempdir(), "vlajax_bench_tabletop_tokenizer.model")
        if not os.path.exists(path):
            train_tiny_model(path, sorted({i for t in tasks.TASKS for i in t.instructions()}), 1000)
        fields["tokenizer_path"] = path
    return dataclasses.replace(cfg.model, **fields)


def workload_model(base: TrainConfig, width: int | None) -> ModelConfig:
    """The policy the bench times. State presets: the preset's MLP at `width` (None: 256). Pixel
    presets: the `sft-small` VLA (~1.5M parameters; what `rl --rl.init-from` an `sft-small`
    checkpoint runs) with the preset's head and sampler fields; fresh weights. A privileged critic
    becomes the VLA's expert value head (`workload_critic`)."""
    if base.env.obs_mode == "state":
        return dataclasses.replace(base.model, width=256 if width is None else width)

    fields = {f: getattr(base.model, f) for f in HEAD_FIELDS}
    if base.rl.critic == "privileged":
        fields["value_head"] = "expert"
    return dataclasses.replace(SMALL_CPU_MODEL, **fields)


def workload_critic(base: TrainConfig) -> str:
    """`rl.critic` of every run: the preset's, except that a privileged critic (an MLP on the env's
    privileged state) becomes the policy's own value head -- the env slots of the async modes carry
    no privileged observations, and every mode must run the same update."""
    return "head" if base.rl.critic == "privileged" else base.rl.critic


def model_flops(base: TrainConfig, wm: ModelConfig, steps_per_decision: int) -> dict[str, Any]:
    """Model FLOPs of the workload (`vlajax.models.flops`): per decision (the sampler), per trained sample
    (one PPO epoch: log-probs and value through the policy, forward + backward) and per env step (both / the
    env steps a decision executes). The state MLP is not counted (None)."""
    if base.env.obs_mode == "state":
        return {"per_env_step": None, "note": "state MLP policy: not counted"}

    cams = len(base.env.cameras)
    decision, update = flops.decision(wm, cams), flops.rl_update_sample(wm, cams)
    return {"per_decision": decision, "per_update_sample": update,
            "per_env_step": (decision + update) / steps_per_decision, "cameras": cams}


def run_config(base: TrainConfig, regime: str, mode: str, *, envs: int, slots: int, horizon: int,
               width: int | None, updates: int, max_wait_ms: float, out_dir: str,
               timeout_s: float = 600.0, adaptive: bool = True, policy: ModelConfig | None = None) -> TrainConfig:
    """The TrainConfig of one run: `base` (a preset) with the bench's workload, the regime's physics, the mode."""
    rl = dataclasses.replace(base.rl, num_iterations=updates + 1, rollout_length=horizon, update_epochs=1,
                             num_minibatches=1, micro_batches=slots, normalize_advantages="none", eval_every=-1,
                             critic=workload_critic(base))
    return dataclasses.replace(
        base, output_dir=out_dir, rl=rl,
        env=dataclasses.replace(base.env, num_envs=envs, physics_impl="jax" if regime == "mjx" else "c",
                                **({} if policy is None else {"image_size": policy.image_size})),
        model=workload_model(base, width) if policy is None else policy,
        checkpoint=dataclasses.replace(base.checkpoint, dir="", every_steps=10**9, max_to_keep=1, resume=False),
        logging=dataclasses.replace(base.logging, tensorboard=False, progress="none", every_steps=10**9),
        pipeline=pipeline_config(mode, slots, max_wait_ms, timeout_s, adaptive))


# ----------------------------------------------------------------------------------------
# The emulated farm: a latency model calibrated on measured C MuJoCo step times
# ----------------------------------------------------------------------------------------


def step_stats(step_s: list[float]) -> dict[str, float]:
    x = np.asarray(step_s, float) * 1e3
    return {"n": int(x.size), "mean_ms": float(x.mean()), "median_ms": float(np.median(x)),
            **{f"p{q}_ms": float(np.percentile(x, q)) for q in (10, 90, 99)}, "max_ms": float(x.max())}


def calibrate(step_s: list[float], scale: float) -> LatencyModel:
    """A per-env `LatencyModel` from measured per-env step seconds: the median (x `scale`), the
    log-normal spread of the steps below 3x the median (from their interquartile range), and the
    share and size (median ratio) of the steps above it as the straggler tail."""
    x = np.asarray(step_s, float)
    med = float(np.median(x))
    tail = x > 3.0 * med
    body = np.log(x[~tail] / med)
    sigma = float((np.percentile(body, 75) - np.percentile(body, 25)) / 1.349)
    tail_scale = max(1.0, float(np.median(x[tail]) / med)) if tail.any() else 1.0
    return LatencyModel(median_s=scale * med, sigma=sigma, tail_prob=float(tail.mean()), tail_scale=tail_scale)


class Farm:
    """`farm(n) -> seconds`: one control step of n envs on n remote workers (the slowest one)."""

    def __init__(self, model: LatencyModel, seed: int = 0):
        self.model, self.rng, self.lock = model, np.random.default_rng(seed), threading.Lock()

    def __call__(self, n: int) -> float:
        with self.lock:
            return self.model.batch_seconds(self.rng, n)


def _union(intervals: list[tuple[float, float]], t0: float, t1: float) -> tuple[float, float]:
    """(union length, summed length) of the intervals clipped to [t0, t1]."""
    clipped = sorted((max(a, t0), min(b, t1)) for a, b in intervals if b > t0 and a < t1)
    union, end = 0.0, t0
    for a, b in clipped:
        union += max(0.0, b - max(a, end))
        end = max(end, b)
    return union, sum(b - a for a, b in clipped)


# ----------------------------------------------------------------------------------------
# One run through a production loop
# ----------------------------------------------------------------------------------------


def run_one(cfg: TrainConfig, setup: Any, regime: str, mode: str, farm: Farm | None = None,
            per_env: bool = False) -> dict[str, Any]:
    """One run of `cfg` through the mode's production loop; its steady-state figures and what the loop reported.
    `per_env`: record each env's C MuJoCo step time (the farm's calibration; steps env by env)."""

    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        timing = None if regime == "mjx" else stack.enter_context(
            c_physics.host_timing(farm if regime == "emulated-farm" else None, per_env=per_env))
        t_run = time.monotonic()
        if mode == "sync":
            out = loop.train(cfg, setup)
            ends = [t[1] for t in out["iteration_times"]]
            trained = sum(t[2] for t in out["iteration_times"][1:])
            summary = {}
            reported = {"status": out["status"], "seconds": out["seconds"], "env_steps": out["env_steps"],
                        "iteration_times": out["iteration_times"],
                        "history_env_steps_per_s": [h["env_steps_per_s"] for h in out["history"]]}
        else:
            out = async_loop.train_async(cfg, setup, timeout=cfg.pipeline.watchdog_s * 3)
            ends = out["update_times"]
            trained = sum(r["env_steps"] for r in list(out["history"])[1:])
            summary = out["summary_steady"]
            reported = {"status": out["status"], "seconds": out["seconds"], "env_steps": out["env_steps"],
                        "consumed_env_steps": out["consumed_env_steps"], "update_times": ends,
                        "summary_steady": summary,
                        "summary": {k: v for k, v in out["summary"].items()
                                    if not k.startswith("inference/batch_hist")}}
        run_s = time.monotonic() - t_run
    if out["status"] != "done" or len(ends) < 2:
        raise RuntimeError(f"{regime} {mode}: the loop ended {out['status']!r} after {len(ends)} updates")
    w0, w1 = ends[0], ends[-1]
    window = w1 - w0
    row: dict[str, Any] = {
        "regime": regime, "mode": mode, "entry": ENTRY[mode], "physics_impl": cfg.env.physics_impl,
        "updates_timed": len(ends) - 1, "window_s": window, "run_s": run_s,
        "env_steps_per_s": trained / window, "updates_per_s": (len(ends) - 1) / window,
        "produced_env_steps_per_s": summary.get("env/steps_per_s", trained / window),
        "trainer_idle_ratio": summary.get("trainer/idle_ratio"),
        "rollouter_idle_ratio": summary.get("rollouter/idle_ratio"),
        "rollouter_wait_inference_ratio": summary.get("rollouter/wait_inference_ratio"),
        "staleness_mean": summary.get("staleness/mean", 0.0), "staleness_max": summary.get("staleness/max", 0.0),
        "inference_batch_mean": summary.get("inference/batch_mean"),
        # requests per forward against the slots with a segment in flight when it fired
        "inference_active_mean": summary.get("inference/active_mean"),
        "inference_batch_over_active": summary.get("inference/batch_over_active"),
        "batching": ("adaptive" if cfg.pipeline.adaptive_batching else "fixed") if mode in SLOT_MODES else None,
        "max_wait_ms": cfg.pipeline.max_wait_ms if mode in SLOT_MODES else None,
        "loadavg_1m_before": load_before, "loadavg_1m_after": os.getloadavg()[0], "loop": reported}
    if timing is not None:
        union, summed = _union(timing.sleeps, w0, w1)
        row |= {"c_calls": timing.calls, "c_real_s": timing.real_s}
        if timing.env_step_s:
            row["c_env_step"] = step_stats(timing.env_step_s)
        if regime == "emulated-farm":
            row |= {"emulated_wall_fraction": union / window, "emulated_sleep_s_per_wall_s": summed / window}
        row["_env_step_s"] = timing.env_step_s  # calibration input (dropped from the JSON)
    return row


def aggregate(runs: list[dict]) -> dict[str, Any]:
    """The repeats of one (regime, mode): medians with [min, max]."""
    def stat(key):
        vals = [r[key] for r in runs if r.get(key) is not None]
        return (float(np.median(vals)), [float(min(vals)), float(max(vals))], vals) if vals else (None, None, [])

    first = runs[0]
    row = {k: first[k] for k in ("regime", "mode", "batching", "max_wait_ms", "entry", "physics_impl",
                                 "updates_timed")}
    row |= {"placement": "colocated", "repeats": len(runs)}
    for key in ("env_steps_per_s", "updates_per_s", "speedup_vs_sync", "produced_env_steps_per_s",
                "trainer_idle_ratio", "rollouter_idle_ratio", "rollouter_wait_inference_ratio", "staleness_mean",
                "staleness_max", "inference_batch_mean", "inference_active_mean", "inference_batch_over_active",
                "emulated_wall_fraction", "emulated_sleep_s_per_wall_s"):
        med, rng, vals = stat(key)
        if med is not None:
            row[key], row[f"{key}_range"], row[f"{key}_all"] = med, rng, vals
    row["loadavg_1m"] = [[r["loadavg_1m_before"], r["loadavg_1m_after"]] for r in runs]
    row["runs"] = runs
    return row


def render_markdown(data: dict) -> str:
    """One table per regime (docs/async.md)."""
    out = []
    for regime in dict.fromkeys(r["regime"] for r in data["rows"]):
        rows = [r for r in data["rows"] if r["regime"] == regime]
        out.append(f"**{regime}** -- {REALITY[regime]}\n")
        farm = regime == "emulated-farm"
        head = ("| mode | env steps/s | updates/s | x sync | trainer idle | rollouter idle | staleness mean / max "
                "| requests per forward / slots in flight "
                + ("| emulated share of wall " if farm else "") + "| load before-after |")
        out += [head, "|" + "---|" * (head.count("|") - 1)]
        fmt = lambda r, k, f="{:.0f}": (f"{f.format(r[k])} [{f.format(r[k + '_range'][0])}, "
                                        f"{f.format(r[k + '_range'][1])}]") if r.get(k) is not None else "-"
        for r in rows:
            load = f"{min(x[0] for x in r['loadavg_1m']):.1f}-{max(x[1] for x in r['loadavg_1m']):.1f}"
            label = r["mode"] + (f" ({r['batching']}, T_max {r['max_wait_ms']:g} ms)" if r.get("batching") else "")
            per = (f"{r['inference_batch_mean']:.2f} / {r['inference_active_mean']:.2f}"
                   if r.get("inference_active_mean") is not None else "-")
            out.append(f"| {label} | {fmt(r, 'env_steps_per_s')} | {fmt(r, 'updates_per_s', '{:.2f}')} "
                       f"| {fmt(r, 'speedup_vs_sync', '{:.2f}')} | {fmt(r, 'trainer_idle_ratio', '{:.2f}')} "
                       f"| {fmt(r, 'rollouter_idle_ratio', '{:.2f}')} "
                       f"| {fmt(r, 'staleness_mean', '{:.2f}')} / {r['staleness_max']:.0f} | {per} "
                       + (f"| {fmt(r, 'emulated_wall_fraction', '{:.2f}')} " if farm else "") + f"| {load} |")
        out.append("")
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    json: str = ""  # write the rows here
    # the TrainConfig preset the workload starts from: a PPO preset, state observations (the MLP; rl-debug,
    # rl-mlp-state) or pixels (rl-ppo-flow: the sft-small VLA with the preset's head, from fresh weights)
    preset: str = "rl-debug"
    regimes: tuple[Literal["mjx", "cpu-sim", "emulated-farm"], ...] = REGIMES
    # the loops to time: sync = rl.loop.train, the rest rl.async_loop.train_async in that mode
    modes: tuple[Literal[MODES], ...] = MODES
    repeats: int = 3  # runs per (regime, mode); the outer loop
    # timed updates per run (after one warm-up update, which compiles); >= 2: with one, train_async's window would
    # time that update alone (the staleness-1 pipeline collects its rollout during the warm-up)
    updates: int = 20
    envs: int = 16  # env.num_envs (split into --slots slots in the slot modes)
    slots: int = 4  # env slots of the slot modes; also the micro-batches of every mode's update
    horizon: int = 8  # rl.rollout_length: decisions per env per update
    width: int | None = None  # state presets: model.width of the MLP actor and critic (None: 256); pixels: refused
    max_wait_ms: float = 2.0  # dynamic batching of the slot modes: T_max
    # the slot modes' batching rule, each a row of its own: adaptive = fire once every slot in flight has posted
    # (or at --adaptive-max-wait-ms); fixed = only at --slots waiting requests or --max-wait-ms
    batching: tuple[Literal["adaptive", "fixed"], ...] = ("adaptive",)
    # T_max of the adaptive rule: the longest a slot still stepping may hold the others' batch. Slots blocked in
    # pacing or at a weight switch are never waited for, so T_max only bounds a slow slot; it must exceed the
    # spread of the slots' step times, or the slots fall out of lockstep (100 ms: 0.80 of the slots in flight per
    # forward, MJX, 4 slots, this 2-core CPU at load 16; results/bench/async_adaptive_cpu_slots4.json)
    adaptive_max_wait_ms: float = 1000.0
    farm_scale: float = 20.0  # emulated-farm: a worker's step time = this x the measured C MuJoCo step time
    seed: int = 0
    render: str = ""  # print the markdown tables of an existing JSON and exit
    # a shell command run before the first repeat, between repeats and after the last, with VLAJAX_BENCH_REPEAT =
    # 0..repeats (e.g. "python -m research.planner profile --out DIR/p$VLAJAX_BENCH_REPEAT ..."): costs measured at the
    # moments the rows ran; outside every row's timed window; its times in meta.between_repeats; a failure ends the
    # bench with one error: line and no JSON
    between_repeats: str = ""
    # the policy from this preset instead (pixel presets; e.g. pi0: openpi's widths) with the --preset's head and
    # sampler fields, fresh weights; '' = the sft-small VLA / the state MLP
    model: str = ""
    model_depth: int = 0  # --model: its depth (π: Gemma layers of both experts, SigLIP kept whole; 0 = the preset's)
    model_image_size: int = 0  # --model: its image size, and the env's render size (0 = the model's own)


def _check(a: Args) -> None:
    if a.render:
        if not os.path.isfile(a.render):
            cli.error(f"--render {a.render}: no such file")
        return
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        cli.error(f"--json {a.json}: its directory does not exist")
    if a.repeats < 1 or a.updates < 2:
        cli.error(f"--repeats must be >= 1 and --updates >= 2 (got {a.repeats}, {a.updates}): the window runs from "
                  "the end of the warm-up update (which compiles) to the last; with one timed update train_async's "
                  "window would time that update alone (its rollout ran during the warm-up)")
    if a.slots < 1 or a.envs % a.slots:
        cli.error(f"--envs {a.envs} must split into --slots {a.slots}")
    if min(a.envs, a.horizon, 1 if a.width is None else a.width) < 1 or min(a.max_wait_ms, a.adaptive_max_wait_ms) < 0 \
            or a.farm_scale <= 0:
        cli.error("--envs, --horizon and --width must be >= 1, --max-wait-ms >= 0 and --farm-scale > 0")
    if not a.regimes or not a.modes:
        cli.error("--regimes and --modes must name at least one each")
    if (a.model_depth or a.model_image_size) and not a.model:
        cli.error("--model-depth / --model-image-size set the --model policy; no --model given")
    if a.model_depth < 0 or a.model_image_size < 0:
        cli.error("--model-depth and --model-image-size must be >= 0")


def main(argv: list[str]) -> int:
    if "libero" in argv:  # the planner beside real LIBERO workers: a research benchmark
        cli.error("the libero regime is research: python -m research.bench async_libero --regimes libero ...")
    a = cli.parse(Args, argv, prog="python -m vlajax.bench async", description=__doc__.split("\n")[0])
    _check(a)
    if a.render:
        with open(a.render) as f:
            print(render_markdown(json.load(f)), end="")
        return 0
    import grain  # noqa: F401  (imported by the loops' first checkpoint save: not inside a timed window)
    import jax

    try:
        base = dataclasses.replace(get_config(a.preset), seed=a.seed)
    except (KeyError, ConfigError) as e:
        cli.error(f"--preset {a.preset}: {e}")
    if base.rl.algo != "ppo":
        cli.error(f"--preset {a.preset}: the bench runs a PPO preset (got {base.rl.algo}: GRPO's episode groups "
                  "do not fit the bench's fixed horizon)")
    if base.env.obs_mode != "state" and a.width is not None:
        cli.error(f"--width sets the state MLP's width; {a.preset} runs the sft-small VLA (its architecture is fixed)")
    policy = None
    if a.model:
        if base.env.obs_mode == "state":
            cli.error(f"--model {a.model}: {a.preset} has state observations (the MLP); --model needs a pixel preset")
        try:
            policy = policy_model(base, a.model, a.model_depth, a.model_image_size)
        except (KeyError, ConfigError, ValueError) as e:
            cli.error(f"--model {a.model}: {e}")
    regimes = [g for g in REGIMES if g in a.regimes]  # cpu-sim before emulated-farm: the calibration
    modes = [m for m in MODES if m in a.modes]
    root = tempfile.mkdtemp(prefix="bench_async_")
    cfg = lambda regime, mode, name, batching="adaptive": run_config(
        base, regime, mode, envs=a.envs, slots=a.slots, horizon=a.horizon, width=a.width, updates=a.updates,
        max_wait_ms=a.adaptive_max_wait_ms if batching == "adaptive" else a.max_wait_ms,
        out_dir=os.path.join(root, name), adaptive=batching == "adaptive", policy=policy)
    variants = [(m, b) for m in modes for b in (a.batching if m in SLOT_MODES else ("adaptive",))]
    try:
        cfgs = {g: cfg(g, m, "check") for g in regimes for m in modes}  # ConfigErrors before any run
        setups = {g: build(cfgs[g]) for g in regimes}
    except ConfigError as e:
        cli.error(str(e))
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    git = lambda *c: subprocess.run(["git", *c], capture_output=True, text=True).stdout.split()
    wm = workload_model(base, a.width) if policy is None else policy
    steps_per_decision = base.rl.chunk_steps or wm.action_horizon  # as rl.setup runs it
    meta: dict[str, Any] = {
        "command": "python -m vlajax.bench async " + shlex.join(argv), "argv": ["async", *argv],
        "uptime_before": uptime(), "devices": jax.device_count(), "cpu_count": os.cpu_count(),
        # the code measured: HEAD plus the files under vlajax/ that differ from it (a shared tree)
        "git": {"head": (git("rev-parse", "HEAD") or [""])[0], "modified": git("diff", "--name-only", "HEAD",
                                                                               "--", "vlajax")},
        "workload": {"preset": a.preset, "task": base.env.task or base.env.suite, "obs_mode": base.env.obs_mode,
                     "envs": a.envs, "slots": a.slots, "horizon": a.horizon,
                     # env steps per decision (what `plan validate` reads); the model's chunk is `model_action_horizon`
                     "action_horizon": steps_per_decision,
                     "model_action_horizon": wm.action_horizon, "chunk_steps": base.rl.chunk_steps,
                     "policy": "mlp" if base.env.obs_mode == "state" else wm.family,
                     "model": {k: getattr(wm, k) for k in ("name", "family", "width", "depth", "image_size",
                                                           "paligemma_variant", "action_expert_variant",
                                                           "siglip_variant", *HEAD_FIELDS)}
                     | ({"siglip_depth": wm.siglip["depth"]} if wm.family != "vla" else {}),
                     "model_flops": model_flops(base, wm, steps_per_decision),
                     "critic": workload_critic(base), "width": wm.width, "depth": wm.depth,
                     "episode_length": base.env.episode_length, "algo": "ppo", "update_epochs": 1, "minibatches": 1,
                     "micro_batches": a.slots, "normalize_advantages": "none", "updates_timed": a.updates,
                     "env_steps_per_update": a.envs * a.horizon * steps_per_decision},
        "reality": {g: REALITY[g] for g in regimes}, "order": "repeat -> regime -> mode",
        "max_wait_ms": a.max_wait_ms, "batching": list(a.batching), "adaptive_max_wait_ms": a.adaptive_max_wait_ms}
    farm: Farm | None = None

    def calibrate_from(step_s: list[float], source: str) -> Farm:
        model = calibrate(step_s, a.farm_scale)
        meta["farm"] = {"scale": a.farm_scale, "calibrated_on": source, "c_env_step": step_stats(step_s),
                        "latency_model": dataclasses.asdict(model),
                        "expected_call_ms": {f"{n} envs": 1e3 * model.expected_batch_seconds(n)
                                             for n in sorted({a.envs, a.envs // a.slots})},
                        "semantics": "per control step: a physics call over n envs lasts max(real, the slowest of n "
                                     "draws); pose-only reset calls are not delayed"}
        print(json.dumps({"farm": meta["farm"]}), flush=True)
        return Farm(model, a.seed)

    if "emulated-farm" in regimes:  # per-env step times: env by env, so a run of its own, not a row
        calib = run_one(cfg("cpu-sim", "sync", "calibration"), build(cfg("cpu-sim", "sync", "c")), "cpu-sim", "sync",
                        per_env=True)
        farm = calibrate_from(calib["_env_step_s"], "a cpu-sim sync run before the rows, envs stepped one by one "
                                                    "(not a row)")
    runs: dict[tuple[str, str], list[dict]] = {}
    between: list[dict[str, Any]] = []

    def run_between(k: int) -> None:
        if not a.between_repeats:
            return
        t0, start = time.monotonic(), time.strftime("%H:%M:%S", time.gmtime())
        done = subprocess.run(a.between_repeats, shell=True, env={**os.environ, "VLAJAX_BENCH_REPEAT": str(k)})
        between.append({"repeat": k, "start_utc": start, "seconds": time.monotonic() - t0, "rc": done.returncode,
                        "uptime_after": uptime()})
        if done.returncode != 0:
            raise SystemExit(f"error: --between-repeats exited {done.returncode} (VLAJAX_BENCH_REPEAT={k}); "
                             "no rows written")

    t_bench = time.monotonic()
    try:
        for rep in range(a.repeats):
            run_between(rep)
            for regime in regimes:
                for mode, batching in variants:
                    name = f"r{rep}_{regime}_{mode}_{batching}".replace("+", "p")
                    r = run_one(cfg(regime, mode, name, batching), setups[regime], regime, mode, farm)
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                    r.pop("_env_step_s", None)
                    r["repeat"] = rep
                    runs.setdefault((regime, mode, batching), []).append(r)
                    short = {k: r[k] for k in ("repeat", "regime", "mode", "batching", "env_steps_per_s",
                                               "updates_per_s", "inference_batch_mean", "inference_active_mean",
                                               "loadavg_1m_before", "run_s")}
                    print(json.dumps(short), flush=True)
        run_between(a.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for regime in regimes:
        for mode, batching in variants:
            reps = runs[(regime, mode, batching)]
            for r in reps:
                base_r = next((s for s in runs.get((regime, "sync", "adaptive"), []) if s["repeat"] == r["repeat"]),
                              None)
                r["speedup_vs_sync"] = r["env_steps_per_s"] / base_r["env_steps_per_s"] if base_r else None
            rows.append(aggregate(reps))
    meta |= {"uptime_after": uptime(), "bench_s": time.monotonic() - t_bench}
    if a.between_repeats:
        meta["between_repeats"] = {"command": a.between_repeats, "runs": between}
    data = {"meta": meta, "rows": rows}
    print(render_markdown(data), end="")
    write_result(a.json, data)
    return 0
