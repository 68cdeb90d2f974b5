"""Sample efficiency of the async pipeline (issue 7, acceptance 3): success vs env steps, async
(staleness <= 1) against the spread of 3 synchronous seeds.

    nice -n 10 .venv/bin/python experiments/async_sample_efficiency.py [--debug] \
        [--json docs/bench/async_sample_efficiency.json] [--plot docs/async/sample_efficiency.png] [--bc-steps N]

Workload (`get_config()`): PPO with the state-observation MLP (`rl-mlp-state`) on one task,
`goal/press_button`, with the success-only reward (`rl.reward='success'`). From random weights
PPO does not press the button within a budget this size (`python -m vlajax.train rl --preset
rl-mlp-state --rl.num-iterations 40 --rl.eval-every 5`: 0% eval success over 51,200 env steps), so
every run starts from the same behaviour-cloning warm start, as RL from one SFT checkpoint does:
the actor's mean MLP is regressed (MSE, Adam, `bc_steps` steps: deliberately short, so the warm
start does not yet press the button) onto the scripted expert's actions from `bc_episodes` expert
episodes (`vlajax.envs.experts.rollout`, state observations, samples up to the first success);
the log-std starts at `bc_log_std` for every seed; the critic keeps each seed's fresh
initialization. Then, at the same budget of
`iterations x num_envs x rollout_length` env steps and the same eval schedule (every `eval_every`
updates plus update 0, `eval_episodes` deterministic episodes each, the loop's closed-loop eval):

- sync: `vlajax.rl.loop.train` (the code path of `python -m vlajax.train rl`) with seeds `sync_seeds`;
- async: `vlajax.rl.async_loop.train_async` (`--pipeline.enabled`) with seed `async_seed`,
  `slots` env slots, `staleness_threshold` (1: rollout may run one sync window ahead, staleness <=
  1), partial rollout, no streaming (the same PPO epochs x minibatches as sync) and decoupled PPO
  (`use_rollout_log_probs=False`: behaviour = rollout log-probs, proximal = recomputed).

The x-axis is env steps *consumed by the learner* (update u has learned from u x steps-per-update
env steps in both modes; async rollout may have produced up to (1 + staleness_threshold) sync
windows more, since it reserves ahead of the learner). The async point
at update 0 is `train_async`'s eval of its starting policy (before commit 4d6753d, which added it to
`train_async`, this experiment evaluated the same initial weights itself; the committed result is from then).
Writes JSON (every run's curve, the band, the verdict), a markdown table and a PNG plot.

Second workload, `--workload grpo-tokens --init-from DIR` (`get_pixel_config()`): GRPO with the
token head from pixels on the whole `goal` suite (`rl-grpo-tokens`: 32 envs in 8 groups of
`group_size` 4, one 200-step episode each per update, 4 of the 8 predicted actions executed per
decision, progress reward), every run started from the same SFT checkpoint directory (`DIR`, as
`--rl.init-from`); seeds change only the collect / update key streams (`cfg.seed`). Evaluation
every `eval_every` updates plus update 0, `eval_episodes` closed-loop episodes per task, with the
same eval episodes in every run (`eval_seed`: the evaluation is built from a config with that
seed, training uses the run's seed). Async: one slot (the loop's own jitted `collect` in the
rollouter lane), `staleness_threshold` 1, no streaming, decoupled PPO-clip
(`use_rollout_log_probs=False`). GRPO episodes end at success, so the env steps really stepped per
update vary by run: the comparison grid (`env_steps`) is the update's budget, update u x
`num_envs x episode_length`, and each point also records `env_steps_consumed`, the env steps the
learner had really trained on (sync: the loop's count; async: the sum over the consumed batches).

    nice -n 10 .venv/bin/python experiments/async_sample_efficiency.py --workload grpo-tokens \
        --init-from runs/s3/start-tokmm5-500 --work-dir runs/s3eff/work \
        --json docs/bench/async_sample_efficiency_pixels.json --plot docs/async/sample_efficiency_pixels.png

`--runs sync:0,async:0` runs only those runs (each run also writes `<work-dir>/<mode>-seed<seed>.json`,
so two processes can run different runs at once); `--reuse` takes every run whose JSON is in the
work dir (written with the same experiment) instead of running it again, then compares and writes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import time
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from vlajax import cli  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Experiment:
    """The fixed workload and schedule shared by every run."""

    preset: str = "rl-mlp-state"
    task: str = "goal/press_button"
    num_envs: int = 64
    rollout_length: int = 20  # decisions per env per update (H = 1: env steps)
    episode_length: int = 100
    width: int = 64
    iterations: int = 40  # optimizer updates (PPO iterations) per run
    eval_every: int = 2
    eval_episodes: int = 48
    reward: str = "success"
    bc_episodes: int = 32  # expert episodes for the warm start
    bc_steps: int = 35  # Adam steps of the warm start (batch 256, lr 1e-3): short, before it presses the button
    bc_seed: int = 123
    bc_log_std: float = -1.5  # initial log-std of the warm-started policy (the MLP's default -0.5 drowns the expert)
    sync_seeds: tuple[int, ...] = (0, 1, 2)
    async_seed: int = 0
    slots: int = 4
    staleness_threshold: float = 1.0
    partial_rollout: bool = True

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_length


def get_config(debug: bool = False) -> Experiment:
    exp = Experiment()
    if debug:
        return dataclasses.replace(exp, num_envs=8, rollout_length=4, episode_length=20, width=16, iterations=2,
                                   eval_every=1, eval_episodes=2, bc_episodes=2, bc_steps=5, slots=2)
    return exp


@dataclasses.dataclass(frozen=True)
class PixelExperiment:
    """GRPO with the token head from pixels on a whole suite, from one SFT checkpoint."""

    preset: str = "rl-grpo-tokens"
    init_from: str = "runs/s3/start-tokmm5-500"
    suite: str = "goal"
    num_envs: int = 32
    group_size: int = 4
    episode_length: int = 200
    iterations: int = 15
    eval_every: int = 5
    eval_episodes: int = 20  # per task (x 4 goal tasks = 80 episodes)
    eval_seed: int = 0  # the eval episodes' seed, the same in every run
    sync_seeds: tuple[int, ...] = (0, 1, 2)
    async_seed: int = 0
    slots: int = 1
    staleness_threshold: float = 1.0
    partial_rollout: bool = False  # one slot: every collect plays whole episodes under one version
    # decoupled PPO above the cap on pi_prox / pi_b: 'drop' (AReaL) or 'truncate' (async only: sync weights are 1)
    behaviour_weight_mode: str = "drop"

    @property
    def steps_per_update(self) -> int:
        """The update's env-step budget: every env plays one episode (fewer steps when it succeeds early)."""
        return self.num_envs * self.episode_length


def get_pixel_config(debug: bool = False, init_from: str | None = None) -> PixelExperiment:
    exp = PixelExperiment()
    if init_from is not None:
        exp = dataclasses.replace(exp, init_from=init_from)
    if debug:
        return dataclasses.replace(exp, num_envs=8, episode_length=8, iterations=2, eval_every=1, eval_episodes=1)
    return exp


def train_config(exp: Experiment | PixelExperiment, mode: str, seed: int, output_dir: str):
    """The `TrainConfig` of one run (`mode` 'sync' or 'async')."""
    from vlajax.config import CheckpointConfig, LoggingConfig
    from vlajax.config import get_config as preset

    if isinstance(exp, PixelExperiment):
        return _pixel_train_config(exp, mode, seed, output_dir)
    cfg = preset(exp.preset)
    cfg = dataclasses.replace(
        cfg, seed=seed, output_dir=output_dir,
        model=dataclasses.replace(cfg.model, width=exp.width),
        env=dataclasses.replace(cfg.env, task=exp.task, num_envs=exp.num_envs, episode_length=exp.episode_length),
        rl=dataclasses.replace(cfg.rl, num_iterations=exp.iterations, rollout_length=exp.rollout_length,
                               eval_every=exp.eval_every, eval_episodes_per_task=exp.eval_episodes,
                               reward=exp.reward, behaviour_weight_mode="drop"),  # as measured (session 2)
        checkpoint=CheckpointConfig(every_steps=exp.iterations, max_to_keep=1, resume=False),
        logging=LoggingConfig(every_steps=1, progress="plain"))
    return _with_mode(cfg, exp, mode, queue_timeout_s=900.0, watchdog_s=1800.0)


def _with_mode(cfg, exp, mode: str, *, queue_timeout_s: float, watchdog_s: float):
    """`cfg` for `mode`: sync as is; async through the pipeline with the experiment's slots,
    staleness and partial rollout, no streaming, decoupled PPO (recomputed proximal log-probs)."""
    from vlajax.config import AsyncConfig

    if mode == "async":
        return dataclasses.replace(cfg, pipeline=AsyncConfig(
            enabled=True, num_slots=exp.slots, require_batches=exp.slots,
            staleness_threshold=exp.staleness_threshold, partial_rollout=exp.partial_rollout, streaming=False,
            use_rollout_log_probs=False, queue_timeout_s=queue_timeout_s, watchdog_s=watchdog_s))
    if mode != "sync":
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    return cfg


def _pixel_train_config(exp: PixelExperiment, mode: str, seed: int, output_dir: str):
    from vlajax.config import CheckpointConfig, LoggingConfig
    from vlajax.config import get_config as preset

    cfg = preset(exp.preset)
    cfg = dataclasses.replace(
        cfg, seed=seed, output_dir=output_dir,
        env=dataclasses.replace(cfg.env, suite=exp.suite, task="", num_envs=exp.num_envs,
                                episode_length=exp.episode_length),
        rl=dataclasses.replace(cfg.rl, init_from=exp.init_from, group_size=exp.group_size,
                               num_iterations=exp.iterations, eval_every=exp.eval_every,
                               eval_episodes_per_task=exp.eval_episodes,
                               behaviour_weight_mode=exp.behaviour_weight_mode),
        checkpoint=CheckpointConfig(every_steps=exp.iterations, max_to_keep=1, resume=False),
        logging=LoggingConfig(every_steps=1, progress="plain"))
    return _with_mode(cfg, exp, mode, queue_timeout_s=1800.0, watchdog_s=3600.0)


# ----------------------------------------------------------------------------------------
# Warm start: behaviour cloning of the scripted expert (actor mean only)
# ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def warm_start(exp: Experiment) -> tuple[Any, dict]:
    """(actor params, info): the MLP's actor regressed onto expert actions. obs [N, 32] -> actions [N, 1, 4]."""
    import optax

    from vlajax.envs import experts, registry
    from vlajax.rl import mlp_policy

    t0 = time.perf_counter()
    env = registry.load(exp.task, obs_mode="state")
    task_id = jnp.int32(registry.ALL_ENVS.index(exp.task))
    run = jax.jit(functools.partial(experts.rollout, env, num_episodes=exp.bc_episodes,
                                    episode_length=exp.episode_length))
    states, actions, ever = run(jax.random.key(exp.bc_seed), task_id)  # obs [T, N, 32], actions [T, N, 4]
    before = np.asarray(jnp.cumsum(states.metrics["success"], axis=0) == 0)  # not yet succeeded
    x = jnp.asarray(np.asarray(states.obs)[before])
    y = jnp.asarray(np.asarray(actions)[before])[:, None, :]
    model = mlp_policy.MLPActorCritic(action_horizon=1, action_dim=int(y.shape[-1]), hidden=(exp.width,) * 2,
                                      value_hidden=(exp.width,) * 2)
    params = model.init(jax.random.key(exp.bc_seed), x[:1])["params"]
    tx = optax.adam(1e-3)

    def loss(p, xb, yb):
        mean, _, _ = model.apply({"params": p}, xb)
        return jnp.mean(jnp.square(mean - yb))

    @jax.jit
    def step(p, opt, k):
        idx = jax.random.randint(k, (256,), 0, x.shape[0])
        value, g = jax.value_and_grad(loss)(p, x[idx], y[idx])
        u, opt = tx.update(g, opt, p)
        return optax.apply_updates(p, u), opt, value

    opt, value = tx.init(params), jnp.float32(0.0)
    for i in range(exp.bc_steps):
        params, opt, value = step(params, opt, jax.random.fold_in(jax.random.key(exp.bc_seed), i))
    info = {"expert_success": float(jnp.mean(ever)), "samples": int(x.shape[0]), "final_mse": float(value),
            "seconds": round(time.perf_counter() - t0, 1)}
    print(f"warm start: {info}", flush=True)
    return params["actor"], info


def make_setup(cfg, exp: Experiment | PixelExperiment):
    """The loops' `Setup` (`vlajax.rl.setup`) for `cfg` with the warm-started actor (critic and log-std fresh per seed);
    pixels: the SFT checkpoint's policy, evaluated on the `eval_seed` episodes whatever the run's seed."""
    from vlajax import sharding
    from vlajax.rl.setup import build

    if isinstance(exp, PixelExperiment):
        return build(dataclasses.replace(cfg, seed=exp.eval_seed), sharding.make_mesh(cfg.mesh))
    setup = build(cfg)
    actor, _ = warm_start(exp)
    base = setup.init_params
    shapes = jax.tree.map(jnp.shape, jax.eval_shape(base, jax.random.key(0))["actor"])
    if jax.tree.map(jnp.shape, actor) != shapes:
        raise ValueError(f"warm-start actor {jax.tree.map(jnp.shape, actor)} does not match the policy's {shapes}")
    def init_params(rng):
        p = base(rng)
        return {**p, "actor": actor, "log_std": jnp.full_like(p["log_std"], exp.bc_log_std)}

    return dataclasses.replace(setup, init_params=init_params)


# ----------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------


_DIAGNOSTICS = ("success", "approx_kl", "clip_frac", "behaviour_kl", "behaviour_capped_frac", "behaviour_weight_max")


def run_one(exp: Experiment | PixelExperiment, mode: str, seed: int, work_dir: str) -> dict:
    """One training run -> {'mode', 'seed', 'curve': [{'update', 'env_steps', 'success', ...}], ...}.

    `env_steps` is the update's budget (u x steps_per_update, the common grid); `env_steps_consumed` the
    env steps the learner really trained on by then (equal for the MLP workload's continuing envs)."""
    from vlajax.rl import async_loop, loop

    out = os.path.join(work_dir, f"{mode}-seed{seed}")
    shutil.rmtree(out, ignore_errors=True)  # a fresh run (this experiment's own directory)
    cfg = train_config(exp, mode, seed, out)
    setup = make_setup(cfg, exp)
    t0 = time.perf_counter()
    point = lambda u, consumed, e: {"update": u, "env_steps": float(u * exp.steps_per_update),
                                    "env_steps_consumed": float(consumed), "success": e["mean_success"],
                                    "per_task": e.get("per_task", {})}
    if mode == "sync":
        s = loop.train(cfg, setup)
        curve = [point(e["iteration"], e["env_steps"], e) for e in s["evals"]]
        extra = {"train_env_steps": s["env_steps"]}
    else:
        s = async_loop.train_async(cfg, setup)
        if s["status"] != "done":
            raise RuntimeError(f"async run ended with status {s['status']!r}")
        if not s["evals"] or s["evals"][0]["update"] != 0:
            raise RuntimeError("train_async did not evaluate its starting policy at update 0")
        cum = np.cumsum([0.0] + [float(h["env_steps"]) for h in s["history"]])  # consumed after update u
        curve = [point(e["update"], cum[e["update"]], e) for e in s["evals"]]
        stale = [int(v) for h in s["history"] for v in np.ravel(h["staleness"])]
        summ = s["summary"]
        extra = {"staleness_max": max(stale), "staleness_mean": float(np.mean(stale)),
                 "version_span_max": max(int(v) for h in s["history"] for v in np.ravel(h["span"])),
                 "staleness_hist": {str(k): stale.count(k) for k in sorted(set(stale))},
                 "samples_produced": summ.get("counters/produced"), "samples_consumed": summ.get("counters/consumed"),
                 "env_steps_produced": s["env_steps"], "env_steps_consumed": s["consumed_env_steps"],
                 "per_update": [{"update": h.get("update"), "staleness_max": int(np.max(h["staleness"])),
                                 **{k: float(v) for k, v in h.get("metrics", {}).items() if k in _DIAGNOSTICS}}
                                for h in s["history"]],
                 "trainer_idle_ratio": summ.get("trainer/idle_ratio"),
                 "rollouter_idle_ratio": summ.get("rollouter/idle_ratio")}
    result = {"mode": mode, "seed": seed, "curve": curve, "seconds": round(time.perf_counter() - t0, 1),
              "loadavg_1m_end": os.getloadavg()[0], **extra}
    with open(os.path.join(work_dir, f"{mode}-seed{seed}.json"), "w") as f:
        json.dump({"experiment": dataclasses.asdict(exp), "run": result}, f, indent=1)
    return result


def compare(runs: list[dict]) -> list[dict]:
    """Per eval point: the sync seeds' min / mean / max, the async value, inside the band or by how much not."""
    sync = [r for r in runs if r["mode"] == "sync"]
    asyn = [r for r in runs if r["mode"] == "async"]
    if len(asyn) != 1 or not sync:
        raise ValueError("compare needs sync runs and exactly one async run")
    steps = [p["env_steps"] for p in sync[0]["curve"]]
    for r in runs:
        if [p["env_steps"] for p in r["curve"]] != steps:
            raise ValueError(f"{r['mode']} seed {r['seed']}: eval points {[p['env_steps'] for p in r['curve']]} "
                             f"differ from {steps}")
    rows = []
    for i, x in enumerate(steps):
        vals = [r["curve"][i]["success"] for r in sync]
        a = asyn[0]["curve"][i]["success"]
        lo, hi = min(vals), max(vals)
        gap = a - hi if a > hi else (a - lo if a < lo else 0.0)
        rows.append({"update": sync[0]["curve"][i]["update"], "env_steps": x, "sync": vals, "sync_min": lo,
                     "sync_max": hi, "sync_mean": float(np.mean(vals)), "async": a, "inside": gap == 0.0,
                     "gap": gap})
    return rows


def markdown(rows: list[dict], seeds: tuple[int, ...]) -> str:
    head = ("| update | env steps | " + " | ".join(f"sync seed {s}" for s in seeds)
            + " | sync min-max | sync mean | async | inside band |\n|" + "---|" * (6 + len(seeds)) + "\n")
    body = "".join(
        f"| {r['update']} | {r['env_steps']:,.0f} | " + " | ".join(f"{v:.3f}" for v in r["sync"])
        + f" | {r['sync_min']:.3f}-{r['sync_max']:.3f} | {r['sync_mean']:.3f} | {r['async']:.3f} | "
        + ("yes" if r["inside"] else f"no ({r['gap']:+.3f})") + " |\n" for r in rows)
    return head + body


def plot(rows: list[dict], runs: list[dict], exp: Experiment, path: str, extra: list[dict] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray([r["env_steps"] for r in rows]) / 1e3
    pixels = isinstance(exp, PixelExperiment)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.fill_between(x, [r["sync_min"] for r in rows], [r["sync_max"] for r in rows], color="tab:blue", alpha=0.2,
                    label=f"sync, {len(exp.sync_seeds)} seeds (min-max)")
    for r in (r for r in runs if r["mode"] == "sync"):
        ax.plot(x, [p["success"] for p in r["curve"]], color="tab:blue", lw=0.7, ls=":", alpha=0.8)
    ax.plot(x, [r["sync_mean"] for r in rows], color="tab:blue", lw=1.8, label="sync mean")
    slots = "one slot" if exp.slots == 1 else f"{exp.slots} slots"
    ax.plot(x, [r["async"] for r in rows], color="tab:red", lw=1.8, marker="o", ms=3.5,
            label=f"async (staleness thr. {exp.staleness_threshold:g}, {slots}"
                  + (", partial rollout" if exp.partial_rollout else "")
                  + (f", weights {exp.behaviour_weight_mode})" if pixels else ")"))
    for r in extra:
        ax.plot(x, [p["success"] for p in r["curve"]], color="tab:red", lw=1.0, ls="--", marker="x", ms=3.5,
                label=f"async seed {r['seed']} (extra)")
    if pixels:
        ax.set_xlabel("env steps consumed by the learner: update budget (thousands)")
        ax.set_ylabel(f"eval success ({exp.eval_episodes} episodes per task)")
        ax.set_title(f"{exp.suite} suite from pixels, GRPO token head ({exp.preset}) from one SFT checkpoint",
                     fontsize=10)
    else:
        ax.set_xlabel("env steps consumed by the learner (thousands)")
        ax.set_ylabel(f"eval success ({exp.eval_episodes} episodes)")
        ax.set_title(f"{exp.task}, state MLP PPO from a BC warm start", fontsize=10)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _load_saved(exp, mode: str, seed: int, work_dir: str) -> dict | None:
    path = os.path.join(work_dir, f"{mode}-seed{seed}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        saved = json.load(f)
    want, got = json.loads(json.dumps(dataclasses.asdict(exp))), dict(saved["experiment"])
    if "behaviour_weight_mode" in want:  # files written before the field: 'drop'; sync runs never use it
        got.setdefault("behaviour_weight_mode", "drop")
        if mode == "sync":
            got["behaviour_weight_mode"] = want["behaviour_weight_mode"]
    if got != want:
        raise ValueError(f"{path} was written by another experiment config: {saved['experiment']}")
    return saved["run"]


def band_check(rows: list[dict], run: dict) -> list[dict]:
    """Each eval point of an extra async `run` against the sync band of `rows`."""
    out = []
    for r, p in zip(rows, run["curve"], strict=True):
        a = p["success"]
        gap = a - r["sync_max"] if a > r["sync_max"] else (a - r["sync_min"] if a < r["sync_min"] else 0.0)
        out.append({"update": r["update"], "async": a, "inside": gap == 0.0, "gap": gap})
    return out


def run(exp: Experiment | PixelExperiment, json_path: str, plot_path: str, work_dir: str, md_path: str,
        only: list[tuple[str, int]] | None = None, reuse: bool = False,
        extra_async_seeds: tuple[int, ...] = ()) -> dict | None:
    """Every run (sync seeds, then async), the comparison; writes JSON, markdown and the plot.
    `only`: run just these (mode, seed) runs and stop (no comparison); `reuse`: load runs already in `work_dir`;
    `extra_async_seeds`: more async runs, each checked against the band (reported, not in the verdict)."""
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    os.makedirs(work_dir, exist_ok=True)
    bc = None if isinstance(exp, PixelExperiment) else warm_start(exp)[1]
    plan = [("sync", s) for s in exp.sync_seeds] + [("async", exp.async_seed)]
    plan += [("async", s) for s in extra_async_seeds]
    runs = []
    for mode, seed in (only or plan):
        if reuse and (saved := _load_saved(exp, mode, seed, work_dir)) is not None:
            print(f"== {mode} seed {seed}: reused {work_dir}/{mode}-seed{seed}.json", flush=True)
            runs.append(saved)
            continue
        print(f"== {mode} seed {seed} (load {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M:%S')})", flush=True)
        runs.append(run_one(exp, mode, seed, work_dir))
        print(json.dumps(runs[-1]), flush=True)
    if only:
        return None
    extra = runs[len(runs) - len(extra_async_seeds):] if extra_async_seeds else []
    runs = runs[: len(runs) - len(extra)]
    rows = compare(runs)
    result = {"experiment": dataclasses.asdict(exp), "warm_start": bc, "runs": runs, "rows": rows,
              "all_inside": all(r["inside"] for r in rows), "points_outside": sum(not r["inside"] for r in rows),
              "extra_runs": [r | {"band_check": band_check(rows, r)} for r in extra],
              "seconds": round(time.perf_counter() - t0, 1), "loadavg_1m": [load0, os.getloadavg()[0]],
              "command": " ".join(["experiments/async_sample_efficiency.py", *sys.argv[1:]])}
    if bc is None:
        del result["warm_start"]
    md = markdown(rows, exp.sync_seeds)
    for p in (json_path, md_path):
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    with open(md_path, "w") as f:
        f.write(md)
    plot(rows, runs, exp, plot_path, extra)
    print(md, end="")
    print(f"async inside the sync band at {len(rows) - result['points_outside']}/{len(rows)} eval points", flush=True)
    return result


def _parse_runs(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        mode, _, seed = item.partition(":")
        if mode not in ("sync", "async") or not seed.isdigit():
            raise ValueError(f"--runs wants mode:seed items (mode sync or async), got {item!r}")
        out.append((mode, int(seed)))
    return out


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line (`--help` lists every option with its comment)."""

    debug: bool = False
    workload: Literal['mlp', 'grpo-tokens'] = "mlp"
    init_from: str | None = None  # grpo-tokens: the SFT checkpoint directory
    json: str = "runs/experiments/async_sample_efficiency.json"
    plot: str = "runs/experiments/async_sample_efficiency.png"
    md: str = "runs/experiments/async_sample_efficiency.md"
    work_dir: str = "runs/experiments/async_sample_efficiency"
    bc_steps: int | None = None  # warm-start Adam steps (default: the config's)
    runs: str | None = None  # only these runs, e.g. sync:0,async:0 (no comparison)
    reuse: bool = False  # load runs already saved in --work-dir
    extra_async_seeds: str = ""  # more async seeds, checked against the band, e.g. 1,2
    behaviour_weight_mode: Literal['drop', 'truncate'] | None = None
    """grpo-tokens: rl.behaviour_weight_mode of the runs (only async uses it)"""


if __name__ == "__main__":
    a = cli.parse(Args, None, description=__doc__.split("\n")[0])
    from vlajax import compile_cache

    compile_cache.enable()
    if a.workload == "grpo-tokens":
        exp = get_pixel_config(a.debug, a.init_from)
        if a.behaviour_weight_mode:
            exp = dataclasses.replace(exp, behaviour_weight_mode=a.behaviour_weight_mode)
    else:
        exp = get_config(a.debug)
        if a.bc_steps is not None:
            exp = dataclasses.replace(exp, bc_steps=a.bc_steps)
    extra_seeds = tuple(int(x) for x in a.extra_async_seeds.split(",") if x)
    run(exp, a.json, a.plot, a.work_dir, a.md, only=_parse_runs(a.runs) if a.runs else None, reuse=a.reuse,
        extra_async_seeds=extra_seeds)
